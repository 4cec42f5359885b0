"""torch_neuronx.profiling: AWS's profiling entry points over torch.profiler.

    cfg = NeuronConfig(modes=[ProfileMode.DEVICE], profile_output_dir="/tmp/traces")
    with torch.profiler.profile(activities=[ProfilerActivity.CPU], experimental_config=cfg,
                                on_trace_ready=NeuronProfiler(cfg).export_trace) as prof:
        ...
    with NeuronProfiler(neuron_output_dir="./output"):   # the older form: a context manager
        ...

The host's side of the trace is what torch.profiler records: the ATen ops, streams' work and
copies as the host runs them. With ProfileMode.DEVICE (and in the older form while the device
clock runs) the trace also holds the device, as Kineto shows a CUDA stream's kernels: one
track per (device, stream), "neuron:<device> stream <id> (predicted Trainium)", with a span per
launch (eager op, copy, compiled program, collective) and its engine (TensorE, VectorE,
ScalarE, DMA, CC, program), launch path, bytes and FLOPs in its args.

The device spans are the device clock's (docs/device-clock.md): predicted Trainium time, in
nanoseconds since the runtime started, not the host's wall time. Their durations, order and
gaps are the prediction. Their place beside the host events is not: the tracks are shifted so
that the first device span starts at the profile's first host event (each span's args keep its
predicted start and end). Recording starts and stops with the profile (the extension's Kineto
plugin reads the NeuronConfig), and NeuronProfiler.export_trace (the on_trace_ready callback,
or the context manager's exit) merges the spans into the Chrome trace it writes;
prof.export_chrome_trace alone writes the host's side only. ProfileMode.DEVICE needs the clock
(NEURON_SIM_DEVICE_CLOCK=1, the default); NeuronConfig raises when it is off. ProfileMode.RUNTIME
alone gives the host's trace."""
import enum
import gzip
import json
import os
import warnings

import torch
from torch._C._profiler import _ExperimentalConfig

import torch_neuron_sim as _sim

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
    if ProfileMode.DEVICE in modes:
        _sim._C._check_device_track()  # raises, saying how to turn the clock on
    fields = {"modes": ",".join(mode.value for mode in modes), "profile_output_dir": profile_output_dir}
    if max_events_per_nc is not None:
        fields["max_events_per_nc"] = int(max_events_per_nc)
    if capture_enabled_for_nc is not None:
        fields["capture_enabled_for_nc"] = ",".join(str(int(c)) for c in capture_enabled_for_nc)
    if neff_cache_dir is not None:
        fields["neff_cache_dir"] = neff_cache_dir
    fields["precache_node_info"] = int(bool(precache_node_info))
    return _ExperimentalConfig(custom_profiler_config=";".join(f"{k}:{v}" for k, v in fields.items()))


def _field(config, name, default):
    for field in config.custom_profiler_config.split(";"):
        key, _, value = field.partition(":")
        if key == name:
            return value
    return default


# The fields of a span of _C._device_track_stop() (csrc/Module.cpp, bind_device_track).
_SPAN_FIELDS = ("device", "stream", "start_ns", "end_ns", "name", "path", "engine", "work", "bytes", "flops",
                "fixed_ns", "compute_ns", "memory_ns")
_DEVICE_PID = 10_000_000  # + the device index: above any host pid (Linux's pid_max is at most 2**22)


def _device_track_events(spans, origin_us):
    """Chrome trace events for the device spans: metadata naming a process per device and a
    thread per stream, then one "X" event per span, the first one starting at `origin_us`."""
    first_ns = min(span[2] for span in spans)
    events = []
    for device in sorted({span[0] for span in spans}):
        props = torch.neuron.get_device_properties(device)
        name = f"neuron:{device} predicted Trainium ({props.platform}, LNC {props.logical_nc_config})"
        events += [{"ph": "M", "name": "process_name", "pid": _DEVICE_PID + device, "tid": 0, "args": {"name": name}},
                   {"ph": "M", "name": "process_sort_index", "pid": _DEVICE_PID + device, "tid": 0,
                    "args": {"sort_index": _DEVICE_PID + device}}]
    for device, stream in sorted({(span[0], span[1]) for span in spans}):
        events.append({"ph": "M", "name": "thread_name", "pid": _DEVICE_PID + device, "tid": stream,
                       "args": {"name": f"neuron:{device} stream {stream} (predicted Trainium)"}})
    for span in spans:
        args = dict(zip(_SPAN_FIELDS, span))
        args["time"] = "predicted device time (ns since the runtime started), not host time"
        events.append({"ph": "X", "cat": "kernel", "name": args.pop("name"), "pid": _DEVICE_PID + args["device"],
                       "tid": args["stream"], "ts": round(origin_us + (args["start_ns"] - first_ns) / 1e3, 3),
                       "dur": round((args["end_ns"] - args["start_ns"]) / 1e3, 3), "args": args})
    return events


def _merge_device_track(path, spans, dropped):
    """Adds the device track to the Chrome trace at `path` (gzipped when it ends in .gz)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as file:
        trace = json.load(file)
    events = trace.setdefault("traceEvents", [])
    # The host's own events (Kineto's profile window is a span of the string pid "Spans").
    host = [event["ts"] for event in events if event.get("ph") == "X" and isinstance(event.get("pid"), int)]
    if spans:
        events += _device_track_events(spans, min(host) if host else 0.0)
    trace["neuronDeviceTrack"] = {"spans": len(spans), "dropped": dropped, "time": "predicted (device clock)"}
    with opener(path, "wt") as file:
        json.dump(trace, file)
    if dropped:
        warnings.warn(f"the device track kept its first {len(spans)} spans and dropped {dropped}: "
                      "profile fewer steps (a torch.profiler schedule) for the whole device track")


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
        if config is None:  # the older form: the device track too, while the clock runs
            modes = [ProfileMode.DEVICE, ProfileMode.RUNTIME] if _sim._C._device_clock_on() else [ProfileMode.RUNTIME]
            config = NeuronConfig(modes=modes, profile_output_dir=neuron_output_dir)
        self.config = config
        self.output_dir = _field(config, "profile_output_dir", "./output")
        self.device_track = ProfileMode.DEVICE.value in _field(config, "modes", "").split(",")
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
        if self.device_track:
            _merge_device_track(path, *_sim._C._device_track_stop())
        self.traces.append(path)
        return path

    def __enter__(self):
        self._profile = torch.profiler.profile(activities=self.activities, record_shapes=self.record_shapes,
                                               experimental_config=self.config)
        self._profile.__enter__()
        return self._profile

    def __exit__(self, *exc):
        torch.neuron.synchronize()
        self._profile.__exit__(*exc)
        self.export_trace(self._profile)
        return False
