"""The device clock for compiled programs (docs/device-clock.md; Note [Device clock] in
runtime/cost_model.h): a program call is one launch, costed once when the program is built as
program_launch_ns plus each step's work without the eager launch cost. Its predicted time equals
the value computed here by hand from the platform data file, and a compiled decode step is
predicted faster than the same step run eagerly. Nothing here measures host time."""
import math
import os
import tomllib

import pytest
import torch
import torch._dynamo

import torch_neuronx
from torch_neuron_sim.compile import backend
from tiny_models import build

PLATFORMS_FILE = os.path.join(os.path.dirname(torch_neuronx._sim.__file__), "data", "platforms.toml")
with open(PLATFORMS_FILE, "rb") as file:
    TRN2 = {name: entry["value"] for name, entry in tomllib.load(file)["trn2"].items()}
NEURON = torch.device("neuron")


@pytest.fixture(autouse=True)
def _fresh(fresh_dynamo, monkeypatch, tmp_path):
    """Each test compiles afresh (conftest.fresh_dynamo), into its own program cache."""
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path))


@pytest.fixture(autouse=True)
def _trn2_lnc2():
    if not torch_neuronx._sim._C._device_clock_on():
        pytest.skip("the device clock is off (NEURON_SIM_DEVICE_CLOCK=0)")
    properties = torch.neuron.get_device_properties(0)
    if properties.platform != "trn2":
        pytest.skip("the hand-computed values are trn2's")


def predicted_ns(fn):
    """The predicted device time of `fn`'s launches on the current stream, in nanoseconds."""
    start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return round(start.elapsed_time(end) * 1e6)


def programs_while(fn):
    """Runs fn; returns the summaries of the programs it compiled."""
    summaries = []
    original = backend.debug.preserve

    def keep(name, gm, program):
        summaries.append(program.describe())
        original(name, gm, program)
    backend.debug.preserve = keep
    try:
        fn()
    finally:
        backend.debug.preserve = original
    return summaries


def test_matmul_add_program_costs_its_launch_and_its_steps_without_eager_launches():
    lnc = int(os.environ.get("NEURON_LOGICAL_NC_CONFIG", "2"))
    a, b, c = (torch.randn(8, 64, device=NEURON), torch.randn(64, 32, device=NEURON), torch.randn(32, device=NEURON))
    compiled = torch.compile(lambda a, b, c: a @ b + c, backend="neuron")
    (summary,) = programs_while(lambda: compiled(a, b, c))
    assert summary["ops"] == ["aten::mm", "aten::add.Tensor"]

    hbm_per_ns = TRN2["hbm_chip_gbps"] / TRN2["physical_cores_per_chip"] * lnc
    pad = lambda value, to: -(-value // int(to)) * int(to)  # noqa: E731
    # mm, fp32 [8, 64] @ [64, 32]: k and n pad to the 128 x 128 array; no eager launch cost
    mm_compute = 2 * 8 * pad(64, TRN2["systolic_array_rows"]) * pad(32, TRN2["systolic_array_columns"]) / (
        TRN2["tensor_fp32_tflops"] * 1e3 * lnc * TRN2["tensor_utilization"])
    mm_memory = (8 * 64 + 64 * 32 + 8 * 32) * 4 / hbm_per_ns
    # add, fp32 [8, 32] + [32]: one VectorE pass over its output
    add_compute = 8 * 32 / (TRN2["vector_lanes_other"] * TRN2["vector_clock_ghz"] * lnc)
    add_memory = (8 * 32 + 32 + 8 * 32) * 4 / hbm_per_ns
    rounded = lambda value: math.floor(value + 0.5)  # noqa: E731
    expected = rounded(TRN2["program_launch_ns"]) + rounded(max(mm_compute, mm_memory)) + rounded(
        max(add_compute, add_memory))
    assert predicted_ns(lambda: compiled(a, b, c)) == expected
    # the same ops eagerly: two eager launches
    eager = predicted_ns(lambda: a @ b + c)
    assert eager == rounded(TRN2["eager_launch_ns"] + max(mm_compute, mm_memory)) + rounded(
        TRN2["eager_launch_ns"] + max(add_compute, add_memory))


def test_fused_pointwise_group_is_one_pass_over_memory():
    x = torch.randn(4, 256, device=NEURON)
    compiled = torch.compile(lambda x: (x * 2.0 + 1.0) * x - 3.0, backend="neuron")
    (summary,) = programs_while(lambda: compiled(x))
    assert summary["ops"] == ["neuron::pointwise"], summary["ops"]
    lnc = int(os.environ.get("NEURON_LOGICAL_NC_CONFIG", "2"))
    hbm_per_ns = TRN2["hbm_chip_gbps"] / TRN2["physical_cores_per_chip"] * lnc
    elements = 4 * 256
    one_pass = max(elements / (TRN2["vector_lanes_other"] * TRN2["vector_clock_ghz"] * lnc),
                   2 * elements * 4 / hbm_per_ns)  # read x once, write the result once
    assert predicted_ns(lambda: compiled(x)) == math.floor(TRN2["program_launch_ns"] + 0.5) + math.floor(one_pass + 0.5)


def test_compiled_llama_decode_step_is_predicted_faster_than_eager():
    model = build("llama").to(NEURON)
    token = torch.tensor([[5]], device=NEURON)
    with torch.no_grad():
        step = lambda: model(token, use_cache=False).logits  # noqa: E731
        step()
        eager = predicted_ns(step)
        compiled_model = torch.compile(model, backend="neuron")
        compiled = lambda: compiled_model(token, use_cache=False).logits  # noqa: E731
        compiled()
        compiled_ns = predicted_ns(compiled)
    assert 0 < compiled_ns < eager
    # Eager pays one launch per op; compiled pays at most a few program launches.
    assert eager >= 20 * TRN2["eager_launch_ns"], eager
    assert compiled_ns < 4 * TRN2["eager_launch_ns"], compiled_ns
