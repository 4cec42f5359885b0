"""torch_neuronx.metrics: the runtime's counters and metrics, with AWS's API.

Counters are named integers ("CompilationCache.InMemoryHits", ...), metrics named series of
samples ("CompilationCache.CompilationTime", ...). Collection is off unless
TORCH_NEURONX_METRICS_ENABLED=1 or set_enabled(True). The values live in the C++ runtime
(runtime/metrics.h)."""
from torch_neuron_sim import _C

__all__ = ["is_enabled", "set_enabled", "get_counter_names", "get_counter_value", "get_metric_names",
           "get_metric_data", "report", "report_filtered", "clear_counters", "clear_metrics",
           "clear_all", "get_compilation_metrics"]

_COMPILATION_COUNTERS = ("InMemoryHits", "InMemoryMisses", "PersistentHits", "PersistentMisses",
                         "TotalCompilations", "Evictions")
_COMPILATION_METRICS = ("CompilationTime", "MemoryUsage", "NeffSize")


def is_enabled():
    return _C.metrics_enabled()


def set_enabled(enabled):
    _C.metrics_set_enabled(bool(enabled))


def get_counter_names():
    return list(_C.counter_names())


def get_counter_value(name):
    """The counter's value, or None when it was never incremented."""
    return _C.counter_value(name)


def get_metric_names():
    return list(_C.metric_names())


def get_metric_data(name):
    """{"count", "sum", "min", "max", "samples"} of the metric, or None when it has no sample."""
    return _C.metric_data(name)


def report():
    """A text report of every counter and metric."""
    return _C.metrics_report([], [])


def report_filtered(counter_names=None, metric_names=None):
    """A text report of the named counters and metrics only."""
    return _C.metrics_report(list(counter_names or []), list(metric_names or [])) if (
        counter_names or metric_names) else ""


def clear_counters():
    _C.clear_counters()


def clear_metrics():
    _C.clear_metrics()


def clear_all():
    clear_counters()
    clear_metrics()


def get_compilation_metrics():
    """The compile cache's counters and metrics: {"CompilationCache.<name>": value or data}."""
    result = {}
    for name in _COMPILATION_COUNTERS:
        result[f"CompilationCache.{name}"] = _C.counter_value(f"CompilationCache.{name}") or 0
    for name in _COMPILATION_METRICS:
        result[f"CompilationCache.{name}"] = _C.metric_data(f"CompilationCache.{name}")
    return result
