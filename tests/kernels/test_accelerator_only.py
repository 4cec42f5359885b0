"""Accelerator-only ops (a CUDA kernel, no CPU kernel): the class is classified completely,
the ones PyTorch selects for the device have neuron kernels (conformance/accelerator_only.py,
COVERAGE.md "Accelerator-only ops"), and those kernels follow CUDA's contract. The fused
recurrent cells are tested in test_rnn.py."""
import pathlib
import sys
import textwrap

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch_neuronx
from torch.utils._python_dispatch import TorchDispatchMode

from conftest import run_python

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))  # the repo: conformance/
from conformance import accelerator_only  # noqa: E402

D = "neuron"
TOLERANCES = {torch.float32: (1e-5, 1.3e-6), torch.bfloat16: (1e-2, 1.6e-2)}  # the OpInfo sweep's


def op_name(schema_name):
    """"aten::mm.dtype" -> "mm.dtype" (the form of native_functions.yaml)."""
    return schema_name.split("::", 1)[1]


# ---- the class ----------------------------------------------------------------------------------

def test_the_table_classifies_exactly_the_installed_class():
    """A new PyTorch adding or removing an accelerator-only op fails here until it is classified."""
    installed = accelerator_only.installed_class()
    assert len(installed) > 80
    assert set(installed) == set(accelerator_only.OPS), (
        f"unclassified: {sorted(set(installed) - set(accelerator_only.OPS))}; "
        f"gone: {sorted(set(accelerator_only.OPS) - set(installed))}")
    for name in installed:  # really no CPU kernel in this build
        assert not torch._C._dispatch_has_computed_kernel_for_dispatch_key("aten::" + name, "CPU"), name


def test_ops_classified_kernel_have_neuron_kernels_and_the_others_do_not():
    for name, (category, _, _) in accelerator_only.OPS.items():
        wanted = category in (accelerator_only.KERNEL, accelerator_only.KERNEL_DIRECT)
        assert torch._C._dispatch_has_kernel_for_dispatch_key("aten::" + name, "PrivateUse1") == wanted, name


def test_coverage_md_has_the_current_section():
    text = (pathlib.Path(__file__).resolve().parents[2] / "COVERAGE.md").read_text()
    assert "\n".join(accelerator_only.section()) in text


class Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        overload = func._schema.overload_name
        self.ops.add(op_name(func._schema.name) + ("." + overload if overload else ""))
        return func(*args, **(kwargs or {}))


def _programs():
    x = torch.randn(5, 3, 4, device=D, requires_grad=True)
    yield "LSTM", lambda: nn.LSTM(4, 6, 2, bidirectional=True).to(D)(x)[0].sum().backward()
    yield "GRU", lambda: nn.GRU(4, 6, batch_first=True).to(D)(x)[0].sum().backward()
    yield "LSTMCell", lambda: nn.LSTMCell(4, 6).to(D)(x[0])[0].sum().backward()
    yield "GRUCell", lambda: nn.GRUCell(4, 6).to(D)(x[0]).sum().backward()
    yield "RNN", lambda: nn.RNN(4, 6).to(D)(x)[0].sum().backward()
    yield "dropout", lambda: F.dropout(x, 0.5, True).sum().backward()
    yield "feature_alpha_dropout", lambda: F.feature_alpha_dropout(x, 0.5, True).sum().backward()

    def ctc(lengths_device, reduction):
        def run():
            lp = torch.randn(12, 2, 5, device=D).log_softmax(2).requires_grad_()
            lengths = (torch.tensor([12, 12], device=lengths_device), torch.tensor([4, 3], device=lengths_device))
            F.ctc_loss(lp, torch.randint(1, 5, (2, 4), device=D), *lengths, reduction=reduction).backward()
        return run
    yield "ctc_loss", ctc(D, "mean")
    # Under a dispatch mode (this recorder, an op census) ctc_loss takes its composite path:
    # _ctc_loss.Tensor, whose kernel reads CPU lengths on the host (on CUDA too). (The mean
    # reduction then divides by the CPU lengths, which CUDA refuses as well.)
    yield "ctc_loss, CPU lengths", ctc("cpu", "sum")
    yield "rms_norm", lambda: F.rms_norm(x, (4,), torch.ones(4, device=D, requires_grad=True)).sum().backward()
    yield "batch_norm", lambda: nn.BatchNorm1d(3).to(D)(x).sum().backward()
    yield "depthwise conv", lambda: F.conv2d(torch.randn(1, 4, 5, 5, device=D, requires_grad=True),
                                             torch.randn(4, 1, 3, 3, device=D), groups=4).sum().backward()
    yield "grid_sample", lambda: F.grid_sample(
        torch.randn(1, 2, 4, 4, device=D, requires_grad=True),
        F.affine_grid(torch.randn(1, 2, 3, device=D), (1, 2, 4, 4), align_corners=False),
        align_corners=False).sum().backward()
    yield "sdpa", lambda: F.scaled_dot_product_attention(x[None], x[None], x[None]).sum().backward()

    def mha():
        m = nn.MultiheadAttention(4, 2, batch_first=True).to(D).eval()
        with torch.no_grad():
            q = torch.randn(2, 3, 4, device=D)
            m(q, q, q, need_weights=False)
    yield "MultiheadAttention fast path", mha
    yield "sync batch norm", lambda: sync_batch_norm_step(torch.randn(4, 3, 5, 5), torch.float32, world=2)


@pytest.mark.parametrize("name,program", list(_programs()), ids=[n for n, _ in _programs()])
def test_pytorchs_accelerator_paths_run_and_select_only_ops_neuron_has(name, program):
    """Each program runs on neuron; every accelerator-only op it reaches has a neuron kernel."""
    recorder = Recorder()
    with recorder:
        program()
    torch.neuron.synchronize()
    reached = recorder.ops & set(accelerator_only.OPS)
    for op in reached:
        assert accelerator_only.OPS[op][0] == accelerator_only.KERNEL, op
        assert torch._C._dispatch_has_kernel_for_dispatch_key("aten::" + op, "PrivateUse1"), op
    expected = {"LSTM": "_thnn_fused_lstm_cell", "GRU": "_thnn_fused_gru_cell", "sync batch norm": "batch_norm_stats"}
    if name in expected:
        assert expected[name] in reached


def test_an_op_with_no_kernel_anywhere_but_cuda_names_itself():
    a = torch.randn(2, 3, device=D, dtype=torch.bfloat16)
    b = torch.randn(3, 2, device=D, dtype=torch.bfloat16)
    with pytest.raises(NotImplementedError, match=r"Could not run 'aten::mm.dtype' on the neuron device.*"
                                                  r"Accelerator-only ops"):
        torch.mm(a, b, out_dtype=torch.float32)


def test_ctc_loss_tensor_overloads_accept_cpu_lengths_only():
    """_ctc_loss.Tensor / _ctc_loss_backward.Tensor read the lengths on the host, so CPU lengths
    are accepted (as on CUDA); CPU log_probs or targets are not: CUDA's kernel checks that they
    share a device (review 11, finding 8)."""
    torch.manual_seed(0)
    lp, tg = torch.randn(12, 2, 5).log_softmax(2), torch.randint(1, 5, (2, 4))
    il, tl = torch.tensor([12, 12]), torch.tensor([4, 3])
    loss, alpha = torch.ops.aten._ctc_loss.Tensor(lp.to(D), tg.to(D), il, tl)
    want_loss, want_alpha = torch.ops.aten._ctc_loss.Tensor(lp, tg, il, tl)
    torch.testing.assert_close(loss.cpu(), want_loss, atol=1e-5, rtol=1e-5)
    grad = torch.ops.aten._ctc_loss_backward.Tensor(torch.ones(2, device=D), lp.to(D), tg.to(D), il, tl, loss,
                                                   alpha, 0)
    assert grad.device.type == "neuron"
    for log_probs, targets in ((lp, tg.to(D)), (lp.to(D), tg)):
        with pytest.raises(RuntimeError, match=r"same device.*neuron:0 and cpu.*_ctc_loss.Tensor"):
            torch.ops.aten._ctc_loss.Tensor(log_probs, targets, il, tl)
        with pytest.raises(RuntimeError, match=r"same device.*neuron:0 and cpu.*_ctc_loss_backward.Tensor"):
            torch.ops.aten._ctc_loss_backward.Tensor(torch.ones(2, device=D), log_probs, targets, il, tl, loss,
                                                     alpha, 0)


# ---- SyncBatchNorm's ops ---------------------------------------------------------------------------

def reference_stats(x):
    dims = [0] + list(range(2, x.dim()))
    x = x.double()
    return x.mean(dims), x.var(dims, unbiased=False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "2d"])
def test_batch_norm_stats_and_elemt(dtype, layout):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(4, 3, 5, 6, generator=g) * 2 + 1).to(dtype)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    elif layout == "2d":
        x = x[:, :, 0, 0].contiguous()
    eps = 1e-5
    mean, invstd = torch.batch_norm_stats(x.to(D), eps)
    assert mean.dtype == invstd.dtype == torch.float32 and mean.shape == (3,)  # the accumulate type
    want_mean, want_var = reference_stats(x)
    torch.testing.assert_close(mean.cpu().double(), want_mean, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(invstd.cpu().double(), (want_var + eps).rsqrt(), atol=1e-5, rtol=1e-5)
    weight, bias = torch.randn(3, generator=g).to(dtype), torch.randn(3, generator=g).to(dtype)
    shape = [1, 3] + [1] * (x.dim() - 2)
    for w, b in ((weight, bias), (None, None)):
        out = torch.batch_norm_elemt(x.to(D), w.to(D) if w is not None else None, b.to(D) if b is not None else None,
                                     mean, invstd, eps)
        want = (x.double() - mean.cpu().double().view(shape)) * invstd.cpu().double().view(shape)
        if w is not None:
            want = want * w.double().view(shape) + b.double().view(shape)
        assert out.dtype == dtype and out.shape == x.shape
        if layout == "channels_last":
            assert out.is_contiguous(memory_format=torch.channels_last)
        atol, rtol = TOLERANCES[dtype]
        torch.testing.assert_close(out.cpu(), want.to(dtype), atol=atol, rtol=rtol)
    out = torch.empty(0, device=D, dtype=dtype)
    torch.batch_norm_elemt(x.to(D), weight.to(D), bias.to(D), mean, invstd, eps, out=out)
    assert out.shape == x.shape
    torch.testing.assert_close(out.cpu(), torch.batch_norm_elemt(x.to(D), weight.to(D), bias.to(D), mean, invstd,
                                                                  eps).cpu())
    # the autogenerated out= variant of batch_norm_stats composes with the kernel
    m_out, i_out = torch.empty(0, device=D), torch.empty(0, device=D)
    torch.ops.aten.batch_norm_stats.out(x.to(D), eps, out0=m_out, out1=i_out)
    torch.testing.assert_close(m_out.cpu(), mean.cpu())


@pytest.mark.parametrize("running_dtype", [torch.float32, torch.bfloat16, None], ids=["float32", "bfloat16", "none"])
def test_batch_norm_gather_stats(running_dtype):
    """Statistics of ranks with different counts combine into the whole batch's; the running
    statistics are updated in place with the unbiased variance."""
    g = torch.Generator().manual_seed(1)
    parts = [torch.randn(n, 3, 4, generator=g) * (i + 1) + i for i, n in enumerate((2, 5, 3))]
    eps, momentum = 1e-5, 0.1
    stats = [torch.batch_norm_stats(p.to(D), eps) for p in parts]
    means = torch.stack([m for m, _ in stats])
    invstds = torch.stack([s for _, s in stats])
    counts = torch.tensor([p.numel() // 3 for p in parts], dtype=torch.float32, device=D)
    whole = torch.cat(parts)
    want_mean, want_var = reference_stats(whole)
    n = whole.numel() // 3
    running = None
    if running_dtype is not None:
        running = (torch.randn(3, generator=g).to(running_dtype), torch.rand(3, generator=g).to(running_dtype) + 0.5)
        dev_running = [t.to(D) for t in running]
    else:
        dev_running = [None, None]
    mean, invstd = torch.batch_norm_gather_stats_with_counts(whole.to(D), means, invstds, *dev_running, momentum,
                                                             eps, counts.to(running_dtype or torch.float32))
    assert mean.dtype == invstd.dtype == torch.float32
    torch.testing.assert_close(mean.cpu().double(), want_mean, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(invstd.cpu().double(), (want_var + eps).rsqrt(), atol=1e-5, rtol=1e-5)
    if running is not None:
        atol, rtol = TOLERANCES[running_dtype]
        want_rm = (1 - momentum) * running[0].double() + momentum * want_mean
        want_rv = (1 - momentum) * running[1].double() + momentum * want_var * n / (n - 1)
        assert dev_running[0].dtype == running_dtype
        torch.testing.assert_close(dev_running[0].cpu(), want_rm.to(running_dtype), atol=atol, rtol=rtol)
        torch.testing.assert_close(dev_running[1].cpu(), want_rv.to(running_dtype), atol=atol, rtol=rtol)
    # equal counts: batch_norm_gather_stats(count=...)
    same = [torch.randn(4, 3, 4, generator=g) for _ in range(2)]
    stats = [torch.batch_norm_stats(p.to(D), eps) for p in same]
    mean, invstd = torch.batch_norm_gather_stats(same[0].to(D), torch.stack([m for m, _ in stats]),
                                                 torch.stack([s for _, s in stats]), None, None, momentum, eps, 16)
    want_mean, want_var = reference_stats(torch.cat(same))
    torch.testing.assert_close(mean.cpu().double(), want_mean, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(invstd.cpu().double(), (want_var + eps).rsqrt(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("given", ["running_mean", "running_var"])
def test_batch_norm_gather_stats_updates_either_running_statistic_alone(given, tmp_path, monkeypatch):
    """CUDA's batch_norm_reduce_statistics_kernel updates each running statistic that is given,
    the other may be None (review 11, finding 6); eager and compiled alike."""
    import torch._dynamo

    g = torch.Generator().manual_seed(3)
    x = torch.randn(6, 3, 4, generator=g) * 2 + 1
    momentum, n = 0.5, 24
    want = {"running_mean": 0.5 * x.double().mean((0, 2)),
            "running_var": 0.5 + 0.5 * x.double().var((0, 2))}[given]

    def gather(x, mean, invstd, stat, counts):
        running = (stat, None) if given == "running_mean" else (None, stat)
        return torch.batch_norm_gather_stats_with_counts(x, mean[None], invstd[None], *running, momentum, 1e-5,
                                                         counts)

    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "neff_cache"))
    torch._dynamo.reset()
    for fn in (gather, torch.compile(gather, backend="neuron", fullgraph=True)):
        mean, invstd = torch.batch_norm_stats(x.to(D), 1e-5)
        stat = torch.zeros(3, device=D) if given == "running_mean" else torch.ones(3, device=D)
        fn(x.to(D), mean, invstd, stat, torch.tensor([float(n)], device=D))
        torch.testing.assert_close(stat.cpu().double(), want, atol=1e-5, rtol=1e-5)
    torch._dynamo.reset()
    with pytest.raises(RuntimeError, match=f"expected {given} of 3 elements .*got \\[4\\]"):
        gather(x.to(D), mean, invstd, torch.zeros(4, device=D), torch.tensor([float(n)], device=D))


def test_batch_norm_elemt_out_on_another_device_is_refused():
    """out= on the CPU (also 0-dim) or on another NeuronCore raises CUDA's device error, as
    every generic op's out= does, instead of being written silently (review 11, finding 7)."""
    x = torch.randn(4, 3, 5, device=D)
    mean, invstd = torch.batch_norm_stats(x, 1e-5)
    for out in (torch.empty(0), torch.empty(()), torch.empty(0, device="neuron:1")):
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device.*neuron:0 and "
                                               f"{out.device}.*batch_norm_elemt.out"):
            torch.batch_norm_elemt(x, None, None, mean, invstd, 1e-5, out=out)
        assert out.shape != x.shape  # not resized, not written
    out = torch.empty(0, device=D)
    torch.batch_norm_elemt(x, None, None, mean, invstd, 1e-5, out=out)
    torch.testing.assert_close(out.cpu(), torch.batch_norm_elemt(x, None, None, mean, invstd, 1e-5).cpu())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_batch_norm_backward_reduce_and_elemt_give_batch_norms_gradients(dtype):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4, 3, 5, generator=g).to(dtype)
    dy = torch.randn(4, 3, 5, generator=g).to(dtype)
    weight = torch.randn(3, generator=g)
    eps = 1e-5
    mean, invstd = torch.batch_norm_stats(x.to(D), eps)
    sum_dy, sum_dy_xmu, grad_weight, grad_bias = torch.batch_norm_backward_reduce(
        dy.to(D), x.to(D), mean, invstd, weight.to(D), True, True, True)
    assert sum_dy.dtype == sum_dy_xmu.dtype == torch.float32 and grad_weight.dtype == torch.float32
    xd, wd = x.double().requires_grad_(), weight.double().requires_grad_()
    out = F.batch_norm(xd, None, None, wd, torch.zeros(3, dtype=torch.double), training=True, eps=eps)
    want_x, want_w, = torch.autograd.grad((out * dy.double()).sum(), [xd, wd])
    dims = [0, 2]
    torch.testing.assert_close(sum_dy.cpu().double(), dy.double().sum(dims), atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(grad_bias.cpu().double(), dy.double().sum(dims), atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(grad_weight.cpu().double(), want_w, atol=1e-4, rtol=1e-4)
    count = torch.tensor([x.numel() // 3], dtype=torch.int32, device=D)
    grad_input = torch.batch_norm_backward_elemt(dy.to(D), x.to(D), mean, invstd, weight.to(D), sum_dy, sum_dy_xmu,
                                                 count)
    assert grad_input.dtype == dtype
    atol, rtol = TOLERANCES[dtype]
    torch.testing.assert_close(grad_input.cpu(), want_x.to(dtype), atol=atol, rtol=rtol)
    # only some outputs asked for
    none = torch.batch_norm_backward_reduce(dy.to(D), x.to(D), mean, invstd, None, False, False, True)
    assert none[0] is None and none[1] is None and none[2] is None and none[3].shape == (3,)


def test_float64_operands_do_not_widen_float32_results():
    """Result dtypes follow CUDA's contract when float64 and float32 operands mix (the call then
    runs in 64 bits, Note [64-bit as 32-bit]): batch_norm_elemt and batch_norm_backward_elemt
    return the input's dtype, gather_stats the mean's, backward_reduce's weight gradients the
    weight's (review 11, finding 5)."""
    g = torch.Generator().manual_seed(5)
    x, dy = torch.randn(4, 3, 5, generator=g), torch.randn(4, 3, 5, generator=g)
    w, b = torch.randn(3, generator=g, dtype=torch.float64), torch.randn(3, generator=g, dtype=torch.float64)
    eps, shape = 1e-5, (1, 3, 1)
    mean, invstd = torch.batch_norm_stats(x.to(D), eps)
    out = torch.batch_norm_elemt(x.to(D), w.to(D), b.to(D), mean, invstd, eps)
    assert out.dtype == torch.float32
    want = (x.double() - mean.cpu().double().view(shape)) * invstd.cpu().double().view(shape) * w.view(shape) + \
        b.view(shape)
    torch.testing.assert_close(out.cpu(), want.float(), atol=1e-5, rtol=1e-5)
    rm, rv = torch.zeros(3, dtype=torch.float64, device=D), torch.ones(3, dtype=torch.float64, device=D)
    gm, gi = torch.batch_norm_gather_stats_with_counts(x.to(D), mean[None], invstd[None], rm, rv, 0.5, eps,
                                                       torch.tensor([20.0], dtype=torch.float64, device=D))
    assert gm.dtype == gi.dtype == torch.float32 and rm.dtype == rv.dtype == torch.float64
    torch.testing.assert_close(rm.cpu(), 0.5 * x.double().mean((0, 2)), atol=1e-6, rtol=1e-6)
    sum_dy, sum_dy_xmu, _, _ = torch.batch_norm_backward_reduce(dy.to(D), x.to(D), mean, invstd, None, True, False,
                                                                False)
    gx = torch.batch_norm_backward_elemt(dy.to(D), x.to(D), mean, invstd, w.to(D), sum_dy, sum_dy_xmu,
                                         torch.tensor([20], dtype=torch.int32, device=D))
    assert gx.dtype == torch.float32
    xd, dyd = x.double().to(D), dy.double().to(D)
    mean64, invstd64 = torch.batch_norm_stats(xd, eps)
    reduced = torch.batch_norm_backward_reduce(dyd, xd, mean64, invstd64, w.float().to(D), True, True, True)
    assert [t.dtype for t in reduced] == [torch.float64, torch.float64, torch.float32, torch.float32]


def sync_batch_norm_step(x, dtype, world):
    """SyncBatchNorm's autograd function on neuron, in a simulated group of `world` ranks that
    all hold `x` (the collectives are replaced by their single-process results). Returns the
    output, the input, weight and bias gradients and the running statistics."""
    import torch.distributed as dist
    from torch.nn.modules import _functions

    class Group:
        def _get_backend_name(self):
            return "neuron"

    def all_gather_single(output, tensor, group=None, async_op=False):
        output.copy_(tensor.reshape(1, -1).repeat(1, world))

    def all_reduce(tensor, op=None, group=None, async_op=False):
        tensor.mul_(world)

    saved = (_functions.dist.all_gather_single if hasattr(_functions.dist, "all_gather_single") else None,
             dist.all_reduce)
    _functions.dist.all_gather_single = all_gather_single
    dist.all_reduce = all_reduce
    try:
        x = x.to(D, dtype).requires_grad_()
        weight = torch.linspace(0.5, 1.5, x.shape[1], device=D, dtype=dtype, requires_grad=True)
        bias = torch.linspace(-1, 1, x.shape[1], device=D, dtype=dtype, requires_grad=True)
        running_mean = torch.zeros(x.shape[1], device=D, dtype=dtype)
        running_var = torch.ones(x.shape[1], device=D, dtype=dtype)
        out = _functions.SyncBatchNorm.apply(x, weight, bias, running_mean, running_var, 1e-5, 0.1, Group(), world)
        dy = torch.linspace(-1, 1, out.numel(), device=D, dtype=dtype).reshape(out.shape)
        grads = torch.autograd.grad((out * dy).sum(), [x, weight, bias])
        return out, grads, running_mean, running_var
    finally:
        if saved[0] is None:
            del _functions.dist.all_gather_single
        else:
            _functions.dist.all_gather_single = saved[0]
        dist.all_reduce = saved[1]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("channels_last", [False, True], ids=["contiguous", "channels_last"])
def test_sync_batch_norm_over_two_ranks_equals_batch_norm_on_cpu(dtype, channels_last):
    """Two ranks holding the same batch: the global statistics are the batch's own (the
    running variance's Bessel correction counts both ranks); the input gradient is CPU
    BatchNorm's on the doubled batch; weight and bias gradients are the local ones."""
    x = torch.randn(4, 3, 5, 5, generator=torch.Generator().manual_seed(3)).to(dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    out, (gx, gw, gb), rm, rv = sync_batch_norm_step(x, dtype, world=2)
    bn = nn.BatchNorm2d(3, momentum=0.1).to(dtype)
    with torch.no_grad():
        bn.weight.copy_(torch.linspace(0.5, 1.5, 3))
        bn.bias.copy_(torch.linspace(-1, 1, 3))
    both = torch.cat([x, x]).requires_grad_()
    want = bn(both)
    dy = torch.linspace(-1, 1, x.numel()).reshape(x.shape).to(dtype)
    want_gx, want_gw, want_gb = torch.autograd.grad((want * torch.cat([dy, dy])).sum(), [both, bn.weight, bn.bias])
    atol, rtol = TOLERANCES[dtype]
    wide = 2 if dtype == torch.bfloat16 else 1  # bf16: statistics rounded once more (the ranks' sums)
    torch.testing.assert_close(out.cpu(), want[:4].detach(), atol=atol * wide, rtol=rtol * wide)
    torch.testing.assert_close(gx.cpu(), want_gx[:4], atol=atol * wide, rtol=rtol * wide)
    torch.testing.assert_close(gw.cpu(), (want_gw / 2), atol=atol * 10 * wide, rtol=rtol * wide)
    torch.testing.assert_close(gb.cpu(), (want_gb / 2), atol=atol * 10 * wide, rtol=rtol * wide)
    torch.testing.assert_close(rm.cpu(), bn.running_mean, atol=atol, rtol=rtol)
    torch.testing.assert_close(rv.cpu(), bn.running_var, atol=atol, rtol=rtol)


# ---- _fused_dropout / _masked_scale ------------------------------------------------------------

def test_fused_dropout_and_masked_scale_follow_cudas_contract():
    x = torch.randn(200, 50, device=D, requires_grad=True)
    keep = 0.7  # _fused_dropout takes the probability to keep
    torch.neuron.manual_seed(5)
    out, mask = torch._fused_dropout(x, keep)
    assert mask.dtype == torch.uint8 and mask.shape == x.shape and out.dtype == x.dtype
    m = mask.cpu()
    assert set(m.unique().tolist()) <= {0, 1}
    assert abs(m.float().mean().item() - keep) < 0.02
    torch.testing.assert_close(out.detach().cpu(), x.detach().cpu() * m / keep)
    # the device's generator: seeded runs repeat
    torch.neuron.manual_seed(5)
    assert torch.equal(torch._fused_dropout(x, keep)[1].cpu(), m)
    # backward: derivatives.yaml's _fused_dropout_backward -> _masked_scale
    (gx,) = torch.autograd.grad(out.sum(), x)
    torch.testing.assert_close(gx.cpu(), m.float() / keep)
    scaled = torch._masked_scale(x.detach(), mask, 3.0)
    torch.testing.assert_close(scaled.cpu(), x.detach().cpu() * m * 3.0)
    with pytest.raises(RuntimeError, match="mask should be torch.uint8"):
        torch._masked_scale(x.detach(), mask.bool(), 2.0)
    empty_out, empty_mask = torch._fused_dropout(torch.empty(0, 3, device=D), 0.5)
    assert empty_out.shape == empty_mask.shape == (0, 3)


def test_reporting_follows_torchneurons_native_set():
    """TorchNeuron 2.13 lists SyncBatchNorm's five ops natively (executed), not
    _fused_dropout / _masked_scale (fallback)."""
    torch_neuronx.clear_op_tracking()
    sync_batch_norm_step(torch.randn(4, 3, 5), torch.float32, world=2)
    x = torch.randn(10, device=D)
    torch._masked_scale(x, torch._fused_dropout(x, 0.5)[1], 2.0)
    executed, fallback = set(torch_neuronx.get_executed_ops()), set(torch_neuronx.get_fallback_ops())
    assert {"aten::batch_norm_stats", "aten::batch_norm_gather_stats_with_counts", "aten::batch_norm_elemt",
            "aten::batch_norm_backward_reduce", "aten::batch_norm_backward_elemt"} <= executed
    assert {"aten::_fused_dropout", "aten::_masked_scale"} <= fallback
    counts = torch_neuronx.get_op_counts()
    assert counts["aten::batch_norm_stats"]["kernel"] == "hot"
    torch_neuronx.clear_op_tracking()


def test_accelerator_only_kernels_in_asynchronous_mode():
    """Queued kernels (batch-norm statistics, in-place running statistics) and random draws
    in program order (_fused_dropout) with NEURON_LAUNCH_BLOCKING=0."""
    code = textwrap.dedent("""
        import torch, torch_neuronx
        x = torch.randn(6, 3, 4) * 3 + 1
        for _ in range(3):  # the first call of a signature runs inline; later ones are queued
            mean, invstd = torch.batch_norm_stats(x.to("neuron"), 1e-5)
            rm, rv = torch.zeros(3, device="neuron"), torch.ones(3, device="neuron")
            gm, gi = torch.batch_norm_gather_stats_with_counts(x.to("neuron"), mean[None], invstd[None], rm, rv,
                                                               0.5, 1e-5, torch.tensor([24.0], device="neuron"))
            out = torch.batch_norm_elemt(x.to("neuron"), None, None, gm, gi, 1e-5)
        want = torch.nn.functional.batch_norm(x, None, None, training=True)
        torch.testing.assert_close(out.cpu(), want, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(rm.cpu(), 0.5 * x.mean((0, 2)), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(rv.cpu(), 0.5 + 0.5 * x.var((0, 2)), atol=1e-5, rtol=1e-5)
        torch.neuron.manual_seed(1)
        a = [torch._fused_dropout(torch.ones(1000, device="neuron"), 0.5)[1] for _ in range(3)]
        torch.neuron.manual_seed(1)
        b = [torch._fused_dropout(torch.ones(1000, device="neuron"), 0.5)[1] for _ in range(3)]
        assert all(torch.equal(p.cpu(), q.cpu()) for p, q in zip(a, b))
        assert not torch.equal(a[0].cpu(), a[1].cpu())
        print("OK")
    """)
    result = run_python(code, env={"NEURON_LAUNCH_BLOCKING": "0"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "OK" in result.stdout


# ---- torch.compile(backend="neuron") ---------------------------------------------------------------

def test_compiled_programs_decompose_the_accelerator_only_ops(tmp_path, monkeypatch):
    """A compiled program runs CPU kernels on host views, so these ops are decomposed into the
    plain ops their kernels compute (compile/decompositions.py): results equal the eager
    kernels', in-place running statistics included."""
    import torch._dynamo

    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "neff_cache"))
    torch._dynamo.reset()

    def sync_bn(x, dy, weight, bias, rm, rv, count):
        mean, invstd = torch.batch_norm_stats(x, 1e-5)
        counts = torch.cat([count, count * 2])
        mean, invstd = torch.batch_norm_gather_stats_with_counts(x, torch.stack([mean, mean]),
                                                                 torch.stack([invstd, invstd]), rm, rv, 0.1, 1e-5,
                                                                 counts)
        out = torch.batch_norm_elemt(x, weight, bias, mean, invstd, 1e-5)
        sum_dy, sum_dy_xmu, gw, gb = torch.batch_norm_backward_reduce(dy, x, mean, invstd, weight, True, True, True)
        gx = torch.batch_norm_backward_elemt(dy, x, mean, invstd, weight, sum_dy, sum_dy_xmu, counts.int())
        return out, gw, gb, gx, mean, invstd

    g = torch.Generator().manual_seed(4)
    x, dy = torch.randn(4, 3, 5, generator=g), torch.randn(4, 3, 5, generator=g)
    weight, bias = torch.randn(3, generator=g), torch.randn(3, generator=g)
    results = {}
    for mode, fn in (("eager", sync_bn), ("compiled", torch.compile(sync_bn, backend="neuron", fullgraph=True))):
        rm, rv = torch.zeros(3, device=D), torch.ones(3, device=D)
        args = [t.to(D) for t in (x, dy, weight, bias)] + [rm, rv, torch.tensor([20.0], device=D)]
        if mode == "compiled":  # compile first: tracing runs the eager kernels on stand-in tensors
            fn(*[a.clone() for a in args])
        torch_neuronx.clear_op_tracking()
        results[mode] = list(fn(*args)) + [rm, rv]
        ran = torch_neuronx.get_op_counts()
    assert "aten::batch_norm_stats" not in ran and "aten::batch_norm_backward_elemt" not in ran
    for i, (got, want) in enumerate(zip(results["compiled"], results["eager"])):
        torch.testing.assert_close(got.cpu(), want.cpu(), atol=1e-5, rtol=1e-5, msg=lambda m: f"result {i}: {m}")

    def dropout(x):
        out, mask = torch._fused_dropout(x, 0.75)
        return out, mask, torch._masked_scale(x, mask, 2.0)

    x = torch.randn(100, 40, device=D)
    out, mask, scaled = torch.compile(dropout, backend="neuron", fullgraph=True)(x)
    assert mask.dtype == torch.uint8 and abs(mask.float().mean().item() - 0.75) < 0.03
    torch.testing.assert_close(out.cpu(), x.cpu() * mask.cpu() / 0.75)
    torch.testing.assert_close(scaled.cpu(), x.cpu() * mask.cpu() * 2.0)
    torch._dynamo.reset()
