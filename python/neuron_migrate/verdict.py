"""The stop conditions of the workload file, each decided on the target's own figure: go,
no-go, or not measured (a condition that could not be measured is never a go). On the
simulated device the speed and cost gates take the predicted Trainium figures, never the
simulator's host time (Note [Deciding figures], figures.py)."""
from . import figures


def _get(report, *path):
    value = report
    for key in path:
        if value is None:
            return None
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _worst(levels, *path, pick=max):
    values = [_get(level, *path) for level in levels or []]
    values = [v for v in values if v is not None]
    return pick(values) if values else None


def measured_values(report):
    """{gate: (value, comparison)}; sources() says which are predicted."""
    sections = report.get("sections", {})
    levels = figures.speed_levels(report)
    cores = _get(sections, "memory", "target_peak_per_core") or []
    headrooms = [1 - c["peak_bytes"] / c["total_bytes"] for c in cores if c.get("total_bytes")]
    fallback = _get(sections, "census", "fallback_ops")
    return {
        "logits_max_abs_error": (_get(sections, "quality", "logits_max_abs_error"), "<="),
        "greedy_agreement_min": (_get(sections, "quality", "greedy_agreement"), ">="),
        "loss_max_abs_diff": (_get(sections, "training", "loss_max_abs_diff"), "<="),
        "resume_loss_max_abs_diff": (_get(sections, "training", "restart", "max_abs_diff"), "<="),
        "p95_latency_ms": (_worst(levels, "latency_ms", "p95"), "<="),
        "ttft_p95_ms": (_worst(levels, "ttft_ms", "p95"), "<="),
        # errors are measured on every device (whatever the clock): every level's, predicted or not
        "error_rate_max": (_worst(_get(sections, "speed", "target", "levels"), "error_rate"), "<="),
        "memory_headroom_min": (min(headrooms) if headrooms else None, ">="),
        "compiles_max": (_get(sections, "compiles", "graphs_compiled"), "<="),
        "fallback_ops_max": (len(fallback) if fallback is not None else None, "<="),
        "cost_per_million_tokens_max": (figures.cost_per_million(report)[0], "<="),
        # a training run's time per step is host time on the simulator: not predicted yet
        "cost_per_training_run_max": (None if figures.simulated(report) else
                                      _get(sections, "cost", "running", "target", "per_training_run"), "<="),
    }


_TIMED = {"p95_latency_ms", "ttft_p95_ms", "cost_per_million_tokens_max", "cost_per_training_run_max"}


def sources(report):
    """{gate: what its value is}: the timed gates are predicted on the simulated device."""
    timed = figures.source(report)
    return {name: (timed if name in _TIMED else figures.MEASURED) for name in measured_values(report)}


def decide(gates, report):
    """[{condition, verdict, measured, limit, comparison}] for every gate the workload sets."""
    verdicts = []
    kinds = sources(report)
    label = figures.label(report)
    for name, (measured, comparison) in measured_values(report).items():
        limit = getattr(gates, name)
        if limit is None:
            continue
        if measured is None:
            verdict = "not measured"
        elif comparison == "<=":
            verdict = "go" if measured <= limit else "no-go"
        else:
            verdict = "go" if measured >= limit else "no-go"
        entry = {"condition": name, "verdict": verdict, "measured": measured, "limit": limit,
                 "comparison": comparison, "source": kinds[name]}
        if kinds[name] == figures.PREDICTED:
            entry["label"] = label
        if measured is None and name == "cost_per_training_run_max" and figures.simulated(report):
            entry["note"] = "a training run's time on Trainium is not predicted; the simulator's host time is not gated"
        verdicts.append(entry)
    return verdicts
