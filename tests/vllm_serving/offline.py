"""Greedy offline generation with vLLM's LLM (a child process of tests/vllm_serving): argv[1] a model
folder, argv[2] the JSON file to write ([token ids] per prompt), argv[3] LLM keyword arguments as
JSON. The platform is vLLM's choice: the neuron plugin, or VLLM_TARGET_DEVICE=cpu for vLLM CPU.
Twelve prompts of different lengths, several sharing a prefix (prefix caching hits), each with its
own output length, at most 4 running at once: requests join and leave the batch mid-flight."""
import json
import os
import sys

WORDS = "the quick brown fox jumps over the lazy dog and then runs far away".split()
PROMPTS = [" ".join(WORDS[: 1 + (i * 7) % 13]) * (1 + i % 3) for i in range(12)]
MAX_TOKENS = [4 + (i * 5) % 19 for i in range(12)]


def main():
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import LLM, SamplingParams
    options = dict(max_model_len=256, dtype="float32", seed=0, kv_cache_memory_bytes=64 << 20, enforce_eager=True,
                   max_num_seqs=4)
    options.update(json.loads(sys.argv[3]) if len(sys.argv) > 3 else {})
    llm = LLM(model=sys.argv[1], **options)
    outs = llm.generate(PROMPTS, [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True) for n in MAX_TOKENS])
    from vllm.platforms import current_platform
    from torch._dynamo.utils import counters
    # the programs the engine compiled, when it runs in this process (no TP workers)
    graphs = counters["neuron"]["compiled_graphs"]
    with open(sys.argv[2], "w") as handle:
        json.dump([{"tokens": list(o.outputs[0].token_ids), "text": o.outputs[0].text,
                    "platform": type(current_platform).__name__, "compiled_graphs": graphs} for o in outs], handle)


if __name__ == "__main__":
    main()
