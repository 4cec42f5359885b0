"""`make bench`, Adaptive Eager Execution part (Note [Adaptive Eager Execution], csrc/Launch.h):
greedy decode of the demo model on neuron in four eager modes, one child process each, driven
call by call in a rotating order (bench.py's decode_modes): launch-blocking, asynchronous,
asynchronous with AEE (TORCH_NEURONX_ENABLE_CONCATENATION=1), and AEE with every op queued (the
calling thread's own work alone: the bound on what moving kernels off it can gain), beside the
same decode in PyTorch's CPU eager mode (the reference: same kernels, same Python). Host
tokens/s side by side, and the device clock's predicted trn2 time per token of the same calls.
Writes its own section of BENCHMARKS.md (replaced in place, the rest of the file kept), with the
machine it ran on."""
import argparse
import os
import platform
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault("OMP_NUM_THREADS", "1")

from bench import cpu_description, decode_modes  # noqa: E402
from bench_sections import write_section  # noqa: E402

BEGIN, END = "<!-- aee: begin (bench/aee.py) -->", "<!-- aee: end -->"


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output", default="BENCHMARKS.md")
    parser.add_argument("--calls", type=int, default=48)
    parser.add_argument("--tokens", type=int, default=32)
    args = parser.parse_args()
    load_at_start = os.getloadavg()[0]
    rows = []
    for dtype in ("float32", "bfloat16"):
        modes, ratio = decode_modes(dtype, args.tokens, args.calls,
                                    modes=("blocking", "async", "aee", "queued", "cpu"))
        blocking, plain, fused, queued = modes["blocking"], modes["async"], modes["aee"], modes["queued"]
        cpu = modes["cpu"]
        rows.append(f"| {dtype} | {blocking[0]:.1f} | {plain[0]:.1f} | {fused[0]:.1f} | {ratio['async']:.2f} | "
                    f"{ratio['aee']:.2f} (target >= 1.3) | {queued[0]:.1f} ({ratio['queued']:.2f}) | "
                    f"{cpu[0]:.1f} ({ratio['cpu']:.2f}) | "
                    f"{fused[5]:.1f} | {plain[3]:.2f} ({plain[4]:.0f}) | "
                    f"{fused[3]:.2f} ({fused[4]:.0f}) | {plain[3] / fused[3]:.2f} (target >= 2) |")
    lines = [
        BEGIN,
        "## Adaptive Eager Execution: eager decode of the demo model",
        "",
        f"bench/aee.py: greedy decode, {args.tokens} new tokens after an 8-token prompt, one child process per "
        f"mode, {args.calls} calls driven in a rotating order; tokens/s are medians, ratios the medians of each "
        f"call against the neighbouring launch-blocking call. AEE = asynchronous mode with "
        f"TORCH_NEURONX_ENABLE_CONCATENATION=1. Predicted: the device clock's trn2 time per token of the same "
        f"calls (eager launches per token in brackets; an op that joins a group has no launch of its own).",
        f"Machine: {platform.machine()}, {cpu_description()}, {os.cpu_count()} cores, "
        f"{time.strftime('%Y-%m-%d')}; load average (1 min) at start {load_at_start:.2f}, at end "
        f"{os.getloadavg()[0]:.2f}.",
        "",
        "| dtype | launch-blocking tok/s | asynchronous tok/s | async + AEE tok/s | async / blocking "
        "| async + AEE / blocking | every op queued tok/s (/ blocking) | PyTorch CPU eager tok/s (/ blocking) "
        "| ops per group (host) "
        "| predicted ms per token without AEE (launches) | predicted with AEE (launches) | predicted without / with |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "On the host a group saves the hand-over of each op to the stream's worker, not the op's work; "
        "the demo model's decode step is mostly Python (Hugging Face's loop and the model's modules) on "
        "the calling thread, which no execution mode shortens, so the host gains are bounded by the "
        "kernels' share of the step. The column 'every op queued' (AEE with NEURON_SIM_INLINE_BYTES=0) "
        "measures that bound: there the calling thread runs no kernel at all, only Python, PyTorch's "
        "dispatch and the hand-over of each op. The column 'PyTorch CPU eager' is the same decode on "
        "device cpu (the ATen kernels the simulator runs, the same Python, no device): the bar for the "
        "simulator's own per-op work, which an asynchronous mode can pass only by the kernels' share of "
        "its step. "
        "On the device the eager step is launch-bound (about 270 µs per "
        "eager launch on trn2, docs/device-clock.md), and fusing the elementwise chains between the "
        "matmuls removes about two launches in three.",
        END,
    ]
    section = "\n".join(lines)
    write_section(args.output, BEGIN, END, section)
    print(section)


if __name__ == "__main__":
    main()
