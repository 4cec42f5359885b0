"""One side of the asynchronous-vs-launch-blocking decode benchmark (bench/bench.py runs it in
child processes, alternating the two modes): greedy decode of the demo model on neuron.
Prints tokens/s (median of `--repeats`) and host waits per decode step."""
import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import torch_neuronx  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    model = AutoModelForCausalLM.from_pretrained(os.path.join(HERE, "..", "demo", "model"),
                                                 dtype=getattr(torch, args.dtype), device_map="neuron")
    ids = torch.tensor([[1, 300, 301, 302, 303, 304, 305, 306]], device="neuron")

    def generate():
        model.generate(ids, max_new_tokens=args.tokens, min_new_tokens=args.tokens, do_sample=False)

    generate()  # warm up (and, asynchronous, check every op's meta kernel once)
    torch.neuron.synchronize()
    counters = torch_neuronx._sim._C.stream_counters
    samples = []
    _, waits_before = counters()
    for _ in range(args.repeats):
        start = time.perf_counter()
        generate()
        torch.neuron.synchronize()
        samples.append(time.perf_counter() - start)
    _, waits_after = counters()
    print(f"{args.tokens / statistics.median(samples):.2f} "
          f"{(waits_after - waits_before) / (args.repeats * args.tokens):.2f}")


if __name__ == "__main__":
    main()
