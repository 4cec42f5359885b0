"""The torch.neuron module: the device API, shaped like torch.cuda and like AWS's torch.neuron.

Beyond AWS's module it keeps get_rng_state_all / set_rng_state_all and mem_get_info, which
Accelerate and DTensor call."""

import torch

from .. import _C
from .. import dynamo_metrics as _dynamo_metrics
from . import memory
from ._device import _index
from .memory import (empty_cache, max_memory_allocated, max_memory_reserved, mem_get_info,  # noqa: F401
                     memory_allocated, memory_reserved, memory_stats, memory_summary,
                     reset_accumulated_memory_stats, reset_max_memory_allocated,
                     reset_peak_memory_stats)

__all__ = [
    "is_available", "device_count", "current_device", "set_device", "device", "get_device_name",
    "get_device_properties", "synchronize", "Stream", "Event", "current_stream", "default_stream",
    "set_stream", "stream", "StreamContext", "manual_seed", "manual_seed_all", "seed", "seed_all",
    "initial_seed", "get_rng_state", "set_rng_state", "get_rng_state_all", "set_rng_state_all",
    "get_amp_supported_dtype", "is_bf16_supported", "is_initialized", "init",
    "get_dynamo_metrics", "reset_dynamo_metrics", "memory", *memory.__all__,
]

get_dynamo_metrics = _dynamo_metrics.get_dynamo_metrics
reset_dynamo_metrics = _dynamo_metrics.reset_dynamo_metrics


def is_available():
    return _C.device_count() > 0


def device_count():
    return _C.device_count()


def is_initialized():
    return _C._is_initialized() and not _C._is_in_bad_fork()


def init():
    _C._init()


def current_device():
    return _C.current_device()


def set_device(device):
    index = _index(device)
    if index >= 0:
        _C.set_device(index)


class device:
    """Context manager that selects a neuron device."""

    def __init__(self, device):
        self.index = _index(device) if device is not None else -1
        self.previous = -1

    def __enter__(self):
        self.previous = _C.exchange_device(self.index)

    def __exit__(self, *exc):
        if self.index >= 0:
            _C.set_device(self.previous)
        return False


class _DeviceProperties:
    def __init__(self, values):
        self.__dict__.update(values)

    def __repr__(self):
        return (f"_NeuronDeviceProperties(name='{self.name}', total_memory={self.total_memory // 2**20}MB, "
                f"logical_nc_config={self.logical_nc_config}, is_simulated={self.is_simulated})")


def get_device_properties(device=None):
    """`.name` is the instance type as AWS's package reports it ("trn1", "trn2", "trn3"; what
    torchtitan's get_peak_flops matches), `.total_memory` the core's HBM; ours beyond AWS's:
    `.is_simulated` (True), `.platform`, `.logical_nc_config`, `.chip`, `.global_core_index`."""
    return _DeviceProperties(_C.device_properties(_index(device)))


def get_device_name(device=None):
    """"neuron:N", as AWS's package returns it (torchtitan looks for "neuron" in it, then reads
    get_device_properties().name for the chip)."""
    index = _index(device)
    _C.device_properties(index)  # raises for an index that is not a visible core
    return f"neuron:{index}"


def synchronize(device=None):
    _C.synchronize(-1 if device is None else _index(device))


# ---- streams and events ---------------------------------------------------------------------

class Stream(torch.Stream):
    """A neuron stream (torch.Stream on the neuron device): wait_event, wait_stream,
    record_event, query, synchronize."""

    def __new__(cls, device=None, priority=0, **kwargs):
        with globals()["device"](device):
            return super().__new__(cls, device=torch.device("neuron", _C.current_device()),
                                   priority=priority, **kwargs)


class Event:
    """A neuron event: makes a torch.Event on the neuron device (torch.Event methods
    accept only exact torch.Event objects, so no subclass is made)."""

    def __new__(cls, enable_timing=False, blocking=False, interprocess=False):
        return torch.Event(device="neuron", enable_timing=enable_timing, blocking=blocking,
                           interprocess=interprocess)


def current_stream(device=None):
    return torch.accelerator.current_stream(torch.device("neuron", _index(device)))


def default_stream(device=None):
    index = _index(device)
    neuron_type = current_stream(index).device_type
    return torch.Stream(stream_id=0, device_index=index, device_type=neuron_type)


def set_stream(stream):
    if stream is not None:
        torch.accelerator.set_stream(stream)


class StreamContext:
    """Context manager that makes `stream` current on its device (None: no change)."""

    def __init__(self, stream):
        self.stream = stream
        self.previous = None

    def __enter__(self):
        if self.stream is not None:
            self.previous = torch.accelerator.current_stream(self.stream.device)
            torch.accelerator.set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc):
        if self.previous is not None:
            torch.accelerator.set_stream(self.previous)
        return False


def stream(stream):
    """Context manager that makes `stream` current (as torch.cuda.stream)."""
    return StreamContext(stream)


def _sleep(cycles):
    """Keeps the current stream busy for about `cycles` nanoseconds (torch.cuda._sleep's
    use in tests: work that is still pending when the host looks)."""
    _C._stream_sleep(int(cycles))


# ---- random ---------------------------------------------------------------------------------

def _generator(device=None):
    return _C.default_generator(_index(device))


def manual_seed(seed):
    _generator().manual_seed(int(seed))


def manual_seed_all(seed):
    for index in range(device_count()):
        _C.default_generator(index).manual_seed(int(seed))


def seed():
    _generator().seed()


def seed_all():
    first = _C.default_generator(0).seed()
    for index in range(1, device_count()):
        _C.default_generator(index).manual_seed(first)


def initial_seed():
    return _generator().initial_seed()


def get_rng_state(device="neuron"):
    return _generator(device).get_state()


def set_rng_state(new_state, device="neuron"):
    _generator(device).set_state(new_state)


def get_rng_state_all():
    return [_C.default_generator(i).get_state() for i in range(device_count())]


def set_rng_state_all(new_states):
    for index, state in enumerate(new_states):
        _C.default_generator(index).set_state(state)


# ---- amp ------------------------------------------------------------------------------------

def get_amp_supported_dtype():
    return [torch.float32, torch.float16, torch.bfloat16]


def is_bf16_supported(including_emulation=True):
    return True


def _is_in_bad_fork():
    return _C._is_in_bad_fork()


def _lazy_init():
    _C._init()
