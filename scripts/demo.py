"""`make demo`: text generation on the neuron device with the embedded demo model."""
import argparse
import os
import time
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import torch_neuronx  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_MODEL = os.path.join(HERE, "..", "demo", "model")
PROMPTS = ["The list data type has some more methods.", "To read a file, use"]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--prompt", action="append", help="prompt (repeatable); default: two built-in ones")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    args = parser.parse_args()
    if not os.path.isdir(args.model):
        raise SystemExit(f"model folder {args.model!r} not found; train it with scripts/train_demo_model.py")

    properties = torch.neuron.get_device_properties(0)
    print(f"device: {torch.neuron.get_device_name(0)} ({properties.name}"
          f"{', simulated' if getattr(properties, 'is_simulated', False) else ''}), "
          f"{torch.neuron.device_count()} visible cores, {properties.total_memory / 2**30:.0f} GiB HBM per core")
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=getattr(torch, args.dtype),
                                                 device_map="neuron")
    print(f"model: {model.config.model_type}, {model.num_parameters() / 1e6:.1f}M parameters, "
          f"{args.dtype}, on {model.device}")
    for prompt in args.prompt or PROMPTS:
        inputs = tokenizer(prompt, return_tensors="pt").to("neuron")
        start = time.perf_counter()
        out = model.generate(**inputs, max_new_tokens=args.max_new_tokens, do_sample=False,
                             repetition_penalty=1.3, pad_token_id=tokenizer.eos_token_id)
        elapsed = time.perf_counter() - start
        new_tokens = out.shape[1] - inputs["input_ids"].shape[1]
        text = tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
        print("\nprompt:    ", prompt)
        print("generated: ", text.strip())
        print(f"speed:      {new_tokens} tokens in {elapsed:.2f} s = {new_tokens / elapsed:.1f} tokens/s")
    # The compiled path: a static KV cache makes generate() compile the forward with
    # torch.compile(backend="neuron") (transformers' auto-compile for device type neuron).
    prompt = (args.prompt or PROMPTS)[0]
    inputs = tokenizer(prompt, return_tensors="pt").to("neuron")
    options = dict(max_new_tokens=args.max_new_tokens, do_sample=False, pad_token_id=tokenizer.eos_token_id)
    eager = model.generate(**inputs, cache_implementation="static", disable_compile=True, **options)
    torch_neuronx.reset_dynamo_metrics()
    timings = []
    for _ in range(2):
        start = time.perf_counter()
        compiled = model.generate(**inputs, cache_implementation="static", **options)
        timings.append(time.perf_counter() - start)
    records = torch_neuronx.get_dynamo_metrics()
    new_tokens = compiled.shape[1] - inputs["input_ids"].shape[1]
    print("\ncompiled (static cache, torch.compile backend 'neuron'):")
    print(f"  graphs compiled: {len(records)} "
          f"({', '.join(f'{r.graph_name}: {r.graph_node_count} nodes' for r in records)})")
    print(f"  first call (compiles): {timings[0]:.2f} s; second call: {new_tokens} tokens in {timings[1]:.2f} s = "
          f"{new_tokens / timings[1]:.1f} tokens/s")
    print(f"  tokens equal to eager: {'yes' if torch.equal(compiled.cpu(), eager.cpu()) else 'NO'}")
    print(f"\ndevice memory: {torch.neuron.memory_allocated() / 2**20:.1f} MiB allocated, "
          f"peak {torch.neuron.max_memory_allocated() / 2**20:.1f} MiB, "
          f"{torch.neuron.memory_reserved() / 2**20:.1f} MiB reserved of "
          f"{torch.neuron.get_device_properties(0).total_memory / 2**30:.0f} GiB")


if __name__ == "__main__":
    main()
