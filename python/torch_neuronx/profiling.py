"""torch_neuronx.profiling: AWS's profiling entry points over torch.profiler.

    cfg = NeuronConfig(modes=[ProfileMode.RUNTIME], profile_output_dir="/tmp/traces")
    with torch.profiler.profile(activities=[ProfilerActivity.CPU], experimental_config=cfg,
                                on_trace_ready=NeuronProfiler(cfg).export_trace) as prof:
        ...
    with NeuronProfiler(neuron_output_dir="./output"):   # the older form: a context manager
        ...

The simulated device's kernels are host code, so the trace holds the ATen ops, streams'
work and copies as torch.profiler records them on the host; there is no device-side
(engine-level) timeline. ProfileMode.DEVICE is accepted and gives the same host trace."""
import enum
import os

import torch
from torch._C._profiler import _ExperimentalConfig

__all__ = ["ProfileMode", "NeuronConfig", "NeuronProfiler"]


class ProfileMode(enum.Enum):
    DEVICE = "device"
    RUNTIME = "runtime"


def NeuronConfig(modes=(ProfileMode.RUNTIME,), max_events_per_nc=None, capture_enabled_for_nc=None,
                 profile_output_dir="./output", neff_cache_dir=None, precache_node_info=False):
    """The experimental_config to pass to torch.profiler.profile: a Kineto config whose
    custom string carries the Neuron settings, as AWS's package passes them."""
    for mode in modes:
        if not isinstance(mode, ProfileMode):
            raise TypeError(f"NeuronConfig: modes must be ProfileMode values, got {mode!r}")
    fields = {"modes": ",".join(mode.value for mode in modes), "profile_output_dir": profile_output_dir}
    if max_events_per_nc is not None:
        fields["max_events_per_nc"] = int(max_events_per_nc)
    if capture_enabled_for_nc is not None:
        fields["capture_enabled_for_nc"] = ",".join(str(int(c)) for c in capture_enabled_for_nc)
    if neff_cache_dir is not None:
        fields["neff_cache_dir"] = neff_cache_dir
    fields["precache_node_info"] = int(bool(precache_node_info))
    return _ExperimentalConfig(custom_profiler_config=";".join(f"{k}:{v}" for k, v in fields.items()))


def _output_dir(config):
    for field in config.custom_profiler_config.split(";"):
        key, _, value = field.partition(":")
        if key == "profile_output_dir":
            return value
    return "./output"


class NeuronProfiler:
    """Writes Chrome traces of torch.profiler runs into the Neuron output folder.

    NeuronProfiler(cfg).export_trace is an on_trace_ready callback; NeuronProfiler(...) is
    also a context manager that profiles its block and writes the trace on exit."""

    def __init__(self, config=None, *, pytorch_activities=None, record_shapes=False, pytorch_trace_file=None,
                 neuron_output_dir="./output", event_filters=None):
        if config is not None and not isinstance(config, _ExperimentalConfig):
            if pytorch_activities is None and isinstance(config, (list, tuple)):
                pytorch_activities, config = config, None  # the older positional form
            else:
                raise TypeError(f"NeuronProfiler: expected a NeuronConfig, got {config!r}")
        self.output_dir = _output_dir(config) if config is not None else neuron_output_dir
        self.activities = pytorch_activities or [torch.profiler.ProfilerActivity.CPU]
        self.record_shapes = record_shapes
        self.trace_file = pytorch_trace_file
        self.event_filters = event_filters
        self.traces = []  # paths written so far
        self._profile = None

    def export_trace(self, prof):
        """on_trace_ready: writes `prof`'s Chrome trace; returns its path."""
        torch.neuron.synchronize()
        if self.trace_file:
            path = self.trace_file
        else:
            os.makedirs(self.output_dir, exist_ok=True)
            path = os.path.join(self.output_dir, f"neuron_trace_pid{os.getpid()}_{len(self.traces)}.json")
        prof.export_chrome_trace(path)
        self.traces.append(path)
        return path

    def __enter__(self):
        self._profile = torch.profiler.profile(activities=self.activities, record_shapes=self.record_shapes)
        self._profile.__enter__()
        return self._profile

    def __exit__(self, *exc):
        torch.neuron.synchronize()
        self._profile.__exit__(*exc)
        self.export_trace(self._profile)
        return False
