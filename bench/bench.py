"""`make bench`: neuron vs CPU, measured side by side in one run; writes BENCHMARKS.md.

Every figure is a ratio of medians over interleaved repeats (neuron, cpu, neuron, cpu, ...),
so that machine noise hits both sides alike."""
import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# One compute thread per process (children inherit it): these 2-core machines run other jobs,
# and with 2 OpenMP threads a busy core makes the other spin, which collapsed timings 5-fold
# (measured: 18 vs 87 tok/s for the same CPU decode). NEURON_BENCH_THREADS overrides.
os.environ["OMP_NUM_THREADS"] = os.environ.get("NEURON_BENCH_THREADS", "1")

import torch  # noqa: E402
import torch_neuronx  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from bench_sections import write_main_part  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODEL = os.path.join(HERE, "..", "demo", "model")


def timed(fn, sync):
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start


def side_by_side(make_fn, repeats):
    """make_fn(device) -> zero-arg callable; returns (median neuron s, median cpu s)."""
    fns = {d: make_fn(d) for d in ("neuron", "cpu")}
    syncs = {"neuron": torch.neuron.synchronize, "cpu": lambda: None}
    for d in fns:
        timed(fns[d], syncs[d])  # warm up
    samples = {"neuron": [], "cpu": []}
    for _ in range(repeats):
        for d in ("neuron", "cpu"):
            samples[d].append(timed(fns[d], syncs[d]))
    return statistics.median(samples["neuron"]), statistics.median(samples["cpu"])


def small_op(device, iterations=2000):
    a = torch.ones(1, device=device)
    b = torch.ones(1, device=device)

    def run():
        for _ in range(iterations):
            a + b
    return run


def large(op):
    def make(device):
        g = torch.Generator().manual_seed(0)
        if op == "matmul":
            x = torch.randn(1024, 1024, generator=g).to(device)
            return lambda: x @ x
        if op == "add":
            x = torch.randn(16 * 2**20, generator=g).to(device)
            return lambda: x + x
        x = torch.randn(4096, 4096, generator=g).to(device)
        return lambda: torch.softmax(x, dim=-1)
    return make


def decode(dtype, tokens):
    def make(device):
        model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=dtype, device_map=device)
        ids = torch.tensor([[1, 300, 301, 302, 303, 304, 305, 306]], device=device)

        def run():
            model.generate(ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)
        return run
    return make


# The eager execution modes the decode rows compare (the mode is fixed when the runtime starts):
# launch-blocking, asynchronous, and asynchronous with Adaptive Eager Execution (Note [Adaptive
# Eager Execution]: TORCH_NEURONX_ENABLE_CONCATENATION=1).
DECODE_MODES = {
    "blocking": {"NEURON_LAUNCH_BLOCKING": "1"},
    "async": {"NEURON_LAUNCH_BLOCKING": "0", "TORCH_NEURONX_ENABLE_CONCATENATION": "0"},
    "aee": {"NEURON_LAUNCH_BLOCKING": "0", "TORCH_NEURONX_ENABLE_CONCATENATION": "1"},
}
# AEE with every op queued (none run at the call, Note [Small ops on an idle stream]): the calling
# thread runs no kernel, only Python, PyTorch's dispatch and the hand-over
DECODE_MODES["queued"] = {**DECODE_MODES["aee"], "NEURON_SIM_INLINE_BYTES": "0"}
# The reference: the same decode in PyTorch's own CPU eager mode (the device the simulator's kernels
# come from), with the same thread count; launch-blocking keeps the idle runtime's worker asleep
DECODE_MODES["cpu"] = {"NEURON_LAUNCH_BLOCKING": "1"}
DECODE_DEVICES = {"cpu": "cpu"}  # the others run on neuron


def decode_modes(dtype, tokens, calls, modes=("async", "blocking")):
    """Eager decode in several modes: one child process per mode, all loaded, then driven call by
    call in a rotating order, so drift of the machine's speed hits all alike. Returns per mode the
    medians of (tokens/s, host waits per token, seconds the host was blocked per token, predicted
    device ms per token, launches per token, ops per concatenation group), and per mode the median
    of the ratios of each call's speed to the neighbouring launch-blocking call's."""
    children, logs = {}, {}
    for mode in modes:
        logs[mode] = tempfile.TemporaryFile("w+")
        children[mode] = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "decode_mode.py"), "--dtype", dtype, "--tokens", str(tokens),
             "--device", DECODE_DEVICES.get(mode, "neuron")],
            env=dict(os.environ, **DECODE_MODES[mode]), stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=logs[mode], text=True)

    def failed(mode, what):
        children[mode].kill()
        children[mode].wait()
        logs[mode].seek(0)
        settings = [f"{name}={value}" for name, value in DECODE_MODES[mode].items()]
        if mode in DECODE_DEVICES:
            settings.append(f"device {DECODE_DEVICES[mode]}")
        settings = ", ".join(settings)
        return RuntimeError(f"decode_mode.py ({dtype}, {settings}) {what}; its stderr:\n"
                            + logs[mode].read()[-3000:])

    try:
        for mode, child in children.items():
            if child.stdout.readline().strip() != "ready":
                raise failed(mode, "failed to start")

        def call(mode):
            child = children[mode]
            child.stdin.write("go\n")
            child.stdin.flush()
            answer = child.stdout.readline().split()
            if len(answer) != 7:
                raise failed(mode, "failed")
            return [float(value) for value in answer]

        results = {mode: [] for mode in modes}
        ratios = {mode: [] for mode in modes}
        for i in range(calls):
            order = modes[i % len(modes):] + modes[:i % len(modes)]
            if (i // len(modes)) % 2:
                order = order[::-1]
            got = {mode: call(mode) for mode in order}
            for mode, value in got.items():
                results[mode].append(value)
                ratios[mode].append(got["blocking"][0] / value[0])  # speed of mode / launch-blocking
    finally:
        for mode, child in children.items():
            if child.poll() is None:
                child.stdin.close()
                child.wait(timeout=60)
            logs[mode].close()
    medians = {mode: (tokens / statistics.median(r[0] for r in runs),
                      statistics.median(r[1] for r in runs) / tokens,
                      statistics.median(r[2] for r in runs) / tokens,
                      statistics.median(r[3] for r in runs) / tokens,
                      statistics.median(r[4] for r in runs) / tokens,
                      statistics.median(r[6] / r[5] for r in runs) if all(r[5] for r in runs) else 0.0)
               for mode, runs in results.items()}
    return medians, {mode: statistics.median(values) for mode, values in ratios.items()}


def free_port():
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def torchrun(world, script, *args, env=None):
    """Runs `script` on `world` ranks under torchrun; returns rank 0's last line of output."""
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={world}",
                          f"--master-port={free_port()}", os.path.join(HERE, script), *args],
                         capture_output=True, text=True, check=True, timeout=1800, env=env)
    return out.stdout.strip().splitlines()[-1]


def collectives(world):
    """bench/collectives.py on `world` ranks: medians per collective and size, both transports."""
    import json
    return json.loads(torchrun(world, "collectives.py"))


def run_tp_generate(world, *args, env=None):
    """bench/tp_generate.py on `world` ranks (tp 1: one process, no torchrun): rank 0's JSON line."""
    import json
    if world > 1:
        return json.loads(torchrun(world, "tp_generate.py", *args, env=env))
    out = subprocess.run([sys.executable, os.path.join(HERE, "tp_generate.py"), *args], check=True,
                         capture_output=True, text=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def tp_generate(tokens, rounds=2):
    """bench/tp_generate.py for tp 1 (no torchrun), 2 and 4, per model size, eager and compiled
    (--compiled): tokens/s (median over `rounds` rounds, the six runs of a size one after another in
    each) and whether the tokens equal tp 1's; and for the small model, where the time of an eager
    step goes on each rank (--breakdown) at tp 1 and 2."""
    script = os.path.join(HERE, "tp_generate.py")
    results, breakdowns, guards, phases = {}, {}, {}, {}
    modes = {"eager": [], "compiled": ["--compiled"]}
    for size in ("small", "medium"):
        with tempfile.TemporaryDirectory() as model:
            subprocess.run([sys.executable, script, model, "--make", "--size", size], check=True, capture_output=True)
            speeds = {(mode, world): [] for mode in modes for world in (1, 2, 4)}
            same = {}
            for _ in range(rounds):
                for mode, flags in modes.items():
                    one = run_tp_generate(1, model, "--tokens", str(tokens), *flags)
                    speeds[mode, 1].append(one["tok_s"])
                    last = {}
                    for world in (2, 4):
                        got = last[world] = run_tp_generate(world, model, "--tokens", str(tokens), *flags)
                        speeds[mode, world].append(got["tok_s"])
                        same[mode, world] = same.get((mode, world), True) and got["tokens"] == one["tokens"]
                    if mode == "compiled":
                        guards.setdefault((size, "compiled", 1), []).append(one.get("guard_us"))
                        for world in (2, 4):
                            guards.setdefault((size, "compiled", world), []).append(last[world].get("guard_us"))
                    if size == "small" and mode == "compiled":  # PyTorch's nn-module guard filter (a user's option)
                        for world in (1, 2, 4):
                            got = run_tp_generate(world, model, "--tokens", str(tokens), "--compiled",
                                                  "--skip-module-guards")
                            speeds.setdefault(("unguarded", world), []).append(got["tok_s"])
                            guards.setdefault((size, "unguarded", world), []).append(got.get("guard_us"))
                            same["unguarded", world] = same.get(("unguarded", world), True) and got["tokens"] == one["tokens"]
                    if size == "small" and mode == "compiled":  # where a compiled decode step's time goes
                        for run, threads, world, extra in (("tp 1", "1", 1, ()), ("tp 1", "2", 1, ()), ("tp 2", "1", 2, ()),
                                                           ("tp 2, nn-module guards skipped", "1", 2,
                                                            ("--skip-module-guards",))):
                            env = dict(os.environ, OMP_NUM_THREADS=threads, NEURON_SIM_PROGRAM_PROFILE="1")
                            got = run_tp_generate(world, model, "--tokens", str(tokens), "--compiled", "--phases",
                                                  "--repeats", "5", *extra, env=env)["phases"]
                            for rank, parts in enumerate(got):
                                phases.setdefault((run, threads, rank), []).append(parts)
                    if size == "small" and mode == "compiled":  # the graph cut at its collectives, as before
                        for world in (2, 4):
                            got = run_tp_generate(world, model, "--tokens", str(tokens), "--compiled",
                                                  "--cut-at-collectives")
                            speeds.setdefault(("cut", world), []).append(got["tok_s"])
                            same["cut", world] = same.get(("cut", world), True) and got["tokens"] == one["tokens"]
            results[size] = {key: (statistics.median(s), same.get(key, True)) for key, s in speeds.items()}
            if size == "small":
                for world in (1, 2):
                    breakdowns[world] = run_tp_generate(world, model, "--tokens", str(tokens),
                                                        "--breakdown")["ms_per_token"]
    guard_us = {key: statistics.median(times) if None not in times else None for key, times in guards.items()}
    phase_ms = {key: {part: statistics.median(run[part] if part in run else run["steps"].get(part, 0.0) for run in runs)
                      for part in ("total", "programs", "host", "around", "generate", "alone", "matmuls",
                                   "collectives", "other steps")}
                for key, runs in phases.items()}
    return results, breakdowns, guard_us, phase_ms


def phases_lines(phase_ms):
    """BENCHMARKS.md's table of where a compiled decode step of the small model goes
    (tp_generate()'s phase_ms), and the bounds it gives for tp 2 / tp 1."""
    one = phase_ms[("tp 1", "1", 0)]
    free = one["host"] + one["programs"] / 2
    ranks2 = [parts for (run, _, _), parts in phase_ms.items() if run == "tp 2"]
    # the programs scaled as they do called alone (no host work between calls), and tp 2's own
    # work around them (Dynamo's guards, AOTAutograd's DTensor wrappers), the slower rank's
    alone2 = max(parts["alone"] for parts in ranks2)
    scaled = one["host"] + one["programs"] * alone2 / one["alone"]
    around2 = max(parts["around"] for parts in ranks2)
    with_around = scaled + around2 - one["around"]
    lines = [
        "",
        "Where a compiled decode step of the small model goes (bench/tp_generate.py --phases: ms per token, "
        "medians of 5 generates, then of the 2 rounds, each rank): inside the neuron programs (our backend's "
        "call of the compiled graph: its kernels and, under TP, the all-reduces in it, the wait for the other "
        "rank included) and outside them (host), split into the rest of the decode step's calls (\"around "
        "programs\": Dynamo's guards, AOTAutograd's wrappers, DTensor's under TP) and generate's own work "
        "(transformers' Python and eager ops, the eager prefill included). The programs' steps by kind "
        "(NEURON_SIM_PROGRAM_PROFILE=1, which times each step): matmuls, collectives (the all-reduces and the "
        "logits' all-gather, the wait for the other rank included) and every other step; the rest of \"in "
        "programs\" is the executor's own work. \"Program alone\": the last decode program called 500 times "
        "with nothing between calls (the ranks starting each 100 together), ms per call. The runs give each "
        "process one intra-op thread (OMP_NUM_THREADS=1, as torchrun does for its ranks); tp 1 with 2 threads "
        "is tp 1 given both cores by PyTorch's intra-op parallelism instead; the last run is tp 2 compiled with "
        "PyTorch's guard filter (the guards table below).",
        "",
        "| run | intra-op threads per process | ms/token | in programs | matmul steps | collective steps "
        "| other steps | outside programs | around programs | generate's own | program alone, ms/call |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (run, threads, rank), parts in phase_ms.items():
        name = f"{run}, rank {rank}" if run != "tp 1" else run
        lines.append(f"| {name} | {threads} | " + " | ".join(
            f"{parts[part]:.2f}" for part in ("total", "programs", "matmuls", "collectives", "other steps", "host",
                                              "around", "generate", "alone")) + " |")
    lines += [
        "",
        f"Tensor parallelism divides only the programs' kernels: a tp 2 rank with free all-reduces and no "
        f"host work beyond tp 1's would take tp 1's host time plus half its programs, {free:.2f} ms/token, so "
        f"tp 2 / tp 1 is at most {one['total'] / free:.2f} against tp 1 with one thread, and "
        f"{phase_ms[('tp 1', '2', 0)]['total'] / free:.2f} against tp 1 with two. Called alone, a tp 2 program "
        f"takes {alone2 / one['alone']:.2f} of tp 1's (its all-reduces, and the steps tensor parallelism does not "
        f"divide, as the norms): with tp 1's host time and its programs "
        f"scaled so, a tp 2 rank would take {scaled:.2f} ms/token ({one['total'] / scaled:.2f} of tp 1's speed); "
        f"adding the work around a tp 2 program above tp 1's ({around2 - one['around']:.2f} ms/token: Dynamo's "
        f"guards and AOTAutograd's DTensor wrappers, PyTorch's), {with_around:.2f} ms/token "
        f"({one['total'] / with_around:.2f}). What a tp 2 rank takes above that is generate's own work "
        f"growing and the ranks waiting for each other at the all-reduces.",
    ]
    return lines


def _torchtitan_tests():
    """tests/distributed/test_torchtitan.py as a module: its Titan runner, modes and settings."""
    path = os.path.join(ROOT, "tests", "distributed")
    if path not in sys.path:
        sys.path.insert(0, path)
    import test_torchtitan
    return test_torchtitan


def torchtitan_data_parallel(rounds=2):
    """torchtitan's llama3 debug model (tests/distributed/test_torchtitan.py runs it, unchanged) on one
    rank and with FSDP2 on 2 ranks, on neuron and on the CPU (Gloo, as the tests' reference runs):
    median over steps 3-10 of every rank's tokens/s per device, as torchtitan logs it (`tps`), over
    `rounds` rounds, the four runs in turn in each. None when torchtitan is not installed."""
    import re
    import shutil
    test_torchtitan = _torchtitan_tests()
    if not test_torchtitan._titan_installed():
        return None
    root = tempfile.mkdtemp(prefix="bench-torchtitan-")
    try:
        titan = test_torchtitan.Titan(root)
        runs = {("neuron", 1): [], ("neuron", 2): [], ("cpu", 1): [], ("cpu", 2): []}
        for round_ in range(rounds):
            for device, nproc in runs:
                args = test_torchtitan.MODES["single process" if nproc == 1 else "FSDP2, 2 ranks"][1]
                run = titan.run(f"round {round_} {device} {nproc}", device, nproc, args)
                if run.returncode != 0:
                    raise SystemExit(f"torchtitan on {device}, {nproc} rank(s) failed:\n{run.output[-3000:]}")
                for step, tps in re.findall(r"step:\s*(\d+)\s.*?tps:\s*([\d,]+)", run.output):
                    if int(step) >= 3:
                        runs[device, nproc].append(int(tps.replace(",", "")))
        return {key: statistics.median(values) for key, values in runs.items()}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def compiled_decode(size, tokens, rounds):
    """Static-cache greedy decode of a Llama-style model (bench/compile_decode.py), one fresh
    process per side, sides interleaved per round: eager CPU, eager neuron, Inductor on CPU,
    Inductor on CPU again with the caches its first run filled (its warm start), compiled neuron
    with empty caches (cold) and again with those caches (warm start in a new process). Returns
    per mode the medians of (first-call s, steady tok/s)."""
    import json
    modes = ["cpu-eager", "neuron-eager", "cpu-inductor", "cpu-inductor-warm", "neuron-compiled-cold",
             "neuron-compiled-warm"]
    results = {m: [] for m in modes}
    tokens_of = {}
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as inductor_cache:
            for mode in modes:
                env = dict(os.environ, TORCH_NEURONX_NEFF_CACHE_DIR=cache, TORCHINDUCTOR_CACHE_DIR=inductor_cache)
                out = subprocess.run([sys.executable, os.path.join(HERE, "compile_decode.py"), "--size", size,
                                      "--mode", mode.replace("-cold", "").replace("-warm", ""),
                                      "--tokens", str(tokens)], env=env, capture_output=True, text=True)
                if out.returncode != 0:
                    raise SystemExit(f"compile_decode.py --size {size} --mode {mode} failed:\n{out.stderr[-3000:]}")
                record = json.loads(out.stdout.strip().splitlines()[-1])
                results[mode].append((record["first_call_s"], record["tok_s"]))
                tokens_of[mode] = record["tokens"]
    same = {m: tokens_of[m] == tokens_of["cpu-eager"] for m in modes}
    # Steady speed does not depend on how the process started: a cold and a warm process run
    # the same program (the same Inductor code), so both count (twice the samples, same time).
    steady = {m: [r[1] for r in runs] for m, runs in results.items()}
    for cold, warm in (("neuron-compiled-cold", "neuron-compiled-warm"), ("cpu-inductor", "cpu-inductor-warm")):
        steady[cold] = steady[warm] = steady[cold] + steady[warm]
    return {m: (statistics.median(r[0] for r in runs), statistics.median(steady[m]), same[m])
            for m, runs in results.items()}


def cpu_free_with_live_tensors(repeats):
    """CPU conv2d (whose oneDNN scratch frees go through the CPU allocator's raw deleter)
    with 1 and with 50k live neuron tensors, interleaved; returns the two medians (s)."""
    x, w = torch.randn(8, 16, 32, 32), torch.randn(32, 16, 3, 3)

    def conv():
        for _ in range(50):
            torch.nn.functional.conv2d(x, w)
    conv()
    samples = {"few": [], "many": []}
    keep = []
    for _ in range(repeats):
        keep.clear()
        samples["few"].append(timed(conv, lambda: None))
        keep.extend(torch.empty(16, device="neuron") for _ in range(50000))
        samples["many"].append(timed(conv, lambda: None))
    return statistics.median(samples["few"]), statistics.median(samples["many"])


def cpu_description():
    """The CPU model and what the bfloat16 figures depend on: AMX and AVX512-BF16 (the small-matmul
    kernel's forms, Note [Small bfloat16 matmuls]) and oneDNN's ISA limit if one is set."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name") and model in ("", platform.machine(), platform.processor()):
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    features = ", ".join(f"{name} {'yes' if flag in flags else 'no'}"
                         for name, flag in (("AVX2", "avx2"), ("AVX-512", "avx512f"), ("AVX512-BF16", "avx512_bf16"),
                                            ("AMX", "amx_bf16")))
    limit = os.environ.get("ONEDNN_MAX_CPU_ISA")
    return (f"{model} ({features}{'; ONEDNN_MAX_CPU_ISA=' + limit if limit else ''}); small-matmul kernel form: "
            f"{torch_neuronx._sim._C.small_matmul_form()}")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output", default="BENCHMARKS.md")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--compile-rounds", type=int, default=2)
    args = parser.parse_args()
    load_at_start = os.getloadavg()[0]
    rows = []

    n, c = side_by_side(small_op, args.repeats)
    per_n, per_c = n / 2000 * 1e6, c / 2000 * 1e6
    rows.append(("per-op time, `a + b` on 1-element tensors", f"{per_n:.1f} µs", f"{per_c:.1f} µs",
                 f"{per_c / per_n:.2f}", "overhead per op: " + f"{per_n - per_c:.1f} µs"))
    for op, label in [("matmul", "1024x1024 matmul"), ("add", "16M-element add"),
                      ("softmax", "softmax over 4096x4096")]:
        n, c = side_by_side(large(op), args.repeats)
        rows.append((label, f"{n * 1e3:.2f} ms", f"{c * 1e3:.2f} ms", f"{c / n:.2f}", "target >= 0.95"))
    tokens = 32
    for dtype in (torch.float32, torch.bfloat16):
        n, c = side_by_side(decode(dtype, tokens), max(3, args.repeats // 2))
        rows.append((f"demo model greedy decode, {tokens} tokens, {str(dtype)[6:]}",
                     f"{tokens / n:.1f} tok/s", f"{tokens / c:.1f} tok/s", f"{c / n:.2f}", "target >= 0.9"))

    few, many = cpu_free_with_live_tensors(args.repeats)
    rows.append(("CPU conv2d with 50k live neuron tensors vs 1", f"{many * 1e3 / 50:.2f} ms", f"{few * 1e3 / 50:.2f} ms",
                 f"{few / many:.2f}", "ownership is O(1): target ~1.0 (was 0.15)"))
    for dtype in ("float32", "bfloat16"):
        modes, ratio = decode_modes(dtype, tokens, max(40, 8 * args.repeats))
        (async_speed, async_waits, async_blocked, _, _, _), blocking_speed = modes["async"], modes["blocking"][0]
        rows.append((f"asynchronous vs launch-blocking decode, {tokens} tokens, {dtype}",
                     f"{async_speed:.1f} tok/s", f"{blocking_speed:.1f} tok/s (launch-blocking)",
                     f"{ratio['async']:.2f}",
                     f"host waits per token: {async_waits:.2f} async, "
                     f"blocked {async_blocked * 1e6:.0f} µs per token; "
                     f"target >= 1.0"))
    # Note [Device clock]: what predicting device time costs the host (clock on vs off).
    out = subprocess.run([sys.executable, os.path.join(HERE, "clock_overhead.py"), "--tokens", str(tokens)],
                         check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    on_ms, off_ms = (float(part.split()[0]) for part in out.split("clock on ")[1].split(" per call")[0].split(", off "))
    rows.append((f"device clock on vs off, demo decode, {tokens} tokens, bfloat16", f"{on_ms:.1f} ms per call",
                 f"{off_ms:.1f} ms per call (NEURON_SIM_DEVICE_CLOCK=0)", f"{off_ms / on_ms:.3f}",
                 "the clock's host cost: target >= 0.95"))

    compile_rows = []
    for size, label in (("small", "~5M params (hidden 128, 4 layers)"), ("base", "~124M params (hidden 768, 12 layers)")):
        r = compiled_decode(size, tokens, args.compile_rounds)
        cpu, neuron, inductor = r["cpu-eager"], r["neuron-eager"], r["cpu-inductor"]
        cold, warm, inductor_warm = r["neuron-compiled-cold"], r["neuron-compiled-warm"], r["cpu-inductor-warm"]
        compile_rows.append((
            label, f"{cpu[1]:.1f}", f"{neuron[1]:.1f}", f"{inductor[1]:.1f}", f"{cold[1]:.1f}",
            f"{cold[1] / neuron[1]:.2f} (target >= 2.0)" if size == "small" else f"{cold[1] / neuron[1]:.2f}",
            f"{cold[1] / inductor[1]:.2f} (target >= 1.0)",
            f"{inductor[0]:.1f} s", f"{cold[0]:.1f} s", f"{cold[0] / inductor[0]:.2f} (target <= 0.2)",
            f"{warm[0]:.1f} s", f"{warm[0] / cold[0]:.2f} (target <= 0.2)", f"{inductor_warm[0]:.1f} s",
            f"{warm[0] / inductor_warm[0]:.2f}",
            "yes" if cold[2] and warm[2] else "NO"))

    lines = [
        "# Benchmarks",
        "",
        "Produced by `make bench` (bench/bench.py). neuron is the simulated device, whose kernels are",
        "ATen's CPU kernels run on device memory; a ratio is CPU time / neuron time (throughput",
        "neuron/CPU), from medians of interleaved repeats in one run. Higher is better; 1.00 = parity.",
        "",
        f"Machine: {platform.machine()}, {cpu_description()}, {os.cpu_count()} cores "
        f"({os.environ['OMP_NUM_THREADS']} compute thread per "
        f"process), torch {torch.__version__}, "
        f"launch-blocking={torch_neuronx._sim._C.launch_blocking()}, "
        f"{time.strftime('%Y-%m-%d')}; load average (1 min) at start {load_at_start:.2f}, at end "
        f"{os.getloadavg()[0]:.2f} (other work on these 2 cores slows the asynchronous side most: its "
        f"worker thread needs the second core).",
        "",
        "| benchmark | neuron | cpu | neuron/cpu throughput | note |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {' | '.join(row)} |" for row in rows]
    lines += [
        "",
        "## torch.compile: static-cache greedy decode",
        "",
        f"bfloat16 Llama-style models built from a config (random weights, bench/compile_decode.py), "
        f"{tokens} new tokens after an 8-token prompt, `cache_implementation=\"static\"`; each side in a "
        f"fresh process, sides interleaved, medians of {args.compile_rounds} round(s). Steady figures are "
        f"medians over the cold and the warm process of each side (they run the same code); they are "
        f"tokens/s of a whole `generate()` (Hugging Face's loop included); first call = the first "
        f"`generate()` of a process, compilation included. Cold: empty caches; warm: a new "
        f"process with the caches the cold run filled (ours: programs, and AOTAutograd's cache of what it "
        f"made of each Dynamo graph; Inductor's: its FX graph and AOTAutograd caches). A warm start still "
        f"runs Dynamo's tracing, which is most of what is left (Note [Caching past AOTAutograd]).",
        "",
        "| model | CPU eager tok/s | neuron eager tok/s | CPU Inductor tok/s | neuron compiled tok/s "
        "| compiled / eager neuron | compiled / Inductor | Inductor first call | compiled first call (cold) "
        "| cold / Inductor | warm first call | warm / cold | Inductor warm first call | warm / Inductor warm "
        "| tokens equal CPU eager |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [f"| {' | '.join(row)} |" for row in compile_rows]

    collective_rows = []
    # The ceiling: one thread copying on an otherwise idle machine (measured here, not in the
    # ranks, where 4 processes measuring at once on 2 cores each see about half of it).
    sys.path.insert(0, HERE)
    from collectives import memcpy_bandwidth
    memcpy = memcpy_bandwidth()
    for world in (2, 4):
        measured = collectives(world)
        for size in measured["allreduce"]:
            row = [str(world), f"{int(size) / 1024:.0f} KiB" if int(size) < 1 << 20 else f"{int(size) >> 20} MiB"]
            for collective, factor in (("allreduce", 2 * (world - 1) / world), ("allgather", world - 1)):
                times = measured[collective][size]
                bus = {side: int(size) * factor / times[side] / 1e9 for side in ("neuron", "cpu")}
                row += [f"{bus['neuron']:.2f}", f"{bus['cpu']:.2f}", f"{times['cpu'] / times['neuron']:.2f}",
                        f"{bus['neuron'] * 1e9 / memcpy:.0%}", f"{times['neuron'] * 1e6:.0f} / {times['cpu'] * 1e6:.0f}"]
            collective_rows.append(row)
    tp, breakdown, guard_us, phase_ms = tp_generate(tokens)
    titan = torchtitan_data_parallel()
    lines += [
        "",
        "## Collectives (c10d backend \"neuron\") against Gloo on CPU tensors",
        "",
        "bench/collectives.py under torchrun, one process group `cpu:gloo,neuron:neuron`: the same",
        "collective of neuron tensors (shared memory between the ranks of this host) and of CPU",
        "tensors (Gloo), interleaved per size; medians of the slowest rank. Bus bandwidth as",
        "nccl-tests defines it (allreduce: size x 2(n-1)/n / time; allgather: size x (n-1) / time,",
        f"size = each rank's tensor). Single-thread memcpy (64 MiB, one process on the idle machine, before the "
        f"ranks start): {memcpy / 1e9:.2f} GB/s.",
        "Targets (issue 9): neuron/Gloo >= 2 from 1 MiB up, >= 40% of memcpy, small-message latency",
        "no worse than Gloo's.",
        "",
        "| ranks | size | allreduce busbw neuron GB/s | Gloo GB/s | neuron/Gloo | of memcpy | latency us neuron / Gloo "
        "| allgather busbw neuron GB/s | Gloo GB/s | neuron/Gloo | of memcpy | latency us neuron / Gloo |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [f"| {' | '.join(row)} |" for row in collective_rows]
    lines += [
        "",
        f"Tensor-parallel greedy generation (bench/tp_generate.py: Llama-style models, float32, random weights, "
        f"{tokens} tokens after an 8-token prompt, `DistributedConfig(tp_size=n)` under torchrun; tp 1 is one "
        f"process with `device_map=\"neuron\"`; eager, and compiled with `cache_implementation=\"static\"` "
        f"(the decode step compiled by the neuron backend: one program with its all-reduces under TP, Note "
        f"[Collectives in programs]; for the small model also the graph cut at its collectives, "
        f"`NEURON_SIM_COLLECTIVES_IN_PROGRAMS=0`, as before); medians of 2 rounds, each running tp 1, 2 and 4 "
        f"eager, then compiled (then cut), in turn). "
        f"Targets (issue 26): tp 2 / tp 1 >= 1.0 and tp 4 / tp 1 >= 0.5 (4 ranks on 2 cores).",
        "",
        "| model | tp | eager tok/s | / tp 1 | compiled tok/s | / tp 1 | compiled, cut at collectives tok/s | / tp 1 "
        "| tokens equal tp 1 (eager, compiled, cut) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    names = {"small": "~5M params (hidden 256, 4 layers)", "medium": "~111M params (hidden 1024, 8 layers)"}
    for size, rows in tp.items():
        for world in (1, 2, 4):
            cells = []
            for mode in ("eager", "compiled"):
                speed = rows[mode, world][0]
                cells += [f"{speed:.1f}", f"{speed / rows[mode, 1][0]:.2f}"]
            if ("cut", world) in rows:
                speed = rows["cut", world][0]
                cells += [f"{speed:.1f}", f"{speed / rows['compiled', 1][0]:.2f}"]
            else:
                cells += ["-", "-"]
            modes = ("eager", "compiled", "cut") if ("cut", world) in rows else ("eager", "compiled")
            equal = ", ".join("yes" if rows[mode, world][1] else "NO" for mode in modes)
            lines.append(f"| {names[size]} | {world} | {' | '.join(cells)} | {equal} |")
    groups = ("collectives", "dtensor", "matmuls", "rest", "total")
    lines += [
        "",
        "Where a decode step of the small model goes, per rank (bench/tp_generate.py --breakdown: one more "
        "`generate` with these calls wrapped, exclusive times in ms per token; the wrappers add time of "
        "their own): collectives = c10d and functional collectives, waiting for the other rank included; "
        "DTensor = its Python (from_local, to_local, redistribute less the collectives in it); matmuls = "
        "F.linear; rest = the model's and transformers' Python (the TP hooks around every linear) and the "
        "other ops.",
        "",
        "| run | " + " | ".join(groups) + " |",
        "|---|" + "---|" * len(groups),
    ]
    for world, ranks in breakdown.items():
        for rank, parts in enumerate(ranks):
            lines.append(f"| tp {world}, rank {rank} | " + " | ".join(f"{parts.get(g, 0.0):.2f}" for g in groups) + " |")
    lines += phases_lines(phase_ms)

    def us(value):
        return "-" if value is None else f"{value:.0f}"

    small = tp["small"]
    lines += [
        "",
        "Dynamo's guards on the compiled decode step of the small model: the microseconds its guard tree "
        "takes to accept one decode call (bench/tp_generate.py guard_check_us: the median of 300 checks on "
        "the last call's arguments, rank 0), which every call pays on the host before the program runs; "
        "and the same runs compiled with PyTorch's guard filter `torch.compiler.skip_guard_on_all_nn_modules_unsafe` "
        "(a user's option, passed as `CompileConfig(backend=\"neuron\", dynamic=False, mode=None, "
        "options={\"guard_filter_fn\": ...})`; no guards on module attributes, so a module changed after "
        "compiling is not noticed). Under tensor parallelism the tree holds transformers' TP forwards "
        "(their closures and module attributes) and a Python guard per DTensor parameter (its placements and mesh).",
        "",
        "| tp | guards us per call | compiled tok/s | / tp 1 | nn-module guards skipped: guards us | tok/s | / tp 1 "
        "| tokens equal tp 1 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for world in (1, 2, 4):
        if ("unguarded", world) not in small:
            continue
        lines.append(
            f"| {world} | {us(guard_us.get(('small', 'compiled', world)))} | {small['compiled', world][0]:.1f} | "
            f"{small['compiled', world][0] / small['compiled', 1][0]:.2f} | "
            f"{us(guard_us.get(('small', 'unguarded', world)))} | {small['unguarded', world][0]:.1f} | "
            f"{small['unguarded', world][0] / small['unguarded', 1][0]:.2f} | "
            f"{'yes' if small['unguarded', world][1] else 'NO'} |")
    precision = _torchtitan_tests().PRECISION
    lines += [
        "",
        "torchtitan's llama3 debug model (6M parameters; the runs of tests/distributed/test_torchtitan.py: "
        f"sequence 128, a local batch of 4, `--training.mixed-precision-param {precision}` (its PRECISION), "
        "eager) on one rank and with FSDP2 on 2 ranks (global batch 8): "
        "tokens/s per rank as torchtitan logs it (`tps`), median of steps 3-10 of 2 rounds. Steps/s vs one "
        "rank = FSDP2's per-rank tokens/s / one rank's (a step of each rank is as many tokens); the "
        "2 ranks together process twice that many tokens per step.",
        "",
        "| device | 1 rank tok/s | FSDP2 2 ranks, per rank tok/s | steps/s vs 1 rank | tokens/s of both vs 1 rank |",
        "|---|---|---|---|---|",
    ]
    if titan is None:
        lines.append("| not measured: torchtitan is not installed (`make torchtitan-venv`) | | | | |")
    else:
        for device in ("neuron", "cpu"):
            one, two = titan[device, 1], titan[device, 2]
            lines.append(f"| {device} | {one:.0f} | {two:.0f} | {two / one:.2f} | {2 * two / one:.2f} |")
    lines += [
        "",
        "Notes. Large ops run the same ATen CPU kernels on both sides; where neuron is faster",
        "(16M-element add, softmax) it is the allocator: neuron reuses cached device blocks, while",
        "the CPU allocator returns large blocks to the OS, so each fresh CPU output page-faults.",
        "Small ops and decode pay the backend's per-op cost: host views of the operands, the",
        "dispatcher's PrivateUse1 hop and adopting the output (see the per-op row).",
        "The asynchronous rows compare the device with itself (NEURON_LAUNCH_BLOCKING=0 against 1):",
        "one child process per mode, both loaded, driven call by call (A B B A ...), the ratio the",
        "median over neighbouring calls; the `cpu` column holds the launch-blocking figure there.",
        "Generate reads one value per step (its stopping check), so about one host wait per token.",
        "Asynchronous mode runs small ops on an idle stream at the call (README, NEURON_SIM_INLINE_BYTES):",
        "the demo model's decode is mostly such ops, so both sides do nearly the same work on the",
        "calling thread; the queued ones (matmuls with larger weights, the vocabulary projection)",
        "overlap with Python only until the next value is read.",
        "bfloat16 matmuls with at most 32 rows of activations run oneDNN's brgemm kernel directly on",
        "neuron, eager and compiled (README, Note [Small bfloat16 matmuls]): the same bits as the CPU's",
        "at::mm without its ~13-20 us set-up per call, which is why bfloat16 decode can beat CPU eager.",
        "Which figures depend on the CPU: the bfloat16 rows (demo decode, the compiled-decode table)",
        "depend on that kernel's form (the Machine line): \"transposed\" needs AMX,",
        "\"direct\" AVX512-BF16, and with \"none\" (AVX2-only x86, arm64) every product is at::mm's and",
        "neuron's bfloat16 decode runs at about CPU eager's speed less the per-op cost. The float32 rows,",
        "the per-op row, the collectives and the tensor-parallel rows do not use it.",
        "Tensor parallelism divides each rank's kernels, not its host work: every rank runs all of",
        "generate's Python and every op of the model (on half the sizes), and adds transformers' TP hooks",
        "and DTensor's Python around the linear layers and a wait at each all-reduce (two per layer).",
        "A decode step of the small model is almost all such host work (the breakdown), so there it",
        "cannot gain; the medium model's step reads 445 MB of weights, which two ranks halve. Compiled,",
        "the model's Python and per-op dispatch go: each rank runs one program per stretch between",
        "all-reduces (Note [Graphs with collectives]), and what stays per rank is generate's Python,",
        "the programs' nodes and the all-reduces.",
        "What is left between a compiled tp 2 rank and tp 1 (the phases table): its program, even called",
        "alone, does not halve (the steps tensor parallelism does not divide, and each all-reduce a wait",
        "for the slower of the two ranks, whose vCPUs here run at speeds that differ and change); around",
        "each program, PyTorch's work under TP (Dynamo's guards, with a Python check per DTensor parameter",
        "and guards on transformers' TP closures, and AOTAutograd's DTensor wrappers), which the run with",
        "the guard filter shows to be mostly the guards; and generate's own work, all of it on each rank.",
        "The paragraph under the phases table gives the bounds these leave. Skipping the nn-module guards",
        "(a user's option, with its caveat) removes the guards' part.",
    ]
    write_main_part(args.output, "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
