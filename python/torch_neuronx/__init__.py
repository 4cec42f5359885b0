"""torch_neuronx: the import name and API of AWS's TorchNeuron package, served by the
simulated Neuron device of torch-neuron-sim. `import torch_neuronx` registers the
"neuron" device (also loaded automatically through the torch.backends entry point).

Names of our own, not in AWS's package: is_simulated(), get_op_counts(), neff_cache_dir(),
device_time()."""


def _autoload():
    """Entry point of `torch.backends`: importing this module does the registration. Defined
    before `import torch`: when a script imports torch_neuronx first, torch's own import calls
    this while this module is still loading, and the rest of this module then registers."""


import collections  # noqa: E402

import torch  # noqa: E402

import torch_neuron_sim as _sim  # noqa: E402
from torch_neuron_sim import clear_op_tracking, get_executed_ops, get_fallback_ops, get_op_counts, is_simulated
from torch_neuron_sim.dynamo_metrics import NeuronCompilationMetrics, get_dynamo_metrics, reset_dynamo_metrics
from torch_neuron_sim.neuron import (Event, Stream, StreamContext, current_device, current_stream,
                                     default_stream, device, device_count, empty_cache,
                                     get_device_properties, max_memory_allocated, max_memory_reserved,
                                     memory_allocated, memory_reserved, memory_stats, memory_summary,
                                     reset_accumulated_memory_stats, reset_peak_memory_stats,
                                     set_device, set_stream, stream, synchronize)

from . import metrics  # noqa: E402
from .nki import nki_op, wrap_nki  # noqa: E402
from .profiling import NeuronProfiler  # noqa: E402

__version__ = "2.13.0+sim"
__all__ = [
    "device_count", "current_device", "set_device", "get_device_properties", "empty_cache",
    "synchronize", "current_stream", "default_stream", "set_stream", "stream", "StreamContext",
    "device", "Stream", "Event", "memory_stats", "memory_allocated", "max_memory_allocated",
    "memory_reserved", "max_memory_reserved", "reset_peak_memory_stats",
    "reset_accumulated_memory_stats", "memory_summary", "get_fallback_ops", "get_executed_ops",
    "clear_op_tracking", "get_dynamo_metrics", "reset_dynamo_metrics", "NeuronCompilationMetrics",
    "nki_op", "wrap_nki", "NeuronProfiler", "is_neuron_runtime_initialized", "metrics",
    "is_simulated", "get_op_counts", "neff_cache_dir", "device_time", "device_counters", "DeviceCounters",
]


def neff_cache_dir():
    """Where compiled programs are kept on disk: TORCH_NEURONX_NEFF_CACHE_DIR, else our per-user
    default (AWS's package: /tmp/neff_cache, shared by every user; Note [Trusting the program
    cache])."""
    from torch_neuron_sim.compile import cache
    return cache.directory()


class DeviceCounters(collections.namedtuple("DeviceCounters",
                                             "time_ms flops hbm_bytes platform logical_nc_config device")):
    """A reading of one device's predicted clock: its time (ms), the matmul FLOPs and HBM bytes of
    the work issued so far, its platform and its index. `later - earlier` is the work between the
    two readings of one device (ValueError for two devices: each has its own clock); its `mfu`
    and `mbu` are the achieved FLOP/s and HBM bytes/s against one logical core's peaks (BF16
    TensorE rate, HBM bandwidth), as the Neuron profiler and torchtitan report them."""

    def __sub__(self, other):
        if self.device != other.device:
            raise ValueError(f"these readings are of different devices (neuron:{self.device} and "
                             f"neuron:{other.device}); subtract readings of one device")
        if (self.platform, self.logical_nc_config) != (other.platform, other.logical_nc_config):
            raise ValueError("these readings are of different platforms")
        return self._replace(time_ms=self.time_ms - other.time_ms, flops=self.flops - other.flops,
                             hbm_bytes=self.hbm_bytes - other.hbm_bytes)

    def _peaks(self):
        return _sim._C._peak_rates(self.platform, self.logical_nc_config)

    @property
    def mfu(self):
        return self.flops / (self.time_ms * 1e-3) / self._peaks()[0] if self.time_ms > 0 else 0.0

    @property
    def mbu(self):
        return self.hbm_bytes / (self.time_ms * 1e-3) / self._peaks()[1] if self.time_ms > 0 else 0.0


def device_counters(device=None):
    """The device clock's reading of `device` (default: the current neuron device): a
    DeviceCounters. `torch_neuronx.device_counters() - start` gives the time, FLOPs, bytes, MFU and
    MBU of the work issued since `start`. Raises RuntimeError when the clock is off."""
    index = _device_index(device)
    flops, hbm_bytes = _sim._C._device_work(index)  # validates the index
    index = index if index != -1 else torch.neuron.current_device()
    properties = torch.neuron.get_device_properties(index)
    return DeviceCounters(_sim._C._device_time_ns(index) / 1e6, flops, hbm_bytes, properties.platform,
                          properties.logical_nc_config, index)


def _device_index(device):
    if device is None:
        return -1
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != "neuron":
        raise ValueError(f"needs a neuron device, got {device}")
    return -1 if device.index is None else device.index


def device_time(device=None):
    """The predicted Trainium time of the work issued so far on `device` (default: the current
    neuron device), in **milliseconds** since the process started: the latest end among the
    device's streams on the device clock (docs/device-clock.md; Note [Device clock]). The
    difference of two readings is the predicted device time of the work issued between them.
    Predictions exist as soon as work is issued: no synchronize() is needed (on a real device
    one would synchronize before reading a clock). Raises RuntimeError when the clock is off
    (NEURON_SIM_DEVICE_CLOCK=0)."""
    return _sim._C._device_time_ns(_device_index(device)) / 1e6


def is_neuron_runtime_initialized():
    """True once this process has started the (simulated) Neuron runtime."""
    return torch.neuron.is_initialized()
