"""torch.use_deterministic_algorithms(True): memory without values is filled as the CPU and
CUDA fill it (torch.utils.deterministic.fill_uninitialized_memory: NaN for floating and
complex dtypes, the largest value for integers and bool), through every way to get such
memory. Neuron against CPU, after the device's memory held other values."""
import pytest
import torch
import torch_neuronx  # noqa: F401

from conftest import QUEUED_RUN, every_op_queued

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64, torch.uint8,
          torch.int8, torch.int16, torch.int32, torch.int64, torch.bool]


def grown(device, dtype):
    x = torch.zeros(2, dtype=dtype, device=device)
    x.resize_(6)
    return x


def grown_as(device, dtype):
    return torch.zeros(1, dtype=dtype, device=device).resize_as_(torch.empty(2, 3))


def grown_storage_offset(device, dtype):
    base = torch.zeros(4, dtype=dtype, device=device)
    return base[2:].resize_(5)


# name -> a call making a tensor whose memory (or part of it) has no values yet
ENTRY_POINTS = {
    "empty": lambda d, t: torch.empty(5, dtype=t, device=d),
    "empty channels_last": lambda d, t: torch.empty(1, 2, 2, 2, dtype=t, device=d,
                                                    memory_format=torch.channels_last),
    "empty_like": lambda d, t: torch.empty_like(torch.zeros(2, 3, dtype=t, device=d)),
    "empty_strided": lambda d, t: torch.empty_strided((2, 3), (1, 2), dtype=t, device=d),
    "empty_permuted": lambda d, t: torch.empty_permuted((2, 3), (1, 0), dtype=t, device=d),
    "new_empty": lambda d, t: torch.zeros(1, dtype=t, device=d).new_empty((4,)),
    "new_empty_strided": lambda d, t: torch.zeros(1, dtype=t, device=d).new_empty_strided((2, 2), (2, 1)),
    "resize_ (grown part)": grown,
    "resize_as_ (grown part)": grown_as,
    "resize_ of a view (grown part)": grown_storage_offset,
}


@pytest.fixture
def deterministic():
    before = torch.are_deterministic_algorithms_enabled()
    fill_before = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    yield
    torch.use_deterministic_algorithms(before)
    torch.utils.deterministic.fill_uninitialized_memory = fill_before


def dirty_the_device():
    """Frees tensors of non-fill values, so new allocations reuse their memory."""
    for size in (4, 64, 1024):
        torch.full((size,), 7, dtype=torch.uint8, device="neuron").add_(1)
    torch.neuron.synchronize()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_uninitialized_memory_is_filled_as_on_cpu(entry, dtype, deterministic):
    make = ENTRY_POINTS[entry]
    expected = make("cpu", dtype)
    dirty_the_device()
    got = make("neuron", dtype)
    assert got.device.type == "neuron" and got.shape == expected.shape and got.stride() == expected.stride()
    torch.testing.assert_close(got.cpu(), expected, equal_nan=True, rtol=0, atol=0)


def test_deterministic_empty_is_not_stale():
    # issue 23 item 4: empty kept the bytes of freed tensors
    torch.ones(3, device="neuron")
    torch.use_deterministic_algorithms(True)
    try:
        assert torch.empty(3, device="neuron").isnan().all().item()
        assert torch.empty(3, dtype=torch.int64, device="neuron").cpu().tolist() == [2**63 - 1] * 3
    finally:
        torch.use_deterministic_algorithms(False)


def test_no_fill_when_switched_off():
    # fill_uninitialized_memory=False keeps empty() free of work, as on the CPU (the values are
    # whatever the memory held; only that nothing fails is checked)
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = False
    try:
        assert torch.empty(3, device="neuron").shape == (3,)
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = True
        torch.use_deterministic_algorithms(False)


@pytest.mark.skipif(QUEUED_RUN, reason="this is the run with every op queued")
def test_filling_with_every_op_queued():
    every_op_queued(__file__)
