"""One side of the compiled-decode benchmark (bench/bench.py runs each side in a fresh child
process, so that a first call includes everything a new process pays): greedy decode with a
static KV cache of a Llama-style model built from a config (random weights, seed 0).

Modes: cpu-eager, neuron-eager (static cache, no compile), cpu-inductor (transformers'
auto-compile with Inductor), neuron-compiled (backend "neuron"; the disk cache lives in
TORCH_NEURONX_NEFF_CACHE_DIR, so a second process with the same folder is a warm start).
Prints one JSON line: first-call seconds (the first generate(), compile included), steady
tokens/s (median of --repeats), graphs compiled."""
import argparse
import json
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import torch_neuronx  # noqa: E402,F401
from transformers import CompileConfig, LlamaConfig, LlamaForCausalLM  # noqa: E402

SIZES = {
    "small": dict(hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=4),
    "base": dict(hidden_size=768, intermediate_size=2560, num_hidden_layers=12, num_attention_heads=12,
                 num_key_value_heads=12),
}


def build(size):
    config = LlamaConfig(vocab_size=32000, max_position_embeddings=256, tie_word_embeddings=True, **SIZES[size])
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    model.generation_config.eos_token_id = None  # every run makes exactly --tokens tokens
    return model


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--mode", choices=["cpu-eager", "neuron-eager", "cpu-inductor", "neuron-compiled"])
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    device = "cpu" if args.mode.startswith("cpu") else "neuron"
    model = build(args.size).to(device)
    ids = torch.randint(1, 32000, (1, 8), generator=torch.Generator().manual_seed(1)).to(device)
    options = dict(max_new_tokens=args.tokens, do_sample=False, pad_token_id=0,
                   cache_implementation="static")
    if args.mode.endswith("eager"):
        options["disable_compile"] = True
    elif args.mode == "cpu-inductor":
        config = CompileConfig(backend="inductor", fullgraph=True)
        config._compile_all_devices = True  # transformers auto-compiles on cuda/xpu/neuron/tpu only
        options["compile_config"] = config
    sync = torch.neuron.synchronize if device == "neuron" else (lambda: None)

    def generate():
        with torch.no_grad():
            out = model.generate(ids, **options)
        sync()
        return out

    start = time.perf_counter()
    first = generate()
    first_call = time.perf_counter() - start
    samples = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        generate()
        samples.append(time.perf_counter() - start)
    from torch._dynamo.utils import counters
    print(json.dumps({"first_call_s": first_call, "tok_s": args.tokens / statistics.median(samples),
                      "graphs": counters["neuron"]["compiled_graphs"] + counters["inductor"]["fxgraph_cache_miss"]
                      + counters["inductor"]["fxgraph_cache_hit"],
                      "tokens": first[0, -args.tokens:].tolist()}))


if __name__ == "__main__":
    main()
