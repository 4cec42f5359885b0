"""Type promotion with complex operands, neuron against CPU: every pair of dtypes with a complex
operand (tensors of one or zero dimensions, Python complex numbers), through functional,
in-place and out= forms. The device computes float64 in 32 bits (Note [64-bit as 32-bit]),
but a result keeps the dtype the CPU gives: a float64 operand with a complex one makes
complex128. (complex32 is left out: most CPU kernels do not take it.)"""
import itertools

import pytest
import torch
import torch_neuronx  # noqa: F401

from conftest import QUEUED_RUN, every_op_queued

REAL = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
        torch.bfloat16, torch.float32, torch.float64]
COMPLEX = [torch.complex64, torch.complex128]
PAIRS = [(a, b) for a, b in itertools.product(REAL + COMPLEX, repeat=2) if a in COMPLEX or b in COMPLEX]
SHAPES = {"1-d with 1-d": ((3,), (3,)), "1-d with 0-d": ((3,), ()), "0-d with 1-d": ((), (3,))}
BINARY = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "div": torch.div,
    "pow": torch.pow,
    "eq": torch.eq,
}


def operand(dtype, shape, seed):
    values = torch.tensor([1.5, -2.0, 3.0], dtype=torch.float64)[: (shape[0] if shape else 1)] + seed
    if dtype.is_complex:
        values = values + 0.5j * (seed + 1)
    if dtype == torch.bool:
        values = values > 0
    return values.reshape(shape).to(dtype)


def outcome(fn, *tensors, device):
    try:
        result = fn(*[t.to(device) for t in tensors])
    except RuntimeError as error:
        return "raised", str(error).splitlines()[0]
    return "result", result


def assert_same(cpu, neuron):
    assert cpu[0] == neuron[0], f"cpu {cpu}, neuron {neuron}"
    if cpu[0] == "raised":
        assert neuron[1] == cpu[1]
        return
    expected, got = cpu[1], neuron[1]
    assert got.device.type == "neuron"
    assert got.dtype == expected.dtype
    assert got.shape == expected.shape
    # 64-bit values are computed in 32 bits on the device; low-precision ones keep theirs
    torch.testing.assert_close(got.cpu(), expected, rtol=2e-2, atol=1e-2, equal_nan=True)


@pytest.mark.parametrize("shapes", list(SHAPES), ids=str)
@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: f"{p[0]}-{p[1]}".replace("torch.", ""))
def test_complex_pairs_promote_as_on_cpu(pair, shapes):
    a = operand(pair[0], SHAPES[shapes][0], 0)
    b = operand(pair[1], SHAPES[shapes][1], 1)
    assert torch.result_type(a.to("neuron"), b.to("neuron")) == torch.result_type(a, b)
    for name, fn in BINARY.items():
        assert_same(outcome(fn, a, b, device="cpu"), outcome(fn, a, b, device="neuron"))
    # in place: allowed when the result type casts to the first operand's dtype, as on the CPU
    in_place = lambda x, y: x.mul_(y)  # noqa: E731
    assert_same(outcome(in_place, a.clone(), b, device="cpu"), outcome(in_place, a.clone(), b, device="neuron"))
    out_dtype = torch.result_type(a, b)
    with_out = lambda x, y: torch.add(x, y, out=torch.empty(0, dtype=out_dtype, device=x.device))  # noqa: E731
    assert_same(outcome(with_out, a, b, device="cpu"), outcome(with_out, a, b, device="neuron"))


@pytest.mark.parametrize("dtype", REAL + COMPLEX, ids=str)
def test_python_complex_numbers_promote_as_on_cpu(dtype):
    x = operand(dtype, (3,), 0)
    for fn in (lambda t: t * 1j, lambda t: 1j * t, lambda t: t + (2 + 1j), lambda t: t / (1 - 2j),
               lambda t: t.pow(2 + 1j), lambda t: torch.full_like(t, 2 + 1j) if t.is_complex() else t * (1 + 0j)):
        assert_same(outcome(fn, x, device="cpu"), outcome(fn, x, device="neuron"))


def test_float64_with_a_complex_operand_is_complex128():
    # issue 23 item 3: the 64-bit rule narrowed float64 before type promotion (complex64)
    x = torch.tensor([2.5], dtype=torch.float64, device="neuron")
    assert (x * 1j).dtype == torch.complex128
    assert (x * torch.tensor([1j], dtype=torch.complex64, device="neuron")).dtype == torch.complex128
    assert (x + torch.tensor(1j, dtype=torch.complex64, device="neuron")).dtype == torch.complex128
    assert x.pow(2 + 1j).dtype == torch.complex128
    # a 0-dim float64 operand does not promote a complex64 tensor, as on the CPU
    c = torch.tensor([1j], dtype=torch.complex64, device="neuron")
    assert (c * torch.tensor(2.0, dtype=torch.float64, device="neuron")).dtype == torch.complex64


@pytest.mark.skipif(QUEUED_RUN, reason="this is the run with every op queued")
def test_promotion_with_every_op_queued():
    # queued outputs are allocated from the meta kernel's dtypes, which see the 64-bit operands
    every_op_queued(__file__)


# Compiled graphs follow the same rule (compile/passes.py narrow_64bit): one graph of the binary
# ops per pair, compiled once per pair (1-d operands). Python complex numbers in a compiled graph
# are refused by the lowering with a clear error (a program holds no complex constant yet).
@pytest.mark.parametrize("pair", [p for p in PAIRS if torch.float64 in p or torch.complex128 in p],
                         ids=lambda p: f"{p[0]}-{p[1]}".replace("torch.", ""))
def test_complex_pairs_promote_as_on_cpu_when_compiled(pair, fresh_dynamo):
    a, b = operand(pair[0], (3,), 0), operand(pair[1], (3,), 1)

    def every_op(x, y):
        return x + y, x * y, x / y, x.pow(y)
    expected = every_op(a, b)
    got = torch.compile(every_op, backend="neuron")(a.to("neuron"), b.to("neuron"))
    for e, g in zip(expected, got):
        assert g.dtype == e.dtype, (pair, e.dtype, g.dtype)
        torch.testing.assert_close(g.cpu(), e, rtol=2e-2, atol=1e-2, equal_nan=True)
