"""Tensor-parallel greedy generation, one side of `make bench` (bench/bench.py): a Llama-style
model (bench/tp_generate.py --make DIR writes one from a config, random weights), loaded with
`DistributedConfig(tp_size=world)` under torchrun (or on one device without torchrun), greedy
`generate`; rank 0 prints tokens/s (median of --repeats) and the tokens of the last run."""
import argparse
import json
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch_neuronx  # noqa: E402,F401
from transformers import AutoModelForCausalLM, LlamaConfig  # noqa: E402


def make(path):
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=2048, hidden_size=256, intermediate_size=704, num_hidden_layers=4,
                         num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=256)
    AutoModelForCausalLM.from_config(config).save_pretrained(path)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--make", action="store_true")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.make:
        return make(args.model)
    if "WORLD_SIZE" in os.environ:
        from transformers.distributed import DistributedConfig
        dist.init_process_group(backend="neuron")
        model = AutoModelForCausalLM.from_pretrained(args.model,
                                                     distributed_config=DistributedConfig(tp_size=dist.get_world_size()))
    else:
        model = AutoModelForCausalLM.from_pretrained(args.model, device_map="neuron")
    ids = torch.tensor([[1, 300, 301, 302, 303, 304, 305, 306]], device=model.device)

    def generate():
        return model.generate(ids, max_new_tokens=args.tokens, min_new_tokens=args.tokens, do_sample=False)

    generate()
    samples = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        tokens = generate()
        samples.append(time.perf_counter() - start)
    if not dist.is_initialized() or dist.get_rank() == 0:
        print(json.dumps({"tok_s": args.tokens / statistics.median(samples), "tokens": tokens.tolist()}))
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
