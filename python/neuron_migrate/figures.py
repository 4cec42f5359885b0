"""Which figures decide (Note [Deciding figures]).

A run on a real device (a GPU, the CPU, a real Trainium) measures its speed: those figures are
what the device does. A run on the simulated Neuron device has two sets: the simulator's host
time (how fast this host emulates the device: says nothing about Trainium) and the device
clock's predicted Trainium time, labelled with its cost model and calibration error. The gates,
the cost, the plots and `compare` use the figures that describe the target: measured on a real
device, predicted on the simulated one. Host time stays in the report, labelled, and is only
ever set beside host time.

Every function here reads report.json data only."""

MEASURED, PREDICTED, HOST = "measured", "predicted", "simulator host time"


def _get(data, *path):
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def simulated(report):
    return bool(report.get("target_simulated"))


def source(report):
    """What the target's speed figures are: MEASURED on a real device, PREDICTED on the simulator."""
    return PREDICTED if simulated(report) else MEASURED


def calibration_error(report):
    """The prediction's calibration error as a fraction, or None (unknown, or measured figures)."""
    if not simulated(report):
        return None
    error = _get(report, "sections", "prediction", "calibration_error")
    if error is None:
        label = _get(report, "sections", "speed", "target", "predicted_label") or ""
        if "±" in label:
            try:
                error = float(label.split("±", 1)[1].split("%", 1)[0]) / 100
            except ValueError:
                error = None
    return error


def label(report):
    """How the deciding speed figures are labelled."""
    if simulated(report):
        return _get(report, "sections", "speed", "target", "predicted_label") or "predicted (label missing)"
    return f"measured on {report.get('target')}"


def speed_levels(report, role="target"):
    """[{concurrency, tokens_per_s, latency_ms, ttft_ms, latencies_ms, error_rate, source}] of the
    role's deciding figures: predicted levels for a simulated target (levels without a prediction
    are left out: the device clock was off), measured levels otherwise."""
    levels = _get(report, "sections", "speed", role, "levels") or []
    if role == "target" and simulated(report):
        return [{"concurrency": level["concurrency"], "tokens_per_s": level["predicted"].get("tokens_per_s"),
                 "latency_ms": level["predicted"].get("latency_ms") or {},
                 "ttft_ms": level["predicted"].get("ttft_ms") or {},
                 "latencies_ms": level["predicted"].get("latencies_ms") or [],
                 "error_rate": level.get("error_rate"), "source": PREDICTED}
                for level in levels if level.get("predicted")]
    return [{"concurrency": level["concurrency"], "tokens_per_s": level.get("tokens_per_s"),
             "latency_ms": level.get("latency_ms") or {}, "ttft_ms": level.get("ttft_ms") or {},
             "latencies_ms": level.get("latencies_ms") or [], "error_rate": level.get("error_rate"),
             "source": MEASURED} for level in levels]


def host_levels(report):
    """The simulator's host-time levels of a simulated target ([] for a real device)."""
    if not simulated(report):
        return []
    return [{**level, "source": HOST} for level in _get(report, "sections", "speed", "target", "levels") or []]


def cost_per_million(report, role="target"):
    """(cost per 1M tokens, source) of the role's deciding throughput, or (None, source)."""
    running = _get(report, "sections", "cost", "running", role) or {}
    if role == "target" and simulated(report):
        return (running.get("predicted") or {}).get("per_million_tokens"), PREDICTED
    return running.get("per_million_tokens"), MEASURED


def worst(levels, *path, pick=max):
    values = [_get(level, *path) for level in levels]
    values = [value for value in values if value is not None]
    return pick(values) if values else None
