"""`neuron-migrate compare A B`: what changed between two runs (versions, environment,
devices, model files) and which figures got worse. Runs whose conditions differ (model,
precision, inputs, shapes, training or compile settings) are not compared.

Like with like (Note [Deciding figures], figures.py): each run's speed and cost rows are its
deciding figures, measured on a real device or predicted on the simulated one, each row saying
which (with the calibration error, which widens the slack of a predicted row). The simulator's host
time is compared only with another simulator's host time, in its own rows. When one run measured a
real device (the team's GPU) and the other predicted Trainium, `decision()` adds the decision:
both at the workload's load, per platform and TP degree, the one-time cost and the months to
break even."""
import json
import math

from rich.markup import escape
from rich.table import Table

from .report.store import load
from . import figures
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
}
TIMING_SLACK = 0.10  # timings may move this much (relative) before they count as a regression
NOT_PREDICTED = "not predicted"  # a figure left out by design (never a regression)


def _get(data, path):
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _speed_metrics(report):
    """{row: (value, better, slack, source)}: the deciding speed and cost figures (figures.py)."""
    found = {}
    for level in figures.speed_levels(report):
        c, source = level["concurrency"], level["source"]
        found[f"tokens/s at concurrency {c}"] = (level["tokens_per_s"], "higher", TIMING_SLACK, source)
        found[f"P50 latency ms at concurrency {c}"] = (level["latency_ms"].get("p50"), "lower", TIMING_SLACK, source)
        found[f"P95 latency ms at concurrency {c}"] = (level["latency_ms"].get("p95"), "lower", TIMING_SLACK, source)
        found[f"TTFT P95 ms at concurrency {c}"] = (level["ttft_ms"].get("p95"), "lower", TIMING_SLACK, source)
    for level in _get(report["sections"], ("speed", "target", "levels")) or []:  # answered or not: measured
        found[f"error rate at concurrency {level['concurrency']}"] = (level["error_rate"], "lower", 0.0,
                                                                      figures.MEASURED)
    value, source = figures.cost_per_million(report)
    found["cost per 1M tokens"] = (value, "lower", 0.10, source)
    step = _get(report["sections"], ("training", "time_per_step_s"))
    if figures.simulated(report):  # host time; a training step on Trainium is not predicted yet
        found["time per training step (s)"] = (None, "lower", 0.10, NOT_PREDICTED)
    else:
        found["time per training step (s)"] = (step, "lower", 0.10, figures.MEASURED)
    return found


def _host_metrics(report):
    """The simulator's host-time rows (only ever compared with another simulator's)."""
    found = {}
    for level in figures.host_levels(report):
        c = level["concurrency"]
        found[f"tokens/s at concurrency {c} ({figures.HOST})"] = (level["tokens_per_s"], "higher", TIMING_SLACK,
                                                                  figures.HOST)
        found[f"P95 latency ms at concurrency {c} ({figures.HOST})"] = (level["latency_ms"]["p95"], "lower",
                                                                        TIMING_SLACK, figures.HOST)
    step = _get(report["sections"], ("training", "time_per_step_s"))
    if figures.simulated(report) and step is not None:
        found[f"time per training step (s) ({figures.HOST})"] = (step, "lower", 0.10, figures.HOST)
    return found


def _metrics(report, host=False):
    found = {name: (_get(report["sections"], path), direction, slack, figures.MEASURED)
             for name, (path, direction, slack) in METRICS.items()}
    found.update(_speed_metrics(report))
    if host:
        found.update(_host_metrics(report))
    census = report["sections"].get("census") or {}
    fallback_source = census.get("fallback_source", "measured")
    found["ops run on the CPU (fallback)"] = (len(census["fallback_ops"]) if "fallback_ops" in census else None,
                                              "lower", 0.0, fallback_source)
    found["64-bit value problems"] = (len(census["wide_values"]) if "wide_values" in census else None, "lower", 0.0,
                                      figures.MEASURED)
    found["CUDA-only lines"] = (len(_get(report["sections"], ("cuda_scan", "findings")) or []), "lower", 0.0,
                                figures.MEASURED)
    headroom, _ = measured_values(report)["memory_headroom_min"]
    found["memory headroom (min over cores)"] = (headroom, "higher", 0.0, figures.MEASURED)
    return found


def _compile_condition(conditions, kinds):
    """The conditions with [compile] as it applies to the two runs' devices: the backend (and mode)
    each of `kinds` gets. One file's table, a name for every device, and reports made before
    per-device tables ("backend": "neuron") compare equal when they compile alike."""
    from .workload import Compile
    compile_ = (conditions or {}).get("compile")
    if not isinstance(compile_, dict):
        return conditions
    spec = Compile(enabled=compile_.get("enabled", True), backend=compile_.get("backend"), mode=compile_.get("mode"))
    normal = {"enabled": spec.enabled, "backend": {kind: spec.backend_for(kind) for kind in kinds}}
    modes = {kind: spec.mode_for(kind) for kind in kinds if spec.mode_for(kind)}
    if modes:
        normal["mode"] = modes
    return {**conditions, "compile": normal}


def _kind(device):
    return str(device or "").split(":")[0]


def _op_key(op):
    from .census import op_key
    return op_key(op)


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
    for role, entry in (cost.get("running") or {}).items():  # the price a predicted cost used
        predicted = entry.get("predicted") or {}
        if predicted.get("price_key"):
            prices[f"price_per_hour.{predicted['price_key']} ({role}, predicted)"] = predicted.get("price_per_hour")
    return {"currency": cost.get("currency"), **prices} if cost else {}


def compare(a, b):
    """{refused, condition_changes} when the conditions differ; else the changes and metrics."""
    kinds = sorted({_kind(a.get("target")), _kind(b.get("target"))})
    conditions = _diff_conditions(_compile_condition(a.get("conditions"), kinds),
                                  _compile_condition(b.get("conditions"), kinds))
    model_a = _get(a["sections"], ("lock", "model", "files")) or {}
    model_b = _get(b["sections"], ("lock", "model", "files")) or {}
    model_changes = [(name, (x or {}).get("sha256"), (y or {}).get("sha256")) for name, x, y in _diff_dicts(model_a, model_b)]
    if conditions or model_changes:
        return {"refused": True, "condition_changes": conditions, "model_file_changes": model_changes}
    both_simulated = figures.simulated(a) and figures.simulated(b)
    same_device = _kind(a.get("target")) == _kind(b.get("target"))
    metrics_a, metrics_b = _metrics(a, host=both_simulated), _metrics(b, host=both_simulated)
    prices = _diff_dicts(_prices(a), _prices(b))  # the team's prices: not a measurement
    models = [_get(r["sections"], ("speed", "target", "predicted_label")) for r in (a, b)]
    cost_model_changed = both_simulated and None not in models and models[0] != models[1]
    errors = {"a": figures.calibration_error(a), "b": figures.calibration_error(b)}
    rows = []
    new_in_b = {name: (None, *rest) for name, (_, *rest) in metrics_b.items() if name not in metrics_a}
    for name, (value_a, direction, slack, source_a) in {**metrics_a, **new_in_b}.items():  # B's new ones too
        value_b, *_, source_b = metrics_b.get(name, (None, None, None, None))
        if value_a is None and value_b is None:
            continue
        # a predicted figure is as good as its calibration: the slack widens by its error
        band = sum(errors[side] or 0 for side, source in (("a", source_a), ("b", source_b))
                   if source == figures.PREDICTED)
        regression = False
        if _is_nan(value_a) or _is_nan(value_b):  # every comparison with NaN is False
            regression = _is_nan(value_b) and not _is_nan(value_a)
        elif value_a is not None and value_b is not None:
            margin = abs(value_a) * (slack + band)
            regression = value_b > value_a + margin if direction == "lower" else value_b < value_a - margin
        elif value_a is not None:
            regression = source_b != NOT_PREDICTED  # measured before, not any more (unless left out by design)
        row = {"metric": name, "a": value_a, "b": value_b, "better": direction, "regression": regression,
               "source_a": source_a, "source_b": source_b}
        if band:
            row["error_band"] = band
        if name.startswith("cost") and prices and same_device:  # a new price table, not a slower run
            row.update(regression=False, note="prices changed")
        if figures.PREDICTED in (source_a, source_b) and cost_model_changed:  # a new prediction, not a slower run
            row.update(regression=False, note="cost model changed")
        rows.append(row)
    # by the op TorchNeuron would run (Note [Predicted fallbacks]): the overload reported may differ
    fallback_a = {_op_key(op): op for op in _get(a["sections"], ("census", "fallback_ops")) or []}
    fallback_b = {_op_key(op): op for op in _get(b["sections"], ("census", "fallback_ops")) or []}
    return {"refused": False, "conditions_digest": a.get("conditions_digest"),
            "versions": _diff_dicts(_get(a["sections"], ("lock", "versions")) or {},
                                    _get(b["sections"], ("lock", "versions")) or {}),
            "environment": _diff_dicts(_get(a["sections"], ("lock", "environment")) or {},
                                       _get(b["sections"], ("lock", "environment")) or {}),
            "devices": _diff_dicts({"target": a.get("target"), "baseline": a.get("baseline")},
                                   {"target": b.get("target"), "baseline": b.get("baseline")}),
            "prices": prices, "cost_model": [("predicted_label", *models)] if cost_model_changed else [],
            "new_fallback_ops": sorted(fallback_b[k] for k in set(fallback_b) - set(fallback_a)),
            "gone_fallback_ops": sorted(fallback_a[k] for k in set(fallback_a) - set(fallback_b)),
            "metrics": rows, "regressions": [r["metric"] for r in rows if r["regression"]],
            "sources": {"a": figures.label(a), "b": figures.label(b)}, "same_device": same_device,
            "targets": (a.get("target"), b.get("target")),
            "decision": decision(a, b)}


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
        _print_decision(console, result)
        table = Table(title=f"{path_a} -> {path_b}")
        for column in ("metric", "A", "B", "A is", "B is", "better", ""):
            table.add_column(column)
        for row in result["metrics"]:
            note = "[red]REGRESSION" if row["regression"] else row.get("note", "")
            if row["regression"] and not result["same_device"]:  # another device: worse, not a regression
                note = "[red]worse on B"
            if row.get("error_band"):
                note = f"{note} (band ±{row['error_band']:.0%})".strip()
            table.add_row(row["metric"], _fmt(row["a"]), _fmt(row["b"]), row["source_a"] or "", row["source_b"] or "",
                          row["better"], note)
        console.print(table)
        console.print(f"A: {result['sources']['a']}; B: {result['sources']['b']}")
        console.print(f"{len(result['regressions'])} regression(s)" if result["same_device"] else
                      f"{len(result['regressions'])} figure(s) worse on B ({result['targets'][1]}) than on A "
                      f"({result['targets'][0]})")
    if result["refused"]:
        return 2
    return 1 if result["regressions"] else 0


def _fmt(value):
    return "n/a" if value is None else (f"{value:.4g}" if isinstance(value, float) else str(value))


def _break_even(one_time, gpu_cost, trn_cost, tokens_per_month, currency):
    """{months, saving_per_month, line}: months for the running saving to pay the one-time cost."""
    if gpu_cost is None or trn_cost is None:
        missing = "the GPU run's" if gpu_cost is None else "Trainium's predicted"
        return {"months": None, "line": f"break-even: not known ({missing} cost per 1M tokens is missing; "
                                        "see the price notes)"}
    if not tokens_per_month:
        return {"months": None, "line": "break-even: give the service's volume as [cost] tokens_per_month "
                                        "(output tokens a month) to count the months"}
    saving = (gpu_cost - trn_cost) * tokens_per_month / 1e6
    if saving <= 0:
        return {"months": None, "saving_per_month": saving,
                "line": f"break-even: never at this load (Trainium costs {trn_cost - gpu_cost:.4g} {currency} more per "
                        "1M tokens)"}
    months = one_time / saving
    return {"months": months, "saving_per_month": saving,
            "line": f"break-even: {months:.3g} months ({one_time:.6g} {currency} one-time / {saving:.4g} {currency} "
                    f"saved a month at {tokens_per_month:.4g} tokens a month)"}


def decision(a, b):
    """The GPU-to-Trainium decision when one run measured a real device and the other predicted
    Trainium on the simulated one (None otherwise): at the workload's load, the measured figures
    beside the predicted ones (error band stated), per platform and TP degree from the dry run,
    the one-time cost apart from the running cost, and the months to break even."""
    by_source = {figures.source(report): report for report in (a, b)}
    if set(by_source) != {figures.MEASURED, figures.PREDICTED}:
        return None
    gpu, trn = by_source[figures.MEASURED], by_source[figures.PREDICTED]
    error = figures.calibration_error(trn)
    conditions = trn.get("conditions") or {}
    inputs, serve = conditions.get("inputs") or {}, conditions.get("serve") or {}
    currency = _get(trn["sections"], ("cost", "currency")) or _get(gpu["sections"], ("cost", "currency"))
    gpu_levels = {level["concurrency"]: level for level in figures.speed_levels(gpu)}
    trn_levels = {level["concurrency"]: level for level in figures.speed_levels(trn)}
    levels = []
    for c in sorted(set(gpu_levels) | set(trn_levels)):
        pair = {}
        for side, level in (("measured", gpu_levels.get(c)), ("predicted", trn_levels.get(c))):
            pair[side] = None if level is None else {
                "tokens_per_s": level["tokens_per_s"], "p50_ms": level["latency_ms"].get("p50"),
                "p95_ms": level["latency_ms"].get("p95"), "ttft_p95_ms": level["ttft_ms"].get("p95")}
        levels.append({"concurrency": c, **pair})
    gpu_cost, _ = figures.cost_per_million(gpu)
    trn_cost, _ = figures.cost_per_million(trn)
    one_time = _get(trn["sections"], ("cost", "one_time")) or {}
    engineering = one_time.get("engineering") or 0.0
    tokens_per_month = _get(trn["sections"], ("cost", "tokens_per_month")) or \
        _get(gpu["sections"], ("cost", "tokens_per_month"))
    prediction = trn["sections"].get("prediction") or {}
    if prediction.get("task") == "train":  # a training step's prediction: not a serving decision's rows
        prediction = {}
    # the dry run's rows are one request at batch 1: set beside the GPU's cost at concurrency 1
    gpu_price = _get(gpu["sections"], ("cost", "running", "target", "price_per_hour"))
    first = gpu_levels.get(1)
    gpu_cost_one = (gpu_price / 3600 / first["tokens_per_s"] * 1e6
                    if gpu_price is not None and first and first.get("tokens_per_s") else None)
    served = []  # the dry run's continuous batching at the workload's concurrency, beside the GPU's same level
    for row in prediction.get("rows") or []:
        for level in row.get("serving_levels") or []:
            measured = gpu_levels.get(level["concurrency"])
            gpu_cost_here = (gpu_price / 3600 / measured["tokens_per_s"] * 1e6
                             if gpu_price is not None and measured and measured.get("tokens_per_s") else None)
            cost = level.get("per_million_output_tokens")
            served.append({"platform": row["platform"], "tp": row["tp"], "concurrency": level["concurrency"],
                           "tokens_per_s": level["tokens_per_s"], "ttft_p95_ms": level["ttft_ms"]["p95"],
                           "latency_p95_ms": level["latency_ms"]["p95"], "per_million_tokens": cost,
                           "measured_tokens_per_s": measured["tokens_per_s"] if measured else None,
                           "measured_per_million_tokens": gpu_cost_here,
                           "break_even": _break_even(engineering, gpu_cost_here, cost, tokens_per_month, currency)})
    platforms = []
    for row in prediction.get("rows") or []:
        cost = row.get("per_million_output_tokens")
        platforms.append({"platform": row["platform"], "tp": row["tp"], "lnc": row["lnc"],
                          "tokens_per_s": row.get("request_tokens_per_s"), "latency_ms": row.get("request_latency_ms"),
                          "ttft_ms": row.get("ttft_ms"), "per_million_tokens": cost, "price_key": row.get("price_key"),
                          "break_even": _break_even(engineering, gpu_cost_one, cost, tokens_per_month, currency)})
    missing = {**(_get(gpu["sections"], ("cost", "missing_price_notes")) or {})}
    notes = [f"GPU side: {note}" for note in missing.values()]
    if trn_cost is None:
        platform = _get(trn["sections"], ("speed", "target", "platform")) or "trn2"
        notes.append(f"Trainium side: no predicted cost: add price_per_hour.{platform} (or .neuron) = <price of one "
                     "instance-hour> to [cost]")
    return {"measured": {"report_target": gpu.get("target"), "device": _get(gpu["sections"], ("lock", "devices",
                                                                                                "target")),
                         "label": figures.label(gpu)},
            "predicted": {"report_target": trn.get("target"), "label": figures.label(trn),
                          "platform": _get(trn["sections"], ("speed", "target", "platform")),
                          "calibration_error": error},
            "load": {"prompt_lengths": inputs.get("prompt_lengths"), "prompts": len(inputs.get("prompts") or []),
                     "batch_sizes": inputs.get("batch_sizes"), "max_new_tokens": inputs.get("max_new_tokens"),
                     "concurrency": serve.get("concurrency"), "requests": serve.get("requests")},
            "levels": levels, "currency": currency,
            "cost_per_million": {"measured": gpu_cost, "predicted": trn_cost,
                                 "predicted_range": None if trn_cost is None or error is None or error >= 1 else
                                 [trn_cost / (1 + error), trn_cost / (1 - error)]},
            "platforms": platforms, "platforms_label": prediction.get("label"), "platforms_loop": prediction.get("loop"),
            "levels_loop": _get(trn["sections"], ("speed", "target", "loop")),
            "measured_cost_at_concurrency_1": gpu_cost_one, "served": served,
            "one_time": {"engineering": engineering, "engineering_hours": one_time.get("engineering_hours")},
            "tokens_per_month": tokens_per_month,
            "break_even": _break_even(engineering, gpu_cost, trn_cost, tokens_per_month, currency), "notes": notes}


def _print_decision(console, result):
    d = result["decision"]
    if not d:
        return
    band = "unknown" if d["predicted"]["calibration_error"] is None else f"±{d['predicted']['calibration_error']:.0%}"
    load = d["load"]
    console.print(f"[bold]Decision[/bold]: {d['measured']['report_target']} measured ({d['measured']['device']}) "
                  f"against Trainium {d['predicted']['platform']} predicted ({d['predicted']['label']})")
    console.print(f"  at the workload's load: prompt lengths {load['prompt_lengths']}"
                  + (f" and {load['prompts']} text prompt(s)" if load["prompts"] else "")
                  + f", batch sizes {load['batch_sizes']}, {load['max_new_tokens']} new tokens, "
                    f"concurrency {load['concurrency']} ({load['requests']} requests each)")
    table = Table(title=f"{_kind(d['measured']['report_target'])} measured vs Trainium predicted (error band {band})")
    for column in ("concurrency", "tokens/s measured", "tokens/s predicted", "P50 ms measured", "P50 ms predicted",
                   "P95 ms measured", "P95 ms predicted", "TTFT P95 ms measured", "TTFT P95 ms predicted"):
        table.add_column(column)
    for level in d["levels"]:
        m, p = level["measured"] or {}, level["predicted"] or {}
        table.add_row(str(level["concurrency"]), *(_fmt(side.get(key)) for key in
                                                   ("tokens_per_s", "p50_ms", "p95_ms", "ttft_p95_ms")
                                                   for side in (m, p)))
    console.print(table)
    cost = d["cost_per_million"]
    spread = cost["predicted_range"]
    console.print(f"  running cost per 1M tokens: {_fmt(cost['measured'])} {d['currency']} measured, "
                  f"{_fmt(cost['predicted'])} {d['currency']} predicted"
                  + (f" ({_fmt(spread[0])} to {_fmt(spread[1])} within the error band)" if spread else ""))
    if d["platforms"]:
        table = Table(title=f"Trainium per platform and TP degree, one request at batch 1 ({d['platforms_label']}); "
                            f"break-even against the measured cost at concurrency 1 "
                            f"({_fmt(d['measured_cost_at_concurrency_1'])} {d['currency']} per 1M tokens)")
        for column in ("platform", "TP", "LNC", "tokens/s", "latency ms", "TTFT ms", f"{d['currency']} per 1M tokens",
                       "break-even"):
            table.add_column(column)
        for row in d["platforms"]:
            months = row["break_even"]["months"]
            table.add_row(row["platform"], str(row["tp"]), str(row["lnc"]), _fmt(row["tokens_per_s"]),
                          _fmt(row["latency_ms"]), _fmt(row["ttft_ms"]), _fmt(row["per_million_tokens"]),
                          "n/a" if months is None else f"{months:.3g} months")
        console.print(table)
    if d.get("served"):
        table = Table(title="Trainium served with continuous batching at the workload's concurrency (dry run) against "
                            "the measured run at the same concurrency")
        for column in ("platform", "TP", "concurrency", "tokens/s measured", "tokens/s predicted", "TTFT P95 ms",
                       "latency P95 ms", f"{d['currency']}/1M measured", f"{d['currency']}/1M predicted", "break-even"):
            table.add_column(column)
        for row in d["served"]:
            months = row["break_even"]["months"]
            table.add_row(row["platform"], str(row["tp"]), str(row["concurrency"]), _fmt(row["measured_tokens_per_s"]),
                          _fmt(row["tokens_per_s"]), _fmt(row["ttft_p95_ms"]), _fmt(row["latency_p95_ms"]),
                          _fmt(row["measured_per_million_tokens"]), _fmt(row["per_million_tokens"]),
                          "n/a" if months is None else f"{months:.3g} months")
        console.print(table)
    for what, loop in (("the concurrency levels", d.get("levels_loop")), ("the per-platform rows", d.get("platforms_loop"))):
        if loop:
            console.print(f"  loop of {what}: {escape(loop)}")
    console.print(f"  one-time cost: {_fmt(d['one_time']['engineering'])} {d['currency']} "
                  f"({_fmt(d['one_time']['engineering_hours'])} engineering hours), apart from the running cost")
    console.print(f"  {d['break_even']['line']}")
    for note in d["notes"]:
        console.print(f"  [yellow]{escape(note)}[/yellow]")
