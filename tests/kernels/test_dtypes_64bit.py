"""float64 / int64: stored as such, computed in 32 bits by default (as the real device),
with NEURON_SIM_NATIVE_64BIT=1 to compute in 64 bits."""
import re

import pytest
import torch
import torch_neuronx

from conftest import run_python


def test_64bit_tensors_keep_their_dtype_but_compute_in_32_bits():
    assert torch_neuronx._sim._C.computes_64bit_as_32bit()
    big = torch.tensor([2**31 - 1, 5, -7])
    result = big.to("neuron") + 1
    assert result.dtype == torch.int64
    assert result.cpu().tolist() == [-(2**31), 6, -6]  # wraps like int32 on the device
    x = torch.tensor([1.0, 1e-10], dtype=torch.float64)
    y = x.to("neuron") + 1
    assert y.dtype == torch.float64
    assert y.cpu().tolist() == [2.0, 1.0]  # float32 precision
    storage_round_trip = torch.tensor([2**40 + 1], dtype=torch.int64)
    assert storage_round_trip.to("neuron").cpu().item() == 2**40 + 1  # storage keeps 64 bits


def test_small_values_and_index_arguments_are_exact():
    a = torch.arange(10, device="neuron")
    assert a.dtype == torch.int64
    assert torch.cumsum(a, 0).cpu().tolist() == torch.cumsum(torch.arange(10), 0).tolist()
    values = torch.randn(6, 4, dtype=torch.float64)
    index = torch.tensor([5, 0, 3])
    got = torch.index_select(values.to("neuron"), 0, index.to("neuron"))
    torch.testing.assert_close(got.cpu(), torch.index_select(values, 0, index), rtol=1e-6, atol=1e-6)
    gathered = torch.gather(values.to("neuron"), 1, torch.zeros(6, 1, dtype=torch.long, device="neuron"))
    assert gathered.dtype == torch.float64 and gathered.shape == (6, 1)
    m = torch.tensor([[3, 9], [7, 1]]).to("neuron")
    assert m.max(dim=1).values.cpu().tolist() == [9, 7] and m.max(dim=1).indices.dtype == torch.int64


def test_native_64bit_setting_computes_in_64_bits():
    result = run_python(
        "import torch, torch_neuronx\n"
        "print(torch_neuronx._sim._C.computes_64bit_as_32bit(),"
        " (torch.tensor([2**31 - 1]).to('neuron') + 1).item(),"
        " (torch.tensor([1e-10], dtype=torch.float64).to('neuron') + 1).item() != 1.0)",
        env={"NEURON_SIM_NATIVE_64BIT": "1"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", str(2**31), "True"]


def test_float64_multi_output_ops_keep_their_outputs_apart():
    # review item 1: widened temporaries lent their freed address to the next output, so
    # float64 std_mean / var_mean returned the std as the mean, in one storage
    x = torch.randn(1000, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    n = x.to("neuron")
    for op in (torch.std_mean, torch.var_mean):
        spread, mean = op(n)
        expected_spread, expected_mean = op(x)
        assert spread.untyped_storage().data_ptr() != mean.untyped_storage().data_ptr()
        torch.testing.assert_close(mean.cpu(), expected_mean, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(spread.cpu(), expected_spread, rtol=1e-5, atol=1e-5)
    var, mean = torch.var_mean(n.reshape(10, 100), dim=1)
    torch.testing.assert_close(mean.cpu(), x.reshape(10, 100).mean(1), rtol=1e-5, atol=1e-5)


def test_ops_torchneuron_runs_on_the_cpu_compute_in_64_bits():
    # TorchNeuron runs ops outside its native set on the CPU, whose kernels compute 64-bit
    # values exactly (Note [64-bit as 32-bit]); argmax is one of them
    big = torch.tensor([2**40, 2**40 + 1, 3], dtype=torch.int64)
    assert torch.argmax(big.to("neuron")).item() == 1
    assert (big.to("neuron") + 1).cpu().tolist() != (big + 1).tolist()  # add is native: 32-bit


def test_the_rule_is_one_module_shared_with_the_compiler():
    rule = torch_neuronx._sim._C.narrowing_rule
    assert rule("aten::add.Tensor") == {"exact": False, "value_arguments": ["self", "other", "alpha"],
                                       "dtype_argument": None}
    assert rule("aten::index_select")["exact"] and rule("aten::cat")["exact"]
    assert rule("aten::gather")["exact"]
    assert rule("aten::sum.dim_IntList")["dtype_argument"] == "dtype"
    assert "index" not in rule("aten::index_add")["value_arguments"]


def test_convolution_and_attention_follow_the_64bit_rule():
    # review 7, item 10: the accelerator kernels computed float64 in 64 bits
    import torch.nn.functional as F
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(1, 2, 6, 6, dtype=torch.float64, generator=g), torch.randn(3, 2, 3, 3, dtype=torch.float64, generator=g)
    got = F.conv2d(x.to("neuron"), w.to("neuron")).cpu()
    assert got.dtype == torch.float64
    assert torch.equal(got, F.conv2d(x.float(), w.float()).double())
    q, k, v = (torch.randn(1, 2, 4, 8, dtype=torch.float64, generator=g) for _ in range(3))
    got = F.scaled_dot_product_attention(q.to("neuron"), k.to("neuron"), v.to("neuron")).cpu()
    want = F.scaled_dot_product_attention(q.float(), k.float(), v.float()).double()
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    assert not torch.equal(got, F.scaled_dot_product_attention(q, k, v))


MIXED_WIDTHS = {  # name: (function, operands): a 64-bit operand with a 32-bit one of its kind
    "add float32 float64": (torch.add, (torch.randn(4, 7), torch.randn(4, 7, dtype=torch.float64))),
    "add float32 0-dim float64": (torch.add, (torch.randn(4, 7), torch.tensor(2.5, dtype=torch.float64))),
    "add int32 0-dim int64": (torch.add, (torch.arange(4, dtype=torch.int32), torch.tensor(3))),
    "mm": (torch.mm, (torch.randn(4, 7, dtype=torch.float64), torch.randn(7, 3))),
    "bmm": (torch.bmm, (torch.randn(1, 4, 7, dtype=torch.float64), torch.randn(1, 7, 3))),
    "linear": (torch.nn.functional.linear, (torch.randn(4, 7, dtype=torch.float64), torch.randn(3, 7))),
    "conv1d": (torch.nn.functional.conv1d, (torch.randn(1, 2, 8, dtype=torch.float64), torch.randn(3, 2, 3))),
}


@pytest.mark.parametrize("name", list(MIXED_WIDTHS))
def test_mixed_widths_keep_the_cpus_contract(name):
    """A call mixing float64 with float32 (int64 with int32) runs in 64 bits: narrowing would
    hide the CPU kernel's dtype checks (mm of float64 and float32 raises) and its type promotion
    (float32 with a 0-dim float64 gives float32) (review 11, finding 10)."""
    fn, operands = MIXED_WIDTHS[name]
    try:
        want = fn(*operands)
    except RuntimeError as error:
        with pytest.raises(RuntimeError, match=re.escape(str(error).splitlines()[0])):
            fn(*[t.to("neuron") for t in operands])
        return
    got = fn(*[t.to("neuron") for t in operands])
    assert got.dtype == want.dtype
    torch.testing.assert_close(got.cpu(), want, atol=0, rtol=0)


def test_a_recurrent_layer_given_a_float64_state_fails_at_its_matmul():
    # as on the CPU: the float64 h0 meets the float32 weight in the hidden projection
    gru = torch.nn.GRU(5, 7).to("neuron")
    with pytest.raises(RuntimeError, match="same dtype"):
        gru(torch.randn(3, 2, 5, device="neuron"), torch.zeros(1, 2, 7, dtype=torch.float64, device="neuron"))


def test_compiled_mixed_widths_equal_eager(tmp_path, monkeypatch):
    """The compiler's 64-bit pass follows the same rule: a node mixing widths keeps 64 bits."""
    import torch._dynamo
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "neff_cache"))
    torch._dynamo.reset()

    def f(a, b, c):
        return a * b + 1e-9, (b * 3).exp() + c

    g = torch.Generator().manual_seed(0)
    args = [torch.randn(8, generator=g).to("neuron"), torch.randn(8, dtype=torch.float64, generator=g).to("neuron"),
            torch.randn(8, dtype=torch.float64, generator=g).to("neuron")]
    for got, want in zip(torch.compile(f, backend="neuron")(*args), f(*args)):
        assert got.dtype == want.dtype == torch.float64
        torch.testing.assert_close(got.cpu(), want.cpu(), atol=0, rtol=0)
    torch._dynamo.reset()


# Ops reducing or selecting int64 values, with whether TorchNeuron runs them on the device
# (its device set: computed as int32, values beyond 32 bits wrap) or on the CPU (exact).
REDUCTIONS = {
    "max()": (lambda x: x.max(), True),
    "max(dim)": (lambda x: x.max(0), True),
    "min(dim)": (lambda x: x.min(0), True),
    "amax": (lambda x: x.amax(), True),
    "amin": (lambda x: x.amin(0), True),
    "topk": (lambda x: x.topk(min(2, x.numel())), True),
    "sum": (lambda x: x.sum(), True),
    "cumsum": (lambda x: x.cumsum(0), True),
    "eq scalar": (lambda x: x == 7, True),
    "lt tensor": (lambda x: x < x.flip(0), True),
    "clamp": (lambda x: x.clamp(min=5), True),
    "abs": (lambda x: x.abs(), True),
    "sort": (lambda x: x.sort(), False),
    "argmax": (lambda x: x.argmax(), False),
    "argmin": (lambda x: x.argmin(), False),
    "unique": (lambda x: x.unique(), False),
    "kthvalue": (lambda x: x.kthvalue(1), False),
    "cummax": (lambda x: x.cummax(0), False),
    "median": (lambda x: x.median(), False),
    "maximum": (lambda x: torch.maximum(x, x.flip(0)), False),
}


def _values_of(result):
    return [t.cpu() for t in (result if isinstance(result, tuple) else (result,))]


@pytest.mark.parametrize("size", [3, 1], ids=["3 elements", "1 element"])
@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_device_ops_wrap_and_cpu_ops_stay_exact(name, size):
    """Issue 23 item 7: whether an op wraps is decided by the op (TorchNeuron's device set),
    never by the tensor's size or by memory it reuses (int64 max() and topk wrapped while
    max(dim) stayed exact: a one-element int64 out= buffer holding a freed big value counted
    as a scalar beyond 32 bits, and max.dim's indices out= was narrowed and refused)."""
    fn, on_device = REDUCTIONS[name]
    x = torch.tensor([2**40 + 7, 3, -(2**35) - 1][:size])
    expected = fn(x.to(torch.int32).to(torch.int64)) if on_device else fn(x)
    for _ in range(3):  # later calls reuse memory the earlier results held
        got = fn(x.to("neuron"))
        for g, e in zip(_values_of(got), _values_of(expected)):
            assert g.dtype == e.dtype
            assert torch.equal(g, e), f"{name}: {g} vs {e}"


def test_width64_counts_say_how_each_call_was_computed():
    from torch_neuron_sim import _C
    x = torch.tensor([2**40 + 7, 3], device="neuron")
    _C.clear_width64_counts()
    x.max()
    x.sort()
    x + 2**40
    torch.cat([x, x])  # a hot kernel of data movement: nothing to count
    counts = _C.width64_counts()
    assert counts["aten::max"] == {"32-bit": 1}
    assert counts["aten::sort.values_stable"] == {"on the CPU in TorchNeuron": 1}
    assert counts["aten::add.Tensor"] == {"scalar beyond 32 bits": 1}
    # cat moves 64-bit values whole: the direct path counts nothing, the generic path (queued
    # calls) counts it as data movement; never a narrowing
    assert all(set(v) == {"data movement"} for op, v in counts.items() if "cat" in op), counts


def test_in_place_and_out_forms_wrap_as_the_functional_form():
    # a written argument that is the same view as an input (x.add_(x), out=x) shares one
    # narrowed copy with it; only operands overlapping in part run in 64 bits (test_aliasing.py)
    big = [2**31 - 1, 5]
    x = torch.tensor(big, device="neuron")
    want = (x + x).cpu()
    assert want.tolist() == [-2, 10]
    y = x.clone()
    y.add_(y)
    assert y.cpu().tolist() == want.tolist()
    z = x.clone()
    torch.add(z, z, out=z)
    assert z.cpu().tolist() == want.tolist()
    w = x.clone()
    w.add_(1)
    assert w.cpu().tolist() == [-(2**31), 6]


def test_int64_convolution_the_cpu_computes_only_in_64_bits():
    # the CPU's dilated and transposed convolutions have no int32 kernel: the narrowed form is
    # refused and the call runs in 64 bits (counted as such), as on the generic path
    import torch.nn.functional as F
    from torch_neuron_sim import _C
    x = torch.arange(2 * 2 * 7).reshape(2, 2, 7) % 5
    w = torch.arange(3 * 2 * 3).reshape(3, 2, 3) % 4
    _C.clear_width64_counts()
    got = F.conv1d(x.to("neuron"), w.to("neuron"), dilation=2)
    assert torch.equal(got.cpu(), F.conv1d(x, w, dilation=2))
    assert _C.width64_counts()["aten::convolution"] == {"32-bit form refused": 1}


# Review 17, finding 1: operands that cover the same bytes with the same strides but are different
# views ((n, 1) and its (1, n) transpose, (n, 1) and a (1, n) view) got one narrowed copy, so the
# kernel computed col OP col: wrong shapes and values, silently. Each view gets its own copy.
SAME_BYTES_OTHER_VIEW = {
    "causal mask pos >= pos.T": lambda p: p >= p.T,
    "relative positions pos.T - pos": lambda p: p.T - p,
    "col - col.T (float64)": lambda p: (lambda d: d - d.T)(p.double()),
    "lerp(col, col.T, .5) (float64)": lambda p: (lambda d: torch.lerp(d, d.T, 0.5))(p.double()),
    "clamp(col, min=col.T)": lambda p: torch.clamp(p, min=p.T),
    "col * col.view(1, -1)": lambda p: p * p.view(1, -1),
    "where(col > 2, col, col.T) (float64)": lambda p: (lambda d: torch.where(d > 2, d, d.T))(p.double()),
    "col + col (the same view: one copy)": lambda p: p + p,
}


@pytest.mark.parametrize("case", list(SAME_BYTES_OTHER_VIEW), ids=str)
def test_views_over_the_same_bytes_get_their_own_narrowed_copies(case):
    f = SAME_BYTES_OTHER_VIEW[case]
    expected = f(torch.arange(5).unsqueeze(1))
    got = f(torch.arange(5, device="neuron").unsqueeze(1))
    assert got.shape == expected.shape and got.dtype == expected.dtype
    assert torch.equal(got.cpu(), expected)
