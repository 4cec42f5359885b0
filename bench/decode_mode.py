"""One side of the asynchronous-vs-launch-blocking decode benchmark. bench/bench.py starts one
child per mode (the mode is fixed when the runtime starts) and alternates them call by call:
each line read on stdin runs one greedy decode of the demo model on neuron (--device cpu: in
PyTorch's own CPU eager mode, the reference; no predicted time there) and answers
"<seconds> <host waits> <seconds the host was blocked in them> <predicted device ms> <launches>
<concatenation groups> <ops in them>" (the predicted Trainium time and the launches of the call, the
groups of Note [Adaptive Eager Execution]; the predicted time is nan where bench/clock_overhead.py
turns the clock off), so every mode sees the same machine within a fraction of a second
(these machines' speed drifts by tens of percent over seconds)."""
import argparse
import os
import sys
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
    parser.add_argument("--device", default="neuron", choices=("neuron", "cpu"))
    args = parser.parse_args()
    model = AutoModelForCausalLM.from_pretrained(os.path.join(HERE, "..", "demo", "model"),
                                                 dtype=getattr(torch, args.dtype), device_map=args.device)
    ids = torch.tensor([[1, 300, 301, 302, 303, 304, 305, 306]], device=args.device)
    counters = torch_neuronx._sim._C.stream_counters
    clock_on = os.environ.get("NEURON_SIM_DEVICE_CLOCK", "1") != "0" and args.device == "neuron"
    device_time = torch_neuronx.device_time if clock_on else (lambda: float("nan"))

    def generate():
        model.generate(ids, max_new_tokens=args.tokens, min_new_tokens=args.tokens, do_sample=False)

    generate()  # warm up (and, asynchronous, check every op's meta kernel once)
    torch.neuron.synchronize()
    print("ready", flush=True)
    for _ in sys.stdin:
        _, waits_before = counters()
        waited_before = torch_neuronx._sim._C.stream_wait_seconds()
        device_before = device_time()
        groups_before, grouped_before = torch_neuronx._sim._C.concatenation_counters()
        torch_neuronx._sim._C._count_launches(True)
        start = time.perf_counter()
        generate()
        torch.neuron.synchronize()
        elapsed = time.perf_counter() - start
        launches = torch_neuronx._sim._C._launch_counts()
        torch_neuronx._sim._C._count_launches(False)
        _, waits_after = counters()
        waited = torch_neuronx._sim._C.stream_wait_seconds() - waited_before
        device_ms = device_time() - device_before
        groups, grouped = (after - before for after, before in
                           zip(torch_neuronx._sim._C.concatenation_counters(), (groups_before, grouped_before)))
        # one launch per op, less the ops that joined a group (the group's launch is its first op's)
        count = sum(launches.values()) - launches.get("fused", 0)
        print(f"{elapsed} {waits_after - waits_before} {waited} {device_ms} {count} {groups} {grouped}", flush=True)


if __name__ == "__main__":
    main()
