"""OpInfo conformance on a fixed, fast subset of ops (the full sweep:
`python -m conformance.opinfo_sweep --output COVERAGE.md`)."""

import pathlib
import sys

import pytest
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))  # the repo: conformance/
from conformance import opinfo_sweep as sweep  # noqa: E402

# Representative ops: elementwise, matmul family, reductions, normalisation, indexing,
# joining, scans, sorting, views. Each name covers all OpInfo variants of that name.
OPS = [
    "add", "mul", "sub", "div", "matmul", "mm", "bmm", "addmm", "softmax", "log_softmax",
    "sum", "mean", "amax", "argmax", "cat", "stack", "index_select", "gather", "scatter",
    "where", "masked_fill", "clamp", "exp", "log", "sqrt", "rsqrt", "sigmoid", "tanh",
    "nn.functional.silu", "nn.functional.gelu", "nn.functional.layer_norm",
    "nn.functional.embedding", "nn.functional.linear", "cumsum", "topk", "sort",
    "transpose", "view", "reshape", "expand", "tril", "bernoulli",
]
MAX_SAMPLES = 6


@pytest.mark.parametrize("name", OPS)
def test_op_matches_cpu(name):
    results = sweep.run_sweep([name], max_samples=MAX_SAMPLES)
    ran = [r for r in results if r.ran_on_cpu]
    assert ran, f"{name}: no (op, dtype) pair ran on CPU: " + "; ".join(
        f"{r.op} [{r.dtype}] {r.reason}" for r in results)
    failures = [r for r in ran if r.status != "pass"]
    assert not failures, f"{len(failures)} of {len(ran)} pairs fail on neuron:\n" + \
        sweep.format_failures(failures)


# The harness itself: a wrong neuron result, a wrong layout and a CPU error are caught.

def _fake_op(fn, dtypes=(torch.float32,), make=None, **kwargs):
    from torch.testing._internal.opinfo.core import OpInfo, SampleInput
    sweep.load_op_db()

    def samples(op_info, device, dtype, requires_grad, **_):
        if make is not None:
            yield from make(device, dtype, requires_grad)
            return
        yield SampleInput(torch.arange(6, device=device).reshape(2, 3).to(dtype)
                          .requires_grad_(requires_grad))

    return OpInfo("fake", op=fn, dtypes=dtypes, sample_inputs_func=samples,
                  supports_out=False, **kwargs)


def test_harness_reports_wrong_values():
    op = _fake_op(lambda x: x * 2 if x.device.type == "neuron" else x * 3)
    pair = sweep.run_pair(op, "float32")
    assert pair.status == "fail"
    assert pair.forward.status == "fail" and "values differ" in pair.forward.reason
    assert pair.grad.status == "fail"


def test_harness_reports_lost_view_and_device():
    op = _fake_op(lambda x: x.t() if x.device.type == "cpu" else x.t().contiguous())
    pair = sweep.run_pair(op, "float32")
    assert pair.forward.status == "fail" and "view of input 0" in pair.forward.reason
    op = _fake_op(lambda x: x.cpu() + 1)
    assert "expected neuron" in sweep.run_pair(op, "float32").forward.reason


def test_harness_keeps_layout_of_inputs_and_passes_identical_results():
    from torch.testing._internal.opinfo.core import SampleInput

    def make(device, dtype, requires_grad):
        base = torch.arange(24, device=device, dtype=dtype).reshape(4, 6)
        yield SampleInput(base[:, 1::2], args=(base[1],))  # strided views of one storage

    seen = []

    def op(x, y):
        seen.append((x.device.type, x.stride(), x.storage_offset(),
                     x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()))
        return x.sum() + y.sum()

    pair = sweep.run_pair(_fake_op(op, make=make, supports_autograd=False), "float32")
    assert pair.status == "pass", pair.reason
    assert seen == [("cpu", (6, 2), 1, True), ("neuron", (6, 2), 1, True)]


def test_harness_does_not_run_samples_cpu_rejects():
    def op(x):
        raise RuntimeError("not on CPU")

    pair = sweep.run_pair(_fake_op(op), "float32")
    assert pair.status == "not-run" and "cpu raised on all" in pair.reason
    assert not pair.ran_on_cpu


@pytest.mark.skipif(not sweep.EMULATES_64BIT, reason="NEURON_SIM_NATIVE_64BIT=1: int64 is computed in 64 bits")
def test_harness_classes_int64_beyond_int32_as_device_semantics():
    from torch.testing._internal.opinfo.core import SampleInput

    def make(device, dtype, requires_grad):
        yield SampleInput(torch.tensor([2**31 - 1, 3], dtype=torch.int64, device=device))

    op = _fake_op(lambda x: x + 1, dtypes=(torch.int64,), make=make)
    pair = sweep.run_pair(op, "int64")
    assert pair.status == "64-bit", (pair.status, pair.reason)
    assert "values differ" in pair.forward.reason


def test_harness_reports_a_random_op_drawing_from_the_cpu_generator(monkeypatch):
    monkeypatch.setattr(sweep, "RANDOM_OPS", sweep.RANDOM_OPS | {"fake"})
    op = _fake_op(lambda x: x + torch.rand(x.shape).to(x.device))
    pair = sweep.run_pair(op, "float32")
    assert pair.forward.status == "fail" and "CPU's default generator" in pair.forward.reason
