"""Recurrent layers on neuron (issue 11): nn.LSTM, nn.GRU, nn.RNN, nn.LSTMCell, nn.GRUCell,
forward and backward, compared with CPU at the OpInfo sweep's tolerances.

On a non-CPU device PyTorch's RNN code computes each step with the fused cell ops
_thnn_fused_lstm_cell / _thnn_fused_gru_cell (Note [Fused recurrent cells] in
csrc/kernels/Recurrent.cpp); on the CPU with plain ops (or oneDNN's LSTM). The two paths
compute the same function, so the comparison is a real one.

What is compared (`compare` below):
- float32: outputs and every gradient equal CPU's within the sweep's float32 tolerances.
- bfloat16: outputs equal CPU's within the sweep's bfloat16 tolerances. Gradients are
  compared with the exact gradient instead (float64 on the same bfloat16 inputs and
  weights): backpropagation through time rounds every step's intermediate results and every
  per-step weight gradient to bfloat16, and the two devices round different intermediates
  (the CPU adds the biases inside its matmuls, computes the input projection of all steps in
  one matmul and rounds each elementwise op; the fused path of PyTorch's accelerator code
  projects each step apart and adds the biases in float32, rounding once). Elementwise, CPU's
  own bfloat16 gradients are up to 15 times the sweep's tolerance away from the exact ones
  where sums cancel, so no two implementations agree within it. Measured against the
  gradient's largest element, CPU's error is up to 2.8% here; neuron's must be at most twice
  the sweep's bfloat16 rtol (3.2%) or CPU's own error, whichever is larger. (The OpInfo sweep
  compares gradients in float32 only.)"""
import copy
import itertools
import textwrap

import pytest
import torch
import torch.nn as nn
import torch_neuronx
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from conftest import run_python

pytestmark = pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")

# The OpInfo sweep's tolerances (conformance/opinfo_sweep.py TOLERANCES): (atol, rtol).
TOLERANCES = {torch.float32: (1e-5, 1.3e-6), torch.bfloat16: (1e-2, 1.6e-2)}
DTYPES = [torch.float32, torch.bfloat16]
INPUT, HIDDEN, SEQ, BATCH = 5, 7, 6, 4
LENGTHS = [6, 4, 4, 1]  # of the padded sequences (packed runs)


def assert_close(got, want, dtype, what=""):
    atol, rtol = TOLERANCES[dtype]
    assert got.device.type == "neuron", what
    assert got.dtype == want.dtype, what
    torch.testing.assert_close(got.cpu(), want, atol=atol, rtol=rtol, msg=lambda m: f"{what}: {m}")


def normwise_error(got, exact):
    """The largest error of `got` against `exact`, relative to the largest |exact|."""
    return ((got.detach().cpu().double() - exact).abs().max() / exact.abs().max().clamp_min(1e-30)).item()


def assert_as_accurate(got, cpu, exact, dtype, what=""):
    assert got.device.type == "neuron" and got.dtype == cpu.dtype, what
    ours, cpus = normwise_error(got, exact), normwise_error(cpu, exact)
    bound = max(2 * TOLERANCES[dtype][1], cpus)
    assert ours <= bound, f"{what}: error {ours:.4f} of the largest element (CPU's: {cpus:.4f})"


def compare(run, modules, dtype, names=None):
    """run(module, device, dtype) -> (outputs, gradients); `modules` = (CPU, neuron) modules
    with the same weights."""
    cpu, dev = modules
    want_out, want_grads = run(cpu, "cpu", dtype)
    got_out, got_grads = run(dev, "neuron", dtype)
    assert len(got_out) == len(want_out) and len(got_grads) == len(want_grads)
    for i, (got, want) in enumerate(zip(got_out, want_out)):
        assert_close(got, want, dtype, f"output {i}")
    names = names or [f"gradient {i}" for i in range(len(got_grads))]
    if dtype == torch.float32:
        for name, got, want in zip(names, got_grads, want_grads):
            assert_close(got, want, dtype, name)
        return
    _, exact_grads = run(copy.deepcopy(cpu).double(), "cpu", torch.float64)
    for name, got, want, exact in zip(names, got_grads, want_grads, exact_grads):
        assert_as_accurate(got, want, exact, dtype, name)


def make_pair(factory, dtype, seed=0):
    """The same module on CPU and on neuron (the neuron one a copy of the CPU one's weights)."""
    torch.manual_seed(seed)
    cpu = factory().to(dtype)
    dev = factory().to(dtype)
    dev.load_state_dict(cpu.state_dict())
    return cpu, dev.to("neuron")


def leaf(t, device, dtype=None):
    return t.detach().to(device, dtype or t.dtype).requires_grad_(t.requires_grad)


LAYER_CASES = list(itertools.product(["LSTM", "GRU"], DTYPES, [1, 2], [False, True], [False, True],
                                     [False, True], ["padded", "packed"]))


def case_id(case):
    kind, dtype, layers, bidirectional, batch_first, initial, packing = case
    return "-".join([kind, str(dtype).split(".")[1], f"{layers}layer", "bi" if bidirectional else "uni",
                     "batchfirst" if batch_first else "seqfirst", "h0" if initial else "noh0", packing])


@pytest.mark.parametrize("case", LAYER_CASES, ids=[case_id(c) for c in LAYER_CASES])
def test_recurrent_layer_matches_cpu(case):
    kind, dtype, layers, bidirectional, batch_first, initial, packing = case
    module_class = getattr(nn, kind)
    cpu, dev = make_pair(lambda: module_class(INPUT, HIDDEN, num_layers=layers, bidirectional=bidirectional,
                                              batch_first=batch_first), dtype)
    g = torch.Generator().manual_seed(1)
    shape = (BATCH, SEQ, INPUT) if batch_first else (SEQ, BATCH, INPUT)
    inputs = [torch.randn(shape, generator=g).to(dtype).requires_grad_()]
    if initial:
        state_shape = (layers * (2 if bidirectional else 1), BATCH, HIDDEN)
        h0 = torch.randn(state_shape, generator=g).to(dtype).requires_grad_()
        if kind == "LSTM":
            c0 = torch.randn(state_shape, generator=g).to(dtype).requires_grad_()
            inputs.append((h0, c0))
        else:
            inputs.append(h0)
    packed = packing == "packed"

    def flat(ins):
        return [t for item in ins for t in (item if isinstance(item, tuple) else (item,))]

    def run(module, device, run_dtype):
        moved = [tuple(leaf(t, device, run_dtype) for t in item) if isinstance(item, tuple)
                 else leaf(item, device, run_dtype) for item in inputs]
        x = moved[0]
        seq = pack_padded_sequence(x, LENGTHS, batch_first=batch_first) if packed else x
        out, state = module(seq, *moved[1:])
        if packed:
            out, out_lengths = pad_packed_sequence(out, batch_first=batch_first)
            assert out_lengths.tolist() == LENGTHS
        states = list(state) if isinstance(state, tuple) else [state]
        outputs = [out] + states
        weights = [torch.linspace(-1, 1, o.numel()).reshape(o.shape).to(device) for o in outputs]
        loss = sum((o.double() * w).sum() for o, w in zip(outputs, weights))
        leaves = flat(moved) + list(module.parameters())
        return outputs, torch.autograd.grad(loss, leaves)

    names = [f"gradient of input {i}" for i in range(len(flat(inputs)))]
    names += [f"gradient of {n}" for n, _ in cpu.named_parameters()]
    compare(run, (cpu, dev), dtype, names)


CELL_CASES = list(itertools.product(["LSTMCell", "GRUCell", "RNNCell"], DTYPES, [False, True], [True, False]))


@pytest.mark.parametrize("kind,dtype,initial,bias", CELL_CASES,
                         ids=[f"{k}-{str(d).split('.')[1]}-{'h0' if i else 'noh0'}-{'bias' if b else 'nobias'}"
                              for k, d, i, b in CELL_CASES])
def test_recurrent_cell_matches_cpu(kind, dtype, initial, bias):
    """A cell applied over a few steps (its state fed back), forward and backward."""
    cpu, dev = make_pair(lambda: getattr(nn, kind)(INPUT, HIDDEN, bias=bias), dtype)
    g = torch.Generator().manual_seed(2)
    xs = torch.randn(SEQ, BATCH, INPUT, generator=g).to(dtype).requires_grad_()
    h0 = torch.randn(BATCH, HIDDEN, generator=g).to(dtype).requires_grad_()
    c0 = torch.randn(BATCH, HIDDEN, generator=g).to(dtype).requires_grad_()

    def run(module, device, run_dtype):
        x, h, c = (leaf(t, device, run_dtype) for t in (xs, h0, c0))
        state = ((h, c) if kind == "LSTMCell" else h) if initial else None
        outputs = []
        for step in range(SEQ):
            state = module(x[step], state)
            outputs.extend(state if isinstance(state, tuple) else [state])
        loss = sum((o.double() * (i + 1)).sum() for i, o in enumerate(outputs))
        states = ([h, c] if kind == "LSTMCell" else [h]) if initial else []
        leaves = [x] + states + list(module.parameters())
        return outputs, torch.autograd.grad(loss, leaves)

    compare(run, (cpu, dev), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "bfloat16"])
@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_packed_unsorted_no_bias_and_unbatched(kind, dtype):
    """enforce_sorted=False (the packer sorts and unsorts), bias=False, and an unbatched
    (2-D) input."""
    modules = make_pair(lambda: getattr(nn, kind)(INPUT, HIDDEN, num_layers=2, bias=False, bidirectional=True),
                        dtype)
    x = torch.randn(SEQ, BATCH, INPUT, generator=torch.Generator().manual_seed(3)).to(dtype)

    def run(module, device, run_dtype):
        xi = leaf(x, device, run_dtype).requires_grad_()
        packed = pack_padded_sequence(xi, [3, 6, 1, 4], enforce_sorted=False)
        out, _ = pad_packed_sequence(module(packed)[0])
        unbatched = module(xi[:, 0])[0]
        loss = (out.double() * torch.linspace(-1, 1, out.numel()).reshape(out.shape).to(device)).sum()
        loss = loss + unbatched.double().pow(2).sum()
        return [out, unbatched], torch.autograd.grad(loss, [xi] + list(module.parameters()))

    compare(run, modules, dtype)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_float64_and_float16_layers(kind):
    """Not in the issue's list, checked too. float64: the device computes it in 32 bits (README,
    64-bit dtypes), so it is compared with float32's tolerances, as the sweep does. float16 (not
    in the sweep): outputs within 1e-3 / 1e-3 of CPU's; gradients as bfloat16's (against the
    exact gradient, at most twice that rtol or CPU's own error)."""
    for dtype in (torch.float64, torch.float16):
        cpu, dev = make_pair(lambda: getattr(nn, kind)(INPUT, HIDDEN, num_layers=2, bidirectional=True), dtype)
        x = torch.randn(SEQ, BATCH, INPUT, generator=torch.Generator().manual_seed(8)).to(dtype)

        def run(module, device, run_dtype):
            xi = leaf(x, device, run_dtype).requires_grad_()
            out = module(xi)[0]
            return out, torch.autograd.grad(out.double().pow(2).sum(), xi)[0]

        (got, got_grad), (want, want_grad) = run(dev, "neuron", dtype), run(cpu, "cpu", dtype)
        assert got.dtype == got_grad.dtype == dtype and got.device.type == "neuron"
        if dtype == torch.float64:
            atol, rtol = TOLERANCES[torch.float32]
            torch.testing.assert_close(got.cpu(), want, atol=atol, rtol=rtol)
            torch.testing.assert_close(got_grad.cpu(), want_grad, atol=atol, rtol=rtol)
        else:
            torch.testing.assert_close(got.cpu(), want, atol=1e-3, rtol=1e-3)
            exact = run(copy.deepcopy(cpu).double(), "cpu", torch.float64)[1]
            ours, cpus = normwise_error(got_grad, exact), normwise_error(want_grad, exact)
            assert ours <= max(2e-3, cpus), (ours, cpus)


def test_lstm_with_projections_matches_cpu():
    modules = make_pair(lambda: nn.LSTM(INPUT, HIDDEN, num_layers=2, proj_size=3, bidirectional=True),
                        torch.float32)
    x = torch.randn(SEQ, BATCH, INPUT)

    def run(module, device, dtype):
        xi = leaf(x, device, dtype).requires_grad_()
        out, (h, c) = module(xi)
        return [out, h, c], torch.autograd.grad(out.sum() + h.sum() + c.sum(), [xi] + list(module.parameters()))

    compare(run, modules, torch.float32)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_double_backward_matches_cpu(kind):
    """create_graph=True: autograd takes the differentiable backward of the fused cells
    (_thnn_differentiable_*_cell_backward); a gradient penalty differentiates it again."""
    modules = make_pair(lambda: getattr(nn, kind)(INPUT, HIDDEN), torch.float32)
    x = torch.randn(SEQ, BATCH, INPUT)

    def run(module, device, dtype):
        xi = leaf(x, device, dtype).requires_grad_()
        (gx,) = torch.autograd.grad(module(xi)[0].pow(2).sum(), xi, create_graph=True)
        return [gx], torch.autograd.grad(gx.pow(2).sum(), list(module.parameters()))

    compare(run, modules, torch.float32)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_inference_and_training_step(kind):
    """no_grad inference equals the grad-mode forward; a few optimizer steps track CPU's."""
    cpu, dev = make_pair(lambda: getattr(nn, kind)(INPUT, HIDDEN, num_layers=2), torch.float32)
    x = torch.randn(SEQ, BATCH, INPUT)
    with torch.no_grad():
        assert_close(dev(x.to("neuron"))[0], cpu(x)[0], torch.float32, "no_grad output")
    losses = {}
    for device, module in (("cpu", cpu), ("neuron", dev)):
        optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
        losses[device] = []
        for _ in range(3):
            loss = module(x.to(device))[0].pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses[device].append(loss.item())
    torch.testing.assert_close(losses["neuron"], losses["cpu"], atol=1e-5, rtol=1e-5)
    for (name, a), b in zip(dev.named_parameters(), cpu.parameters()):
        assert_close(a.detach(), b.detach(), torch.float32, name)


def test_dropout_between_layers_runs():
    """dropout > 0 in training draws masks (other draws than CPU's, so only shapes and
    finiteness are compared) and backpropagates."""
    torch.manual_seed(0)
    lstm = nn.LSTM(INPUT, HIDDEN, num_layers=3, dropout=0.5).to("neuron")
    x = torch.randn(SEQ, BATCH, INPUT, device="neuron", requires_grad=True)
    out, (h, c) = lstm(x)
    out.sum().backward()
    assert out.shape == (SEQ, BATCH, HIDDEN) and torch.isfinite(x.grad.cpu()).all()


def test_autocast_runs_cells_in_bfloat16():
    """Under autocast the gate matmuls are bfloat16, so the fused cells get bfloat16 gates."""
    lstm = nn.LSTM(INPUT, HIDDEN).to("neuron")
    x = torch.randn(SEQ, BATCH, INPUT, device="neuron")
    with torch.autocast("neuron", dtype=torch.bfloat16):
        out, _ = lstm(x)
    assert out.dtype == torch.bfloat16
    ref, _ = lstm.cpu()(x.cpu())
    torch.testing.assert_close(out.float().cpu(), ref, atol=3e-2, rtol=3e-2)


# ---- the fused ops themselves -----------------------------------------------------------------

def reference_lstm_cell(ig, hg, cx, b1, b2):
    gates = ig + hg + (b1 + b2 if b1 is not None else 0)
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    return o * cy.tanh(), cy, torch.cat([i, f, g, o], 1)


def reference_gru_cell(ig, hg, hx, b1, b2):
    if b1 is not None:
        ig, hg = ig + b1, hg + b2
    ir, ii, in_ = ig.chunk(3, 1)
    hr, hi, hn = hg.chunk(3, 1)
    r, z = (ir + hr).sigmoid(), (ii + hi).sigmoid()
    n = (in_ + r * hn).tanh()
    return n + z * (hx - n), torch.cat([r, z, n, hx, hn], 1)


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "bfloat16"])
@pytest.mark.parametrize("bias", [True, False])
def test_fused_lstm_cell_op_follows_cudas_contract(dtype, bias):
    """Outputs and the workspace (the activated gates i, f, g, o) as CUDA's kernel gives them;
    the backward (grad_gates, grad_cx, grad_bias) against autograd of the reference."""
    g = torch.Generator().manual_seed(4)
    B, H = 3, 5
    ig, hg = torch.randn(B, 4 * H, generator=g), torch.randn(B, 4 * H, generator=g)
    cx = torch.randn(B, H, generator=g)
    b1, b2 = (torch.randn(4 * H, generator=g), torch.randn(4 * H, generator=g)) if bias else (None, None)
    args = [t.to(dtype) if t is not None else None for t in (ig, hg, cx, b1, b2)]
    hy, cy, ws = torch.ops.aten._thnn_fused_lstm_cell(*[t.to("neuron") if t is not None else None for t in args])
    ref = reference_lstm_cell(*[t.double() if t is not None else None for t in args])
    for got, want in zip((hy, cy, ws), ref):
        assert got.dtype == dtype and got.shape == want.shape and got.is_contiguous()
        assert_close(got, want.to(dtype), dtype)
    grad_hy, grad_cy = torch.randn(B, H, generator=g).to(dtype), torch.randn(B, H, generator=g).to(dtype)
    for ghy, gcy in ((grad_hy, grad_cy), (grad_hy, None), (None, grad_cy)):
        grad_gates, grad_cx, grad_bias = torch.ops.aten._thnn_fused_lstm_cell_backward_impl(
            *[t.to("neuron") if t is not None else None for t in (ghy, gcy, args[2], cy.cpu(), ws.cpu())], bias)
        gates = (args[0].double() + args[1].double()).requires_grad_()
        cxd = args[2].double().requires_grad_()
        r_hy, r_cy, _ = reference_lstm_cell(gates, torch.zeros_like(gates),
                                            cxd, *((b1.to(dtype).double(), b2.to(dtype).double()) if bias else (None, None)))
        loss = sum((o * gr.double()).sum() for o, gr in ((r_hy, ghy), (r_cy, gcy)) if gr is not None)
        want_gates, want_cx = torch.autograd.grad(loss, [gates, cxd])
        assert_close(grad_gates, want_gates.to(dtype), dtype, "grad_gates")
        assert_close(grad_cx, want_cx.to(dtype), dtype, "grad_cx")
        if bias:
            assert_close(grad_bias, want_gates.to(dtype).sum(0), dtype, "grad_bias")
        else:
            assert grad_bias is None
    assert torch.ops.aten._thnn_fused_lstm_cell_backward_impl(None, None, args[2].to("neuron"), cy, ws, bias) == \
        (None, None, None)


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "bfloat16"])
@pytest.mark.parametrize("bias", [True, False])
def test_fused_gru_cell_op_follows_cudas_contract(dtype, bias):
    """hy and the workspace [r, z, n, hx, hidden_n + b_hh_n] as CUDA's kernel gives them; the
    backward's five gradients against autograd of the reference."""
    g = torch.Generator().manual_seed(5)
    B, H = 3, 5
    ig, hg = torch.randn(B, 3 * H, generator=g), torch.randn(B, 3 * H, generator=g)
    hx = torch.randn(B, H, generator=g)
    b1, b2 = (torch.randn(3 * H, generator=g), torch.randn(3 * H, generator=g)) if bias else (None, None)
    args = [t.to(dtype) if t is not None else None for t in (ig, hg, hx, b1, b2)]
    hy, ws = torch.ops.aten._thnn_fused_gru_cell(*[t.to("neuron") if t is not None else None for t in args])
    ref = reference_gru_cell(*[t.double() if t is not None else None for t in args])
    for got, want in zip((hy, ws), ref):
        assert got.dtype == dtype and got.shape == want.shape and got.is_contiguous()
        assert_close(got, want.to(dtype), dtype)
    grad_hy = torch.randn(B, H, generator=g).to(dtype)
    grads = torch.ops.aten._thnn_fused_gru_cell_backward(grad_hy.to("neuron"), ws, bias)
    leaves = [t.double().requires_grad_() for t in args[:3]]
    biases = [t.double().requires_grad_() for t in args[3:]] if bias else [None, None]
    (r_hy, _) = reference_gru_cell(*leaves, *biases)
    want = torch.autograd.grad((r_hy * grad_hy.double()).sum(), leaves + ([*biases] if bias else []))
    for i, (got, w) in enumerate(zip(grads, want)):
        assert_close(got, w.to(dtype), dtype, f"gradient {i}")
    if not bias:
        assert grads[3] is None and grads[4] is None


def test_fused_cells_check_their_arguments():
    d = "neuron"
    with pytest.raises(RuntimeError, match="hidden_gates"):
        torch.ops.aten._thnn_fused_lstm_cell(torch.randn(2, 8, device=d), torch.randn(2, 4, device=d),
                                             torch.randn(2, 2, device=d))
    with pytest.raises(RuntimeError, match="previous state"):
        torch.ops.aten._thnn_fused_gru_cell(torch.randn(2, 6, device=d), torch.randn(2, 6, device=d),
                                            torch.randn(2, 3, device=d))
    with pytest.raises(RuntimeError, match="workspace"):
        torch.ops.aten._thnn_fused_gru_cell_backward(torch.randn(2, 2, device=d), torch.randn(2, 9, device=d), True)
    with pytest.raises(RuntimeError, match="same device|neuron"):
        torch.ops.aten._thnn_fused_lstm_cell(torch.randn(2, 8, device=d), torch.randn(2, 8), torch.randn(2, 2))
    # The LSTM backward's workspace: CUDA checks its dimensions and element count only and reads
    # it as [B, 4H]; so does the kernel (a [8, 2] workspace once crashed the process: review 11).
    grad, cx = torch.randn(2, 2, device=d), torch.randn(2, 2, device=d)
    _, cy, workspace = torch.ops.aten._thnn_fused_lstm_cell(torch.randn(2, 8, device=d), torch.randn(2, 8, device=d), cx)
    want = torch.ops.aten._thnn_fused_lstm_cell_backward_impl(grad, None, cx, cy, workspace, True)
    for shape in [(8, 2), (16, 1), (1, 16)]:
        got = torch.ops.aten._thnn_fused_lstm_cell_backward_impl(grad, None, cx, cy, workspace.reshape(shape), True)
        for g, w in zip(got, want):
            torch.testing.assert_close(g.cpu(), w.cpu(), atol=0, rtol=0)
    with pytest.raises(RuntimeError, match=r"2-D workspace of 16 elements .*\[2, 8\].*got \[2, 4\]"):
        torch.ops.aten._thnn_fused_lstm_cell_backward_impl(grad, None, cx, cy, workspace[:, :4], True)
    with pytest.raises(RuntimeError, match="2-D workspace"):
        torch.ops.aten._thnn_fused_lstm_cell_backward_impl(grad, None, cx, cy, workspace.reshape(2, 2, 4), True)
    zero = torch.randn(0, 2, device=d)
    assert torch.ops.aten._thnn_fused_lstm_cell_backward_impl(zero, None, zero, zero, torch.randn(0, 1, device=d),
                                                             True)[0].shape == (0, 8)
    # module-level errors are PyTorch's own, raised before any cell runs
    with pytest.raises(RuntimeError, match="input.size\\(-1\\) must be equal to input_size"):
        nn.LSTM(INPUT, HIDDEN).to(d)(torch.randn(SEQ, BATCH, INPUT + 1, device=d))


def test_fused_cells_return_contiguous_outputs_for_any_layout():
    """CUDA allocates every output of the fused cells contiguous (RNN.cu); the kernels must not
    pass on the layout of transposed operands (review 11, finding 9)."""
    d, ops = "neuron", torch.ops.aten
    B, H = 3, 5
    ig, hg = torch.randn(4 * H, B, device=d).t(), torch.randn(4 * H, B, device=d).t()
    state = torch.randn(H, B, device=d).t()
    b1, b2 = torch.randn(4 * H, device=d), torch.randn(4 * H, device=d)
    for bias in ((), (b1, b2)):
        hy, cy, ws = ops._thnn_fused_lstm_cell(ig, hg, state, *bias)
        want = ops._thnn_fused_lstm_cell(ig.contiguous(), hg.contiguous(), state.contiguous(), *bias)
        lstm_back = ops._thnn_fused_lstm_cell_backward_impl(torch.randn(H, B, device=d).t(),
                                                             torch.randn(H, B, device=d).t(), state, cy, ws, bool(bias))
        gy, gws = ops._thnn_fused_gru_cell(ig[:, :3 * H], hg[:, :3 * H], state, *[b[:3 * H] for b in bias])
        gru_back = ops._thnn_fused_gru_cell_backward(torch.randn(H, B, device=d).t(), gws, bool(bias))
        results = {"lstm hy": hy, "lstm cy": cy, "lstm workspace": ws, "gru hy": gy, "gru workspace": gws}
        results.update({f"lstm backward {i}": t for i, t in enumerate(lstm_back) if t is not None})
        results.update({f"gru backward {i}": t for i, t in enumerate(gru_back) if t is not None})
        for name, t in results.items():
            assert t.is_contiguous(), f"{name}: strides {t.stride()}"
        for got, w in zip((hy, cy, ws), want):
            torch.testing.assert_close(got.cpu(), w.cpu(), atol=0, rtol=0)


def test_fused_cells_are_reported_as_torchneurons_fallbacks():
    """TorchNeuron 2.13 has no fused cells in its native set (it lists _thnn_fused_lstm_cell
    as not available): they are fallback ops; the matmuls around them run on the device."""
    torch_neuronx.clear_op_tracking()
    x = torch.randn(SEQ, BATCH, INPUT, device="neuron", requires_grad=True)
    nn.LSTM(INPUT, HIDDEN).to("neuron")(x)[0].sum().backward()
    nn.GRU(INPUT, HIDDEN).to("neuron")(x)[0].sum().backward()
    fallback, executed = set(torch_neuronx.get_fallback_ops()), set(torch_neuronx.get_executed_ops())
    fused = {"aten::_thnn_fused_lstm_cell", "aten::_thnn_fused_lstm_cell_backward_impl",
             "aten::_thnn_fused_gru_cell", "aten::_thnn_fused_gru_cell_backward"}
    assert fused <= fallback
    assert not fused & executed
    assert "aten::mm" in executed
    counts = torch_neuronx.get_op_counts()
    for name in fused:  # computed by kernels of ours, one per step
        assert counts[name]["kernel"] == "hot" and counts[name]["torchneuron"] == "cpu", name
    assert counts["aten::_thnn_fused_lstm_cell"]["count"] == SEQ
    # the cell's inner arithmetic is not reported as separate ops
    assert not {"aten::sigmoid", "aten::tanh"} & {n.split(".")[0] for n in fallback | executed}
    torch_neuronx.clear_op_tracking()


def test_recurrent_layers_in_asynchronous_mode():
    """NEURON_LAUNCH_BLOCKING=0: the cells are queued like other kernels; results equal CPU's."""
    code = textwrap.dedent("""
        import torch, torch.nn as nn, torch_neuronx
        from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
        torch.manual_seed(0)
        for kind in ("LSTM", "GRU"):
            cpu = getattr(nn, kind)(5, 7, num_layers=2, bidirectional=True)
            dev = getattr(nn, kind)(5, 7, num_layers=2, bidirectional=True)
            dev.load_state_dict(cpu.state_dict()); dev.to("neuron")
            x = torch.randn(6, 4, 5)
            res = {}
            for d, m in (("cpu", cpu), ("neuron", dev)):
                xi = x.to(d).requires_grad_()
                out, _ = pad_packed_sequence(m(pack_padded_sequence(xi, [6, 5, 3, 2]))[0])
                g = torch.autograd.grad(out.pow(2).sum(), [xi] + list(m.parameters()))
                res[d] = [out, *g]
            for a, b in zip(res["neuron"], res["cpu"]):
                torch.testing.assert_close(a.cpu(), b, atol=1e-5, rtol=1.3e-6)
        print("OK")
    """)
    result = run_python(code, env={"NEURON_LAUNCH_BLOCKING": "0"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "OK" in result.stdout


# ---- PyTorch's own module samples (common_modules.module_db) -----------------------------------

MODULE_DB_NAMES = ["LSTM", "GRU", "RNN", "LSTMCell", "GRUCell", "RNNCell"]


@pytest.mark.parametrize("name", MODULE_DB_NAMES)
def test_module_db_samples_match_cpu(name):
    """Every sample of the module's ModuleInfo (the inputs PyTorch's TestModule uses), in
    float32, training mode: outputs, and gradients of the inputs and parameters."""
    from torch.testing._internal.common_modules import module_db
    from torch.utils._pytree import tree_flatten, tree_map

    (info,) = [m for m in module_db if m.module_cls.__name__ == name]
    samples = info.module_inputs_func(info, device="cpu", dtype=torch.float32, requires_grad=True, training=True)
    assert samples
    for index, sample in enumerate(samples):
        torch.manual_seed(index)
        c_args, c_kwargs = sample.constructor_input.args, sample.constructor_input.kwargs
        cpu = info.module_cls(*c_args, **c_kwargs)
        dev = copy.deepcopy(cpu).to("neuron")
        args, kwargs = sample.forward_input.args, sample.forward_input.kwargs

        def run(module, device, dtype):
            moved = tree_map(lambda t: leaf(t, device, dtype) if isinstance(t, torch.Tensor) else t, (args, kwargs))
            out = module(*moved[0], **moved[1])
            outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
            leaves = [t for t in tree_flatten(moved)[0] if isinstance(t, torch.Tensor) and t.requires_grad]
            leaves += list(module.parameters())
            loss = sum((o * (i + 1)).sum() for i, o in enumerate(outputs))
            return outputs, torch.autograd.grad(loss, leaves, allow_unused=True)

        want_out, want_grads = run(cpu, "cpu", torch.float32)
        got_out, got_grads = run(dev, "neuron", torch.float32)
        what = f"sample {index} {c_args} {c_kwargs}"
        assert len(got_out) == len(want_out), what
        for got, want in zip(got_out, want_out):
            assert_close(got, want, torch.float32, what)
        for got, want in zip(got_grads, want_grads):
            assert (got is None) == (want is None), what
            if want is not None:
                assert_close(got, want, torch.float32, what + " gradient")


# ---- torch.compile(backend="neuron") ---------------------------------------------------------------

def compiled_layer_run(kind, layers, bidirectional, initial, dtype):
    """(run(module, device, dtype), (CPU module, neuron module), compiled neuron module) for a
    compiled layer: Dynamo traces RNNs (allow_rnn; by default it runs them eagerly)."""
    cpu, dev = make_pair(lambda: getattr(nn, kind)(INPUT, HIDDEN, num_layers=layers, bidirectional=bidirectional),
                         dtype)
    g = torch.Generator().manual_seed(6)
    states = layers * (2 if bidirectional else 1)
    x = torch.randn(SEQ, BATCH, INPUT, generator=g)
    h0 = torch.randn(states, BATCH, HIDDEN, generator=g)
    state = (h0, torch.randn(states, BATCH, HIDDEN, generator=g)) if kind == "LSTM" else h0
    compiled = torch.compile(dev, backend="neuron", fullgraph=True)

    def run(module, device, run_dtype, use_compiled=True):
        xi = leaf(x, device, run_dtype).requires_grad_()
        s = tuple(leaf(t, device, run_dtype) for t in state) if kind == "LSTM" else leaf(state, device, run_dtype)
        out, _ = (compiled if device == "neuron" and use_compiled else module)(xi, *([s] if initial else []))
        return [out], torch.autograd.grad(out.float().pow(2).sum(), [xi] + list(module.parameters()))

    return run, (cpu, dev)


LAYER_SHAPES = [(1, False), (1, True), (2, False), (2, True)]


@pytest.mark.parametrize("layers,bidirectional", LAYER_SHAPES,
                         ids=[f"{n}layer-{'bi' if b else 'uni'}" for n, b in LAYER_SHAPES])
@pytest.mark.parametrize("initial", [True, False], ids=["h0", "noh0"])
@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_compiled_recurrent_layer_matches_cpu(kind, initial, layers, bidirectional, fresh_dynamo):
    """With Dynamo tracing RNNs the graph holds the fused cells, which the compiler decomposes
    into the ops their kernels compute (compile/decompositions.py): forward and backward equal
    CPU's. Without an initial state the zero state is a folded constant that a one-layer
    LSTM's forward saves for its backward (review 11, finding 2): it must reach the backward
    graph on the device."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    counters.clear()
    with torch._dynamo.config.patch(allow_rnn=True):
        run, modules = compiled_layer_run(kind, layers, bidirectional, initial, torch.float32)
        compare(run, modules, torch.float32)
    assert counters["neuron"]["compiled_graphs"] >= 1


@pytest.mark.parametrize("layers,bidirectional", [(1, False), (2, True)], ids=["1layer-uni", "2layer-bi"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_compiled_half_layer_matches_eager(kind, dtype, layers, bidirectional, fresh_dynamo):
    """bfloat16 and float16 compiled layers (no initial state) against the eager neuron layer:
    outputs and gradients equal within a few units of the dtype's last place (the compiled
    program fuses pointwise ops, which round less often than the eager ops)."""
    import torch._dynamo

    with torch._dynamo.config.patch(allow_rnn=True):
        run, (_, dev) = compiled_layer_run(kind, layers, bidirectional, False, dtype)
        got_out, got_grads = run(dev, "neuron", dtype)
        want_out, want_grads = run(dev, "neuron", dtype, use_compiled=False)
    eps = torch.finfo(dtype).eps
    for i, (got, want) in enumerate(zip(got_out + list(got_grads), want_out + list(want_grads))):
        assert got.device.type == "neuron" and got.dtype == want.dtype == dtype, i
        scale = want.float().abs().max().clamp_min(1).item()
        torch.testing.assert_close(got.float().cpu(), want.float().cpu(), atol=4 * eps * scale, rtol=4 * eps,
                                   msg=lambda m: f"result {i}: {m}")


def test_compiled_cells_match_the_kernels(fresh_dynamo):
    """The decompositions compute what the eager kernels compute, forward and backward, float32
    and bfloat16; the compiled program runs none of the eager kernels."""
    g = torch.Generator().manual_seed(7)

    def cells(ig, hg, gru_ig, gru_hg, state, b, b2):
        hy, cy, _ = torch.ops.aten._thnn_fused_lstm_cell(ig, hg, state, b, b2)
        gy, _ = torch.ops.aten._thnn_fused_gru_cell(gru_ig, gru_hg, state, b[:15], b2[:15])
        return hy, cy, gy

    compiled = torch.compile(cells, backend="neuron", fullgraph=True)
    for dtype in DTYPES:
        ig, hg = torch.randn(3, 20, generator=g).to(dtype), torch.randn(3, 20, generator=g).to(dtype)
        state = torch.randn(3, 5, generator=g).to(dtype)
        gru_ig, gru_hg = ig[:, :15].contiguous(), hg[:, :15].contiguous()
        b, b2 = torch.randn(20, generator=g).to(dtype), torch.randn(20, generator=g).to(dtype)
        results = {}
        for mode, fn in (("eager", cells), ("compiled", compiled)):
            args = [t.to("neuron").requires_grad_() for t in (ig, hg, gru_ig, gru_hg, state, b, b2)]
            if mode == "compiled":  # compile first: tracing may run the eager kernels on stand-ins
                fn(*[a.detach().clone().requires_grad_() for a in args])[0].float().sum().backward()
            torch_neuronx.clear_op_tracking()
            hy, cy, gy = fn(*args)
            (hy.float() * 2 + cy.float() + gy.float() * 3).sum().backward()
            ran = torch_neuronx.get_op_counts()
            results[mode] = [hy, cy, gy] + [a.grad for a in args]
        assert "aten::_thnn_fused_lstm_cell" not in ran and "aten::_thnn_fused_gru_cell_backward" not in ran
        for i, (got, want) in enumerate(zip(results["compiled"], results["eager"])):
            assert_close(got, want.cpu(), dtype, f"result {i}")
