"""Writes into memory that an operand also covers: overlapping copy_, in-place ops on
overlapping views, out= arguments that alias an input. Every case runs on the CPU and on
neuron: both raise the same error, or both leave the same values. The kernels with a path of
their own (the plain device copy, the hot ops' direct calls, the 64-bit narrowing, the queue)
are each reached by some case; test_aliasing_with_every_op_queued runs the file again with
every op queued."""
import pytest
import torch
import torch_neuronx  # noqa: F401

from conftest import QUEUED_RUN, every_op_queued

OVERLAP_ERROR = "unsupported operation: some elements of the input tensor and the written-to tensor refer to a single memory location"
DTYPES = [torch.float32, torch.int64, torch.float64]


def values(device, dtype, n=8, shape=None):
    x = torch.arange(1, n + 1, device=device).to(dtype)
    return x.view(shape) if shape else x


def sort_out(a, out):
    return torch.sort(a, out=(out, torch.empty(a.shape, dtype=torch.long, device=a.device)))


def where_out(a, b, out):
    return torch.where(a > 3, a, b, out=out)


def index_select_out(x):
    return torch.index_select(x, 0, torch.tensor([0, 1], device=x.device), out=x[1:3])


# name -> (make the operand from (device, dtype), the call on it); the result compared is the operand
CASES = {
    # copy_: the plain device copy, a converting copy, strided copies, host to device
    "copy_ partial overlap": (values, lambda x: x[1:].copy_(x[:-1])),
    "setitem partial overlap": (values, lambda x: x.__setitem__(slice(1, None), x[:-1])),
    "copy_ converting, partial overlap": (values, lambda x: x[1:].copy_(x[:-1].to(torch.float16))),
    "copy_ strided, partial overlap": (values, lambda x: x[2::2].copy_(x[:-2:2])),
    "copy_ interleaved columns": (values, lambda x: x.view(4, 2)[:, 0].copy_(x.view(4, 2)[:, 1])),
    "copy_ into an expanded view": (values, lambda x: x[:1].expand(4).copy_(x[4:])),
    "copy_ from the host into an expanded view": (values, lambda x: x[:1].expand(4).copy_(torch.arange(4.0))),
    "copy_ onto itself": (values, lambda x: x.copy_(x)),
    "copy_ onto an equal view": (values, lambda x: x[:4].copy_(x[:4])),
    "copy_ of its own transpose": (lambda d, t: values(d, t, 4, (2, 2)), lambda x: x.copy_(x.t())),
    "copy_ between disjoint halves": (values, lambda x: x[:4].copy_(x[4:])),
    # in-place ops on overlapping operands
    "add_ partial overlap": (values, lambda x: x[1:].add_(x[:-1])),
    "mul_ partial overlap": (values, lambda x: x[1:].mul_(x[:-1])),
    "sub_ of itself": (values, lambda x: x.sub_(x)),
    "add_ of itself": (values, lambda x: x.add_(x)),
    "addcmul_ partial overlap": (values, lambda x: x[1:].addcmul_(x[:-1], x[:-1])),
    "masked_fill_ with an overlapping mask": (values, lambda x: x[1:].masked_fill_(x[:-1] > 3, 0)),
    "index_put_ of its own values": (values, lambda x: x.index_put_((torch.tensor([1, 2], device=x.device),), x[1:3])),
    # out= aliasing an input: the same view, or shifted
    "add out=input": (values, lambda x: torch.add(x, x.flip(0), out=x)),
    "add out=shifted input": (values, lambda x: torch.add(x[:-1], x[1:], out=x[1:])),
    "sub out=shifted other": (values, lambda x: torch.sub(x[1:], x[1:], out=x[:-1])),
    "mul out=shifted input": (values, lambda x: torch.mul(x[:-1], x[1:], out=x[1:])),
    "div out=shifted input": (values, lambda x: torch.div(x[:-1], x[1:], out=x[1:])),
    "maximum out=shifted input": (values, lambda x: torch.maximum(x[:-1], x[1:], out=x[1:])),
    "where out=shifted input": (values, lambda x: where_out(x[:-1], x[1:], out=x[1:])),
    "neg out=shifted input": (values, lambda x: torch.neg(x[:-1], out=x[1:])),
    "sin out=shifted input": (values, lambda x: torch.sin(x[:-1], out=x[1:])),
    "cos out=input": (values, lambda x: torch.cos(x, out=x)),
    "rsqrt out=shifted input": (values, lambda x: torch.rsqrt(x[:-1], out=x[1:])),
    "silu out=shifted input": (values, lambda x: torch.ops.aten.silu.out(x[:-1], out=x[1:])),
    "abs out=shifted input": (values, lambda x: torch.abs(x[:-1], out=x[1:])),
    "pow out=shifted input": (values, lambda x: torch.pow(x[:-1], 2, out=x[1:])),
    "clamp out=shifted input": (values, lambda x: torch.clamp(x[:-1], 2, 5, out=x[1:])),
    "cumsum out=shifted input": (values, lambda x: torch.cumsum(x[:-1], 0, out=x[1:])),
    "softmax out=shifted input": (values, lambda x: torch.ops.aten._softmax.out(x[:-1], 0, False, out=x[1:])),
    "mean out=its first element": (values, lambda x: torch.mean(x, 0, keepdim=True, out=x[:1])),
    "sort out=shifted input": (values, lambda x: sort_out(x[:-1], out=x[1:])),
    "mm out=input": (lambda d, t: values(d, t, 16, (4, 4)), lambda x: torch.mm(x, x, out=x)),
    "mm out=overlapping block": (lambda d, t: values(d, t, 16, (4, 4)),
                                 lambda x: torch.mm(x[:2, :2], x[:2, :2], out=x[1:3, 1:3])),
    "bmm out=input": (lambda d, t: values(d, t, 16, (1, 4, 4)), lambda x: torch.bmm(x, x, out=x)),
    "addmm out=input": (lambda d, t: values(d, t, 16, (4, 4)), lambda x: torch.addmm(x, x, x, out=x)),
    "cat out=an input's neighbour": (values, lambda x: torch.cat([x[:2], x[2:4]], out=x[4:8])),
    "cat out=overlapping an input": (values, lambda x: torch.cat([x[:2], x[2:4]], out=x[2:6])),
    "index_select out=overlapping": (values, index_select_out),
}


# Kernels whose result on aliased memory depends on the width they compute in: on the CPU, mm,
# bmm and addmm with out= one of their inputs give other values in int32 than in int64 (the
# int64 path computes into a copy). The device computes int64 in 32 bits (Note [64-bit as
# 32-bit]), one narrowed copy per view, so it matches the CPU's int32 kernel there.
WIDTH_DEPENDENT = {"mm out=input", "bmm out=input", "addmm out=input"}


def outcome(device, dtype, make, call):
    """('raised', first line of the message) or ('values', the operand on the CPU)."""
    x = make(device, dtype)
    try:
        call(x)
    except RuntimeError as error:
        return "raised", str(error).splitlines()[0]
    return "values", x.cpu()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(CASES))
def test_aliased_writes_match_the_cpu(name, dtype):
    make, call = CASES[name]
    if name in WIDTH_DEPENDENT and dtype == torch.int64:
        kind, values = outcome("cpu", torch.int32, make, call)
        expected = (kind, values.to(torch.int64) if kind == "values" else values)
    else:
        expected = outcome("cpu", dtype, make, call)
    got = outcome("neuron", dtype, make, call)
    assert got[0] == expected[0], f"cpu {expected}, neuron {got}"
    if expected[0] == "raised":
        assert got[1] == expected[1]
    else:
        torch.testing.assert_close(got[1], expected[1], equal_nan=True)
    # an error is raised at the call: the stream has not failed
    torch.neuron.synchronize()


def test_overlapping_copy_raises_as_on_cpu():
    # issue 23 item 1: the plain device-to-device copy was a memmove
    x = torch.arange(8.0, device="neuron")
    with pytest.raises(RuntimeError, match=OVERLAP_ERROR):
        x[1:].copy_(x[:-1])
    with pytest.raises(RuntimeError, match=OVERLAP_ERROR):
        x[1:] = x[:-1]
    assert x.cpu().tolist() == list(range(8))


def test_64bit_operands_sharing_memory_keep_the_cpus_checks():
    # narrowed 32-bit copies share no memory: an overlapping int64 out= was computed silently
    x = torch.arange(8, device="neuron")
    with pytest.raises(RuntimeError, match=OVERLAP_ERROR):
        torch.add(x[:-1], x[1:], out=x[1:])
    assert x.cpu().tolist() == list(range(8))
    # operands in disjoint parts of one storage are still computed in 32 bits
    big = torch.tensor([2**31 - 1, 1, 0, 0], device="neuron")
    torch.add(big[:2], big[:2], out=big[2:])
    assert big.cpu().tolist() == [2**31 - 1, 1, -2, 2]


@pytest.mark.skipif(QUEUED_RUN, reason="this is the run with every op queued")
def test_aliasing_with_every_op_queued():
    every_op_queued(__file__)
