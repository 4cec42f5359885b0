"""Collective bandwidth, one side of `make bench` (bench/bench.py launches it under torchrun):
allreduce and allgather of neuron tensors (the "neuron" backend: shared memory on one host)
against the same collectives of CPU tensors on Gloo, in one process group
("cpu:gloo,neuron:neuron"), sizes interleaved A B A B. Rank 0 prints one JSON object:
per collective and size, median seconds of both sides. memcpy_bandwidth() is the ceiling a
copy-based transport can approach (bench.py measures it in one process, before the ranks run).

Bus bandwidth as nccl-tests defines it: allreduce busbw = size / time * 2(n-1)/n, allgather
busbw = (n * size) / time * (n-1)/n, where size is each rank's tensor."""
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

import torch_neuronx  # noqa: F401  (registers the device and the backend)

SIZES = [1 << 10, 16 << 10, 256 << 10, 1 << 20, 16 << 20, 64 << 20, 256 << 20]


def iterations(size):
    return max(3, min(100, (32 << 20) // size))


def memcpy_bandwidth():
    src = torch.ones(64 << 20, dtype=torch.uint8)
    dst = torch.empty_like(src)
    dst.copy_(src)
    samples = []
    for _ in range(5):
        start = time.perf_counter()
        dst.copy_(src)
        samples.append(time.perf_counter() - start)
    return src.numel() / statistics.median(samples)


def main():
    dist.init_process_group("cpu:gloo,neuron:neuron")
    rank, world = dist.get_rank(), dist.get_world_size()
    sizes = [s for s in SIZES if s <= int(os.environ.get("BENCH_MAX_BYTES", str(SIZES[-1])))]
    results = {"world": world, "allreduce": {}, "allgather": {}}
    for size in sizes:
        n = size // 4
        count = iterations(size)
        for collective in ("allreduce", "allgather"):
            sides = {}
            tensors = {}
            for device in ("neuron", "cpu"):
                t = torch.ones(n, device=device)
                out = torch.empty(n * world, device=device) if collective == "allgather" else None
                tensors[device] = (t, out)

            def run(device, collective=collective):
                t, out = tensors[device]
                if collective == "allreduce":
                    dist.all_reduce(t)
                else:
                    dist.all_gather_into_tensor(out, t)
                if device == "neuron":
                    torch.neuron.synchronize()

            for device in ("neuron", "cpu"):  # warm up both
                run(device)
            samples = {"neuron": [], "cpu": []}
            for _ in range(count):  # interleaved: neuron, cpu, neuron, cpu, ...
                for device in ("neuron", "cpu"):
                    start = time.perf_counter()
                    run(device)
                    samples[device].append(time.perf_counter() - start)
            for device in ("neuron", "cpu"):
                sides[device] = statistics.median(samples[device])
            # every rank's medians differ a little: take the slowest rank's (the collective's time)
            gathered = [None] * world
            dist.all_gather_object(gathered, sides)
            results[collective][str(size)] = {d: max(g[d] for g in gathered) for d in ("neuron", "cpu")}
            del tensors
    if rank == 0:
        print(json.dumps(results))
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
