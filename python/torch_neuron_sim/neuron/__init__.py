"""The torch.neuron module: the device API, shaped like torch.cuda."""
import torch

from . import _C

__all__ = [
    "is_available", "device_count", "current_device", "set_device", "device", "get_device_name",
    "get_device_properties", "synchronize", "Stream", "Event", "current_stream", "default_stream",
    "stream", "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state",
    "set_rng_state", "get_rng_state_all", "set_rng_state_all", "memory_allocated",
    "max_memory_allocated", "memory_reserved", "max_memory_reserved", "memory_stats",
    "reset_peak_memory_stats", "reset_max_memory_allocated", "empty_cache", "mem_get_info",
    "get_amp_supported_dtype", "is_bf16_supported", "is_initialized", "init",
]


def _index(device):
    if device is None:
        return _C.current_device()
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "neuron":
            raise ValueError(f"expected a neuron device, got {device}")
        return _C.current_device() if device.index is None else device.index
    raise TypeError(f"expected a device index, a 'neuron:N' string or torch.device, got {device!r}")


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
        return (f"_NeuronDeviceProperties(name='{self.name}', platform='{self.platform}', "
                f"total_memory={self.total_memory // 2**20}MB, logical_nc_config={self.logical_nc_config})")


def get_device_properties(device=None):
    return _DeviceProperties(_C.device_properties(_index(device)))


def get_device_name(device=None):
    return get_device_properties(device).name


def synchronize(device=None):
    _C.synchronize(-1 if device is None else _index(device))


class Stream(torch.Stream):
    """A neuron stream (torch.Stream on the neuron device)."""

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
    return torch.Stream(stream_id=0, device_index=index, device_type=torch.device("neuron").type)


class stream:
    """Context manager that makes `stream` current."""

    def __init__(self, stream):
        self.stream = stream
        self.previous = None

    def __enter__(self):
        if self.stream is not None:
            self.previous = torch.accelerator.current_stream(self.stream.device)
            torch.accelerator.set_stream(self.stream)

    def __exit__(self, *exc):
        if self.previous is not None:
            torch.accelerator.set_stream(self.previous)
        return False


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


# ---- memory ---------------------------------------------------------------------------------

def memory_stats(device=None):
    return dict(_C.memory_stats(_index(device)))


def memory_allocated(device=None):
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device=None):
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device=None):
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device=None):
    return memory_stats(device)["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device=None):
    _C.reset_peak_memory_stats(_index(device))


def reset_max_memory_allocated(device=None):
    _C.reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device=None):
    _C.reset_accumulated_memory_stats(_index(device))


def empty_cache():
    _C.empty_cache()


def mem_get_info(device=None):
    return tuple(_C.mem_get_info(_index(device)))


# ---- amp ------------------------------------------------------------------------------------

def get_amp_supported_dtype():
    return [torch.bfloat16, torch.float16]


def is_bf16_supported(including_emulation=True):
    return True


def _is_in_bad_fork():
    return _C._is_in_bad_fork()


def _lazy_init():
    _C._init()
