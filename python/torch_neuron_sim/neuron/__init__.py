"""The torch.neuron module: the device API, shaped like torch.cuda and like AWS's torch.neuron.

Beyond AWS's module it keeps get_rng_state_all / set_rng_state_all and mem_get_info, which
Accelerate and DTensor call, and the private names PyTorch reads from any device module as it
reads them from torch.cuda (Note [The device module contract], docs/device-module-contract.md):
`_initialized`, `_lazy_init`, `_is_in_bad_fork`, `default_generators`, `_get_generator`,
`_utils._get_device_index`. Activation checkpointing, for one, stashes and restores a device's
RNG state only when `getattr(module, "_initialized", False)` is true."""

import torch

from .. import _C
from .. import dynamo_metrics as _dynamo_metrics
from . import _utils  # noqa: F401  (torch.load reads module._utils._get_device_index, as torch.cuda's)
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
    "get_amp_supported_dtype", "is_bf16_supported", "is_initialized", "init", "default_generators",
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


# Note [The device module contract]
# torch.cuda keeps `_initialized` (a module global set by _lazy_init) and `default_generators`
# (a tuple filled by _lazy_init); PyTorch reads both from any device module by name:
# torch.utils.checkpoint saves and restores a device's RNG state only when
# getattr(module, "_initialized", False) is true, and graph-safe RNG (torch._prims.rng_prims)
# indexes module.default_generators. Here both are computed when read (PEP 562's module
# __getattr__): `_initialized` is true once the runtime has started (a tensor, a stream, an
# RNG call, torch.neuron.init()), as CUDA's is once the context exists; reading it starts
# nothing. The generators exist from the start (the runtime is not needed for them), so
# default_generators never starts the runtime either.
_default_generators = None


def __getattr__(name):
    global _default_generators
    if name == "_initialized":
        return is_initialized()
    if name == "default_generators":
        if _default_generators is None:
            _default_generators = tuple(_C.default_generator(i) for i in range(device_count()))
        return _default_generators
    raise AttributeError(f"module 'torch.neuron' has no attribute '{name}'")


def init():
    _C._init()


def current_device():
    return _C.current_device()


def set_device(device):
    index = _index(device, negative_is_current=True)  # negative: no change, as torch.cuda.set_device
    if index >= 0:
        _C.set_device(index)


def _exchange_device(device):
    """Makes core `device` current (-1: no change); returns the previous one (torch.cuda's)."""
    return _C.exchange_device(int(device))


_maybe_exchange_device = _exchange_device


class device:
    """Context manager that selects a neuron device."""

    def __init__(self, device):
        self.index = _index(device, negative_is_current=True) if device is not None else -1
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
    _C.synchronize(-1 if device is None else _index(device, negative_is_current=True))  # as torch.cuda.device(-1)


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


def _get_generator(device):
    """The default generator of `device` (a torch.device; index None: the current core), as
    torch.cuda._get_generator (AOTAutograd's graph-safe RNG reads it)."""
    return _generator(device)


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
