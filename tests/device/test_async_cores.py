"""Asynchronous mode shares the host's cores (README, Cores): how long an idle stream polls for
work depends on how many processes share the host (review 7c, finding 1: a 1 ms poll per rank
took another rank's core, tensor-parallel generate 0.7x with 2 ranks on 2 cores), and
NEURON_SIM_IDLE_POLL_US sets it. Also the benchmark's driver surfaces a child's error."""
import json
import math
import os
import subprocess
import sys

import pytest

from conftest import ROOT


def idle_poll(**env):
    full = {k: v for k, v in os.environ.items()
            if k not in ("LOCAL_WORLD_SIZE", "NEURON_SIM_IDLE_POLL_US", "NEURON_SIM_SHARED_CORES")}
    full.update(env)
    out = subprocess.run([sys.executable, "-c", "import torch, torch_neuronx; print(torch_neuronx._sim._C.idle_poll_us())"],
                         env=full, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return int(out.stdout)


def test_idle_poll_leaves_cores_to_other_ranks():
    cores = os.cpu_count()
    assert idle_poll() == (1000 if cores >= 2 else 70)
    many = cores  # more ranks than half the cores: polling would take another rank's core
    assert idle_poll(LOCAL_WORLD_SIZE=str(many)) == 70
    assert idle_poll(LOCAL_WORLD_SIZE=str(many), NEURON_SIM_IDLE_POLL_US="250") == 250
    assert idle_poll(NEURON_SIM_IDLE_POLL_US="0") == 0
    # NEURON_SIM_SHARED_CORES says it instead of the count (Note [Shared cores])
    assert idle_poll(NEURON_SIM_SHARED_CORES="1") == 70
    assert idle_poll(LOCAL_WORLD_SIZE=str(many), NEURON_SIM_SHARED_CORES="0") == 1000


def test_bench_decode_modes_reports_a_failing_child():
    # in a child: importing bench sets OMP_NUM_THREADS for the process
    code = ("import sys; sys.path.insert(0, %r); import bench\n"
            "try:\n    bench.decode_modes('no_such_dtype', 2, 1)\n"
            "except RuntimeError as e:\n    print(e)\n") % os.path.join(ROOT, "bench")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert ("decode_mode.py (no_such_dtype, NEURON_LAUNCH_BLOCKING=0, TORCH_NEURONX_ENABLE_CONCATENATION=0) "
            "failed to start") in out.stdout, out.stderr[-2000:]
    assert "AttributeError" in out.stdout and "no_such_dtype" in out.stdout


def test_bench_cpu_reference_decodes_on_cpu():
    # bench/aee.py's reference column: the same decode in PyTorch's CPU eager mode. Its child must
    # run on device cpu (no neuron launch, no predicted device time), the others on neuron
    code = ("import sys, json; sys.path.insert(0, %r); import bench\n"
            "medians, ratios = bench.decode_modes('float32', 2, 2, modes=('blocking', 'cpu'))\n"
            "print(json.dumps({m: list(v) for m, v in medians.items()}))\n") % os.path.join(ROOT, "bench")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    medians = json.loads(out.stdout.splitlines()[-1])
    tokens_per_second, launches_per_token, predicted_ms = 0, 4, 3
    assert medians["cpu"][tokens_per_second] > 0 and medians["blocking"][tokens_per_second] > 0
    assert medians["cpu"][launches_per_token] == 0 and math.isnan(medians["cpu"][predicted_ms])
    assert medians["blocking"][launches_per_token] > 10 and medians["blocking"][predicted_ms] > 0


def test_bench_rewrites_its_part_and_keeps_the_other_scripts_sections(tmp_path):
    # make bench: bench.py writes BENCHMARKS.md's main part, then aee.py and vllm_serving.py their
    # own sections; a rerun of bench.py alone dropped those sections (it wrote the whole file)
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    try:
        from bench_sections import write_main_part, write_section
    finally:
        sys.path.pop(0)
    path = str(tmp_path / "BENCHMARKS.md")
    write_main_part(path, "# Benchmarks\n\nold main part\n")
    write_section(path, "<!-- aee: begin (bench/aee.py) -->", "<!-- aee: end -->",
                  "<!-- aee: begin (bench/aee.py) -->\nAEE figures\n<!-- aee: end -->")
    write_section(path, "<!-- vllm-serving: begin (bench/vllm_serving.py) -->", "<!-- vllm-serving: end -->",
                  "<!-- vllm-serving: begin (bench/vllm_serving.py) -->\nvLLM figures\n<!-- vllm-serving: end -->")
    write_main_part(path, "# Benchmarks\n\nnew main part\n")
    text = open(path).read()
    assert "new main part" in text and "old main part" not in text
    assert text.index("new main part") < text.index("AEE figures") < text.index("vLLM figures")
    assert text.count("<!-- aee: begin") == 1 and text.count("<!-- vllm-serving: end -->") == 1


def test_bench_clock_overhead_runs_with_the_clock_off():
    # bench/clock_overhead.py runs decode_mode.py children with NEURON_SIM_DEVICE_CLOCK=0: they
    # answer without a predicted time (make bench stopped there when they asked the clock for one)
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "clock_overhead.py"), "--tokens", "2",
                          "--calls", "1"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "clock on " in out.stdout and " off " in out.stdout, out.stdout


@pytest.mark.parametrize("mode", ["1", "0"])
def test_the_callers_thread_setting_is_left_alone(mode):
    """Note [Kernel threads] changes the stream worker's OpenMP setting only: in launch-blocking
    mode the kernels run on the calling thread, whose torch.get_num_threads() must not drop."""
    code = ("import torch, torch_neuronx\n"
            "torch.set_num_threads(2)\n"
            "x = torch.randn(256, 256, device='neuron')\n"
            "for _ in range(5):\n    y = (x @ x).relu() + 1\n"
            "torch.neuron.synchronize()\n"
            "print(torch.get_num_threads())\n")
    env = dict(os.environ, NEURON_LAUNCH_BLOCKING=mode)
    env.pop("OMP_NUM_THREADS", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "2"


SHARED_CORES_CODE = """
import torch, torch_neuronx
counters = torch_neuronx._sim._C.stream_counters
a = torch.randn(512, 512, device="neuron")
a @ a  # the first call of a signature runs at once (its meta kernel is checked)
f = torch.compile(lambda x: (x @ x).relu(), backend="neuron")
f(a)
torch.neuron.synchronize()
before = counters()[0]
a @ a  # 1 MiB operands: past NEURON_SIM_INLINE_BYTES's 64 KiB
f(a)
torch.neuron.synchronize()
print(counters()[0] - before)
"""


@pytest.mark.parametrize("shared, queued", [("0", 2), ("1", 0)])
def test_on_shared_cores_ops_and_programs_on_an_idle_stream_run_at_the_call(shared, queued):
    """Note [Shared cores]: with fewer than two cores per local rank, asynchronous mode runs a
    large op and a compiled program at the call when their stream is idle (a queued one waited
    for the worker to get the core the host thread had); otherwise both are queued."""
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_WORLD_SIZE", "NEURON_SIM_INLINE_BYTES")}
    env.update(NEURON_LAUNCH_BLOCKING="0", NEURON_SIM_SHARED_CORES=shared)
    out = subprocess.run([sys.executable, "-c", SHARED_CORES_CODE], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert int(out.stdout.split()[-1]) == queued, out.stdout
