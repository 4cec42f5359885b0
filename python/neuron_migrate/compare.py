"""`neuron-migrate compare A B`: what changed between two runs (versions, environment,
devices, model files) and which measurements got worse. Runs whose conditions differ
(model, precision, inputs, shapes, training or compile settings) are not compared."""
import json
import math

from rich.markup import escape
from rich.table import Table

from .report.store import load
from .verdict import measured_values

# measurement -> (path in the report, direction: "lower" or "higher" is better, relative slack)
METRICS = {
    "logits max abs error": (("quality", "logits_max_abs_error"), "lower", 0.0),
    "greedy agreement": (("quality", "greedy_agreement"), "higher", 0.0),
    "training loss max abs diff": (("training", "loss_max_abs_diff"), "lower", 0.0),
    "restart loss max abs diff": (("training", "restart", "max_abs_diff"), "lower", 0.0),
    "graphs compiled": (("compiles", "graphs_compiled"), "lower", 0.0),
    "recompiles": (("compiles", "recompiles"), "lower", 0.0),
    "time per training step (s)": (("training", "time_per_step_s"), "lower", 0.10),
    "cost per 1M tokens": (("cost", "running", "target", "per_million_tokens"), "lower", 0.10),
    "cost per 1M tokens (predicted)": (("cost", "running", "target", "predicted", "per_million_tokens"), "lower", 0.10),
}
TIMING_SLACK = 0.10  # timings may move this much (relative) before they count as a regression


def _get(data, path):
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _speed_metrics(report):
    found = {}
    for level in _get(report["sections"], ("speed", "target", "levels")) or []:
        c = level["concurrency"]
        found[f"tokens/s at concurrency {c}"] = (level["tokens_per_s"], "higher", TIMING_SLACK)
        found[f"P95 latency ms at concurrency {c}"] = (level["latency_ms"]["p95"], "lower", TIMING_SLACK)
        found[f"TTFT P95 ms at concurrency {c}"] = (level["ttft_ms"]["p95"], "lower", TIMING_SLACK)
        found[f"error rate at concurrency {c}"] = (level["error_rate"], "lower", 0.0)
        predicted = level.get("predicted")  # reports before the device clock have none
        if predicted:
            found[f"tokens/s at concurrency {c} (predicted)"] = (predicted["tokens_per_s"], "higher", TIMING_SLACK)
            found[f"P95 latency ms at concurrency {c} (predicted)"] = (predicted["latency_ms"]["p95"], "lower",
                                                                       TIMING_SLACK)
            found[f"TTFT P95 ms at concurrency {c} (predicted)"] = (predicted["ttft_ms"]["p95"], "lower", TIMING_SLACK)
    return found


def _metrics(report):
    found = {name: (_get(report["sections"], path), direction, slack)
             for name, (path, direction, slack) in METRICS.items()}
    found.update(_speed_metrics(report))
    census = report["sections"].get("census") or {}
    found["ops run on the CPU (fallback)"] = (len(census["fallback_ops"]) if "fallback_ops" in census else None,
                                              "lower", 0.0)
    found["64-bit value problems"] = (len(census["wide_values"]) if "wide_values" in census else None, "lower", 0.0)
    found["CUDA-only lines"] = (len(_get(report["sections"], ("cuda_scan", "findings")) or []), "lower", 0.0)
    headroom, _ = measured_values(report)["memory_headroom_min"]
    found["memory headroom (min over cores)"] = (headroom, "higher", 0.0)
    return found


def _is_nan(value):
    return isinstance(value, float) and math.isnan(value)


def _diff_dicts(a, b):
    keys = sorted(set(a) | set(b))
    return [(k, a.get(k), b.get(k)) for k in keys if a.get(k) != b.get(k)]


def _diff_conditions(a, b, prefix=""):
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b)):
            out += _diff_conditions(a.get(key), b.get(key), f"{prefix}.{key}" if prefix else key)
        return out
    return [] if a == b else [(prefix, a, b)]


def _prices(report):
    cost = report["sections"].get("cost") or {}
    prices = {f"price_per_hour ({role})": entry.get("price_per_hour")
              for role, entry in (cost.get("running") or {}).items()}
    return {"currency": cost.get("currency"), **prices} if cost else {}


def compare(a, b):
    """{refused, condition_changes} when the conditions differ; else the changes and metrics."""
    conditions = _diff_conditions(a.get("conditions"), b.get("conditions"))
    model_a = _get(a["sections"], ("lock", "model", "files")) or {}
    model_b = _get(b["sections"], ("lock", "model", "files")) or {}
    model_changes = [(name, (x or {}).get("sha256"), (y or {}).get("sha256")) for name, x, y in _diff_dicts(model_a, model_b)]
    if conditions or model_changes:
        return {"refused": True, "condition_changes": conditions, "model_file_changes": model_changes}
    metrics_a, metrics_b = _metrics(a), _metrics(b)
    prices = _diff_dicts(_prices(a), _prices(b))  # the team's prices: not a measurement
    models = [_get(r["sections"], ("speed", "target", "predicted_label")) for r in (a, b)]
    cost_model_changed = None not in models and models[0] != models[1]
    rows = []
    new_in_b = {name: (None, *rest) for name, (_, *rest) in metrics_b.items() if name not in metrics_a}
    for name, (value_a, direction, slack) in {**metrics_a, **new_in_b}.items():  # B's new measurements too
        value_b = metrics_b.get(name, (None,))[0]
        if value_a is None and value_b is None:
            continue
        regression = False
        if _is_nan(value_a) or _is_nan(value_b):  # every comparison with NaN is False
            regression = _is_nan(value_b) and not _is_nan(value_a)
        elif value_a is not None and value_b is not None:
            margin = abs(value_a) * slack
            regression = value_b > value_a + margin if direction == "lower" else value_b < value_a - margin
        elif value_a is not None:
            regression = True  # measured before, not any more
        row = {"metric": name, "a": value_a, "b": value_b, "better": direction, "regression": regression}
        if name.startswith("cost") and prices:  # a new price table, not a slower run (tokens/s says that)
            row.update(regression=False, note="prices changed")
        if name.endswith("(predicted)") and cost_model_changed:  # a new prediction, not a slower run
            row.update(regression=False, note="cost model changed")
        rows.append(row)
    fallback_a = set(_get(a["sections"], ("census", "fallback_ops")) or [])
    fallback_b = set(_get(b["sections"], ("census", "fallback_ops")) or [])
    return {"refused": False, "conditions_digest": a.get("conditions_digest"),
            "versions": _diff_dicts(_get(a["sections"], ("lock", "versions")) or {},
                                    _get(b["sections"], ("lock", "versions")) or {}),
            "environment": _diff_dicts(_get(a["sections"], ("lock", "environment")) or {},
                                       _get(b["sections"], ("lock", "environment")) or {}),
            "devices": _diff_dicts({"target": a.get("target"), "baseline": a.get("baseline")},
                                   {"target": b.get("target"), "baseline": b.get("baseline")}),
            "prices": prices, "cost_model": [("predicted_label", *models)] if cost_model_changed else [],
            "new_fallback_ops": sorted(fallback_b - fallback_a), "gone_fallback_ops": sorted(fallback_a - fallback_b),
            "metrics": rows, "regressions": [r["metric"] for r in rows if r["regression"]]}


def compare_command(path_a, path_b, console, as_json=False):
    """Exit status: 0 no regression, 1 regressions, 2 refused or unreadable."""
    try:
        a, b = load(path_a), load(path_b)
    except (OSError, ValueError) as error:
        console.print(f"[red]compare: {escape(str(error))}")
        return 2
    result = compare(a, b)
    if as_json:
        print(json.dumps(result, indent=2, default=str))
    elif result["refused"]:
        console.print("[red]refused:[/red] the two runs were made under different conditions, so their "
                      "measurements are not comparable:")
        for key, x, y in result["condition_changes"]:
            console.print(f"  {key}: {x!r} -> {y!r}")
        for name, x, y in result["model_file_changes"]:
            console.print(f"  model file {name}: {x} -> {y}")
    else:
        for title, changes in (("versions", result["versions"]), ("environment", result["environment"]),
                               ("devices", result["devices"]), ("prices", result["prices"]),
                               ("cost model", result["cost_model"])):
            for key, x, y in changes:
                console.print(f"{title}: {key}: {x} -> {y}")
        for op in result["new_fallback_ops"]:
            console.print(f"[red]new CPU fallback op:[/red] {op}")
        table = Table(title=f"{path_a} -> {path_b}")
        for column in ("metric", "A", "B", "better", ""):
            table.add_column(column)
        for row in result["metrics"]:
            table.add_row(row["metric"], _fmt(row["a"]), _fmt(row["b"]), row["better"],
                          "[red]REGRESSION" if row["regression"] else row.get("note", ""))
        console.print(table)
        console.print(f"{len(result['regressions'])} regression(s)")
    if result["refused"]:
        return 2
    return 1 if result["regressions"] else 0


def _fmt(value):
    return "n/a" if value is None else (f"{value:.4g}" if isinstance(value, float) else str(value))
