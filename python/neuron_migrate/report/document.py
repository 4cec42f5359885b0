"""The report as a list of blocks built from report.json alone, so that Markdown and HTML
show the same content: ("h1"|"h2"|"h3", text), ("p", text), ("table", headers, rows),
("list", items), ("code", text), ("plot", name, caption)."""
from .format import count, fraction, gib, mib, ms, number, size


def _get(section, *path, default=None):
    for key in path:
        if not isinstance(section, dict):
            return default
        section = section.get(key)
    return default if section is None else section


def build(report):
    s = report["sections"]
    timing = _get(s, "speed", "target", "timing") or _get(s, "training", "timing") or _get(s, "compiles", "timing")
    blocks = [("h1", f"neuron-migrate report: {report.get('workload')}"),
              ("p", f"Evaluated on **{report.get('target')}** against the baseline **{report.get('baseline')}**; "
                    f"task: {report.get('task')}; status: **{report.get('status')}**; started {report.get('started')}, "
                    f"finished {report.get('finished')}; conditions digest `{report.get('conditions_digest')}`.")]
    if report.get("target_simulated"):
        predicted = _get(s, "speed", "target", "predicted_label") or _get(s, "prediction", "label")
        blocks.append(("p", "**Timings are host timings on the simulated Neuron device, not a Trainium prediction.** "
                            + (f"Predicted Trainium figures are beside them, each labelled {predicted}. "
                               if predicted else "")
                            + "The roofline section gives a labelled upper bound for real hardware."))
    from .terminal import summary_lines
    blocks += [("h2", "At a glance"), ("code-plain", "\n".join(summary_lines(report)))]
    blocks += _will_it_run(s) + _is_it_right(s) + _compiles(s, timing) + _speed(s, report) + _fit(s, report)
    blocks += _cost(s) + _lock(s) + _licence(s) + _findings(report) + _verdict(s)
    return blocks


def _will_it_run(s):
    census = s.get("census") or {}
    blocks = [("h2", "Will it run?")]
    if census:
        blocks.append(("p", f"{census.get('op_calls')} op calls of {census.get('distinct_ops')} distinct ATen ops on "
                            f"{census.get('device')} ({census.get('covers')})."))
        fallback = census.get("fallback_detail") or []
        source = census.get("fallback_source", "measured" if census.get("fallback_tracking") else None)
        if source:
            how = ("measured: torch_neuronx.get_fallback_ops()" if source == "measured" else
                   census.get("fallback_source_note", "predicted from the op census"))
            blocks.append(("p", f"**{len(fallback)} op(s) TorchNeuron runs on the CPU** ({how}; "
                                f"each is a host round trip on Trainium):"))
            if fallback:
                blocks.append(("table", ["op", "calls", "dtypes and shapes (sample)"],
                               [[f["op"], number(f["count"]), "; ".join(f["signatures"])] for f in fallback]))
            agrees = census.get("fallback_prediction_agrees")
            if agrees is not None:
                blocks.append(("p", "The prediction from the op census (what a run on another device reports) "
                                    + ("names the same ops." if agrees else
                                       f"differs: it names {', '.join(census.get('fallback_ops_predicted') or []) or 'none'}.")))
        else:
            blocks.append(("p", "CPU fallback is not known for this report (made before predictions from the census)."))
        wide = census.get("wide_values") or []
        blocks.append(("p", f"**64-bit values that 32-bit computation would not keep** (checked on "
                            f"{census.get('wide_values_checked_on')}, which computes them exactly): {len(wide)}"))
        if wide:
            blocks.append(("table", ["op", "in its", "dtype", "shape", "sample value", "problem"],
                           [[w["op"], w.get("where", "output"), w["dtype"], str(w["shape"]), str(w["sample_value"]),
                             w["problem"]] for w in wide]))
        top = sorted(census.get("ops") or [], key=lambda o: -o["count"])[:12]
        if top:
            blocks.append(("table", ["op (most called)", "calls", "distinct signatures", "sample signature"],
                           [[o["op"], str(o["count"]), str(o["distinct_signatures"]), next(iter(o["signatures"]), "")]
                            for o in top]))
    scan = s.get("cuda_scan") or {}
    findings = scan.get("findings") or []
    blocks.append(("p", f"**CUDA-only code** in {len(scan.get('scripts') or [])} script(s): {len(findings)} finding(s)."))
    if findings:
        blocks.append(("table", ["file:line", "code", "what", "suggested change"],
                       [[f"{f['file'].rsplit('/', 1)[-1]}:{f['line']}", f["code"], f["message"], f["suggestion"]]
                        for f in findings]))
    return blocks


def _is_it_right(s):
    quality, trainingsec = s.get("quality") or {}, s.get("training") or {}
    blocks = [("h2", "Is the output still right?")]
    if quality.get("requests"):
        blocks.append(("p", f"Logits max abs error: **{number(quality.get('logits_max_abs_error'))}**; greedy-token "
                            f"agreement: **{number(quality.get('greedy_agreement'))}**."))
        blocks.append(("table", ["request", "logits max abs err", "mean abs err", "greedy agreement",
                                 "identical rows", "first diverging token per row"],
                       [[r["label"], number(r["logits_max_abs_error"]), number(r["logits_mean_abs_error"]),
                         number(r["greedy_agreement"]), f"{r['identical_rows']}/{r['rows']}",
                         ", ".join("none" if d is None else str(d) for d in r["first_divergence"])]
                        for r in quality["requests"]]))
    if trainingsec.get("target"):
        blocks.append(("p", f"Training loss max abs difference over {len(trainingsec['target'].get('loss', []))} steps: "
                            f"**{number(trainingsec.get('loss_max_abs_diff'))}**; gradient-norm max relative difference: "
                            f"{number(trainingsec.get('grad_norm_max_rel_diff'))}; final loss "
                            f"{number(_get(trainingsec, 'final_loss', 'target'))} (target) vs "
                            f"{number(_get(trainingsec, 'final_loss', 'baseline'))} (baseline)."))
        blocks.append(("plot", "loss_curves", "Training loss per step on both devices, and after the restart"))
    if len(blocks) == 1:
        blocks.append(("p", "Not measured (see findings)."))
    return blocks


def _compiles(s, timing):
    c = s.get("compiles") or {}
    blocks = [("h2", "How many compiles?")]
    if c.get("skipped") or c.get("error"):
        return blocks + [("p", c.get("skipped") or c.get("error"))]
    if not c.get("available", True) or "graphs_compiled" not in c:
        blocks.append(("p", f"**Finding:** {c.get('finding', 'not measured')}"
                            + (f" ({c['problem']})" if c.get("problem") else "")))
    else:
        blocks.append(("p", f"Backend `{c['backend']}`, {c.get('compiled', 'inference forward')}, static shapes: "
                            f"**{c['graphs_compiled']} graphs compiled, "
                            f"{c['recompiles']} recompiles**, {c['graph_breaks']} graph breaks over "
                            f"{c['buckets']['distinct_shapes']} distinct input shapes. Warm-up: cold "
                            f"{number(c['warmup_cold_s'])} s, warm (after torch.compiler.reset(); disk cache "
                            f"{c['cache_dir']}) {number(c['warmup_warm_s'])} s, steady {number(c['steady_s'])} s "
                            f"({timing})."))
        if c.get("requests_failed"):
            blocks.append(("p", f"**{len(c['requests_failed'])} shape(s) failed under torch.compile** "
                                f"({', '.join(c['requests_failed'])}); tracebacks under Findings."))
        reasons = c.get("recompile_reasons") or []
        if reasons:
            blocks.append(("list", [f"[{r['pass']}, {r['request']}] " + r["reason"].replace("\n", " ")
                                    for r in reasons[:12]]))
        blocks.append(("plot", "compiles_over_run", "Graphs compiled over the compile section"))
    plan = c.get("buckets")
    if plan:
        blocks.append(("p", f"Padding buckets for the lengths {plan['lengths']} at batch sizes {plan['batch_sizes']} "
                            f"({plan['distinct_shapes']} graphs without padding):"))
        blocks.append(("table", ["plan", "bucket lengths", "graphs", "padded tokens", "padding overhead"],
                       [[p["plan"], str(p["buckets"]), str(p["graphs"]), str(p["padded_tokens"]),
                         f"{p['padded_fraction']:.1%}"] for p in plan["plans"]]))
    return blocks


def _speed(s, report):
    speed, t = s.get("speed") or {}, s.get("training") or {}
    blocks = [("h2", "How fast?")]
    rows = []
    for role in ("target", "baseline"):
        for level in _get(speed, role, "levels", default=[]):
            host = role == "target" and report.get("target_simulated")  # Note [Deciding figures]
            rows.append([f"{report.get(role)} ({role}{', simulator host time' if host else ', measured'})",
                         str(level["concurrency"]), f"{level['tokens_per_s']:.1f}",
                         ms(level["latency_ms"]["p50"]), ms(level["latency_ms"]["p95"]), ms(level["latency_ms"]["p99"]),
                         ms(level["ttft_ms"]["p50"]), ms(level["ttft_ms"]["p95"]), f"{level['error_rate']:.0%}"])
    if rows:
        blocks.append(("p", f"Timings: {_get(speed, 'target', 'timing')}."))
        blocks.append(("table", ["device", "concurrency", "tokens/s", "P50", "P95", "P99", "TTFT P50", "TTFT P95",
                                 "errors"], rows))
        blocks += _predicted_speed(speed.get("target") or {}, report)
        blocks.append(("plot", "latency_distribution", "Latency per request"))
        blocks.append(("plot", "throughput_vs_concurrency", "Steady throughput against concurrency"))
        blocks.append(("plot", "predicted_vs_host", "Predicted Trainium latency against host latency per request"))
    blocks += _dry_run(s.get("prediction") or {})
    if t.get("time_per_step_s") is not None:
        restart = t.get("restart") or {}
        blocks.append(("p", f"Training: {number(t['time_per_step_s'])} s per step on {report.get('target')} "
                            f"({number(t.get('baseline_time_per_step_s'))} s on {report.get('baseline')}); first step "
                            f"{number(t.get('first_step_s'))} s; time to the loss target: "
                            f"{number(t.get('time_to_loss_target_s'))} s ({t.get('timing')})."))
        if restart:
            blocks.append(("p", f"Restart from a checkpoint at step {restart['checkpoint_at']} "
                                f"({size(restart.get('checkpoint_bytes'))}; {restart['how']}): losses after "
                                f"the restart differ from the uninterrupted run by at most "
                                f"**{number(restart.get('max_abs_diff'))}**."))
    if len(blocks) == 1:
        blocks.append(("p", "Not measured (see findings)."))
    return blocks


def _predicted_speed(target, report):
    """The target's predicted Trainium figures per concurrency level (speed.py), when it has them."""
    levels = [level for level in target.get("levels") or [] if level.get("predicted")]
    if not levels:
        return []
    rows = [[f"{target.get('platform')} ({report.get('target')}, target)", str(level["concurrency"]),
             number(p["tokens_per_s"]), ms(p["latency_ms"]["p50"]), ms(p["latency_ms"]["p95"]),
             ms(p["latency_ms"]["p99"]), ms(p["ttft_ms"]["p50"]), ms(p["ttft_ms"]["p95"]),
             ms(p["per_token_ms"]["p50"]), fraction(p.get("mfu")), fraction(p.get("mbu"))]
            for level in levels for p in [level["predicted"]]]
    return [("p", f"**{target.get('predicted_label')}** on {target.get('platform')} (LNC {target.get('lnc')}), the "
                  f"same requests: {target.get('predicted_note')}."
                  + (f" Loop: {target['loop']}." if target.get("loop") else "")),
            ("table", ["device", "concurrency", "tokens/s", "P50", "P95", "P99", "TTFT P50", "TTFT P95",
                       "per token P50", "MFU", "MBU"], rows)]


def _dry_run(prediction):
    """The dry run's table at the TP degrees the workload asked for (predict.py)."""
    if not prediction.get("rows") and not prediction.get("refused"):
        return [("p", f"Dry run: {prediction['skipped']}.")] if prediction.get("skipped") else []
    if prediction.get("task") == "train":
        headers = ["platform", "LNC", "DP", "TP", "instances", "step ms", "collectives ms", "tokens/s", "MFU",
                   "memory per core GiB", "hours for the run", f"{prediction.get('currency') or 'cost'} for the run"]
        rows = [[r["platform"], str(r["logical_nc_config"]), str(r["dp"]), str(r["tp"]), str(r["instances"]),
                 number(r["step_ms"]), number(r["collectives_ms"]), number(r["tokens_per_s"]), f"{r['mfu']:.1%}",
                 number(r["memory_gib"]["total"]), number(r["hours_to_budget"]) if r["hours_to_budget"] else "-",
                 number(r["cost_to_budget"]) if r["cost_to_budget"] else "-"] for r in prediction.get("rows") or []]
        return [("h3", "Predicted training step (dry run)"), ("p", f"**{prediction['label']}**"),
                ("table", headers, rows),
                ("list", [prediction["source"]] + [r["modelled"] for r in prediction.get("rows") or []][:1]
                 + [f"{r['platform']} TP {r['tp']}: {r['error']}" for r in prediction["refused"]])]
    from .terminal import prediction_notes, prediction_rows, prediction_title
    headers, rows = prediction_rows(prediction)
    blocks = [("h3", "Predicted at other TP degrees (dry run)"), ("p", f"**{prediction_title(prediction)}**"),
              ("table", headers, rows), ("list", prediction_notes(prediction)
                                        + [f"refused: {r['platform']} TP {r['tp']}: {r['error']}"
                                           for r in prediction["refused"]])]
    served = [(row, level) for row in prediction.get("rows") or [] for level in row.get("serving_levels") or []]
    if served:
        from .terminal import serving_requests
        blocks += [("p", "Served at the workload's concurrency with continuous batching (the dry run's Note "
                         f"[Serving under load]: concurrent requests share decode steps; {serving_requests(prediction)}):"),
                   ("table", ["platform", "TP", "concurrency", "tokens/s", "TTFT P95", "TPOT P50", "latency P95",
                              f"{prediction.get('currency') or 'cost'}/1M tokens"],
                    [[row["platform"], str(row["tp"]), str(level["concurrency"]), number(level["tokens_per_s"]),
                      ms(level["ttft_ms"]["p95"]), ms(level["tpot_ms"]["p50"]), ms(level["latency_ms"]["p95"]),
                      number(level.get("per_million_output_tokens"))] for row, level in served])]
    return blocks


def _fit(s, report):
    m, f, r = s.get("memory") or {}, s.get("fit") or {}, s.get("roofline") or {}
    blocks = [("h2", "Does it fit?")]
    cores = m.get("target_peak_per_core") or []
    if cores:
        blocks.append(("table", ["core", "peak allocated", "HBM of the core", "headroom"],
                       [[f"{report.get('target')}:{c['core']}", mib(c["peak_bytes"]), gib(c["total_bytes"]),
                         f"{1 - c['peak_bytes'] / c['total_bytes']:.1%}" if c.get("total_bytes") else "n/a"]
                        for c in cores]))
    if m:
        copies = m.get("host_device_bytes") or {}
        blocks.append(("p", f"Host: peak RSS {mib(m.get('host_peak_rss_bytes'))}, CPU time "
                            f"{number(m.get('host_cpu_seconds'))} s; compile cache {m.get('compile_cache_dir')}: "
                            f"{mib(m['compile_cache_bytes']) if m.get('compile_cache_bytes') is not None else 'absent'}; "
                            f"copied between host and device during the census pass: "
                            + (", ".join(f"{k} {size(v)}" for k, v in copies.items()) or "nothing")
                            + f"; between ranks: {m.get('between_ranks_note')}."))
        blocks.append(("plot", "memory_over_time", "Host RSS and device memory over the run"))
    if f.get("rows"):
        blocks.append(("p", f"Without loading weights (meta device): {count(f['parameters'])} parameters "
                            f"({gib(f['parameter_bytes'])} in {f['dtype']}), KV cache for batch {f['batch_per_core']} x "
                            f"{f['max_seq_len']} tokens {mib(f['cache_bytes_per_core_at_tp1'])} ({f['cache_method']}); "
                            f"{f['headroom_reserved']:.0%} of each core's HBM kept free."))
        blocks.append(("table", ["platform", "LNC", "TP", "HBM/core", "params/core", "KV/core", "total/core", "fits"],
                       [[x["platform"], str(x["lnc"]), str(x["tp"]), gib(x["hbm_per_core_bytes"]),
                         gib(x["parameter_bytes_per_core"]), mib(x["cache_bytes_per_core"]),
                         gib(x["total_bytes_per_core"]), "yes" if x["fits"] else "no " + "; ".join(x["problems"])]
                        for x in f["rows"]]))
        blocks.append(("list", [f"{k}: smallest fitting TP = {v['tp']} ({v['among']})"
                                for k, v in f["smallest_fitting_tp"].items()]
                       + [f"not offered: {item}" for item in f.get("not_offered") or []]))
    if r.get("rows"):
        blocks.append(("p", f"**Roofline bound (not a measurement):** {count(r['flops_per_token'])} FLOPs and "
                            f"{mib(r['bytes_per_token_batch1'])} moved per generated token at batch 1, context "
                            f"{r['context_len']} tokens; {r['label']}; figures from {r['source']}."))
        blocks.append(("table", ["platform", "batch", "bound tokens/s", "limited by"],
                       [[x["platform"], str(x["batch"]), f"{x['bound_tokens_per_s']:,.0f}", x["limited_by"]]
                        for x in r["rows"]]))
    return blocks


def _cost(s):
    c = s.get("cost") or {}
    blocks = [("h2", "What does it cost?")]
    running = c.get("running") or {}
    if running:
        blocks.append(("table", ["role", "device", "price/hour", "tokens/s used", "per 1M tokens", "per training run"],
                       [[role, e["device"], number(e["price_per_hour"]),
                         number(e.get("tokens_per_s")) if "host" not in e else
                         f"{number(e['host']['tokens_per_s'])} ({e['host']['label']})",
                         number(e.get("per_million_tokens")), number(e.get("per_training_run"))]
                        for role, e in running.items()]))
    predicted = (running.get("target") or {}).get("predicted")
    if predicted:
        blocks.append(("p", f"**{predicted['label']}**: {number(predicted.get('per_million_tokens'))} "
                            f"{c.get('currency')} per 1M tokens at {number(predicted['tokens_per_s'])} predicted "
                            f"tokens/s on {predicted['platform']} (concurrency {predicted['at_concurrency']}, one "
                            f"logical core); {predicted['assumption']}."))
    if c:
        one = c.get("one_time") or {}
        blocks.append(("p", f"Currency {c.get('currency')}; {c.get('note')}. One-time: engineering "
                            f"{number(one.get('engineering'))} ({number(one.get('engineering_hours'))} h), compile "
                            f"warm-up {number(one.get('compile_warmup'))}. No price given for: "
                            f"{', '.join(c.get('prices_missing_for') or []) or 'none'}."))
        for role, note in (c.get("missing_price_notes") or {}).items():
            blocks.append(("p", f"{role}: {note}."))
    return blocks


def _lock(s):
    lock = s.get("lock") or {}
    blocks = [("h2", "Can we go back?")]
    if lock:
        versions = lock.get("versions") or {}
        blocks.append(("table", ["component", "version"], [[k, str(v)] for k, v in versions.items()]))
        files = (lock.get("model") or {}).get("files") or {}
        blocks.append(("table", ["model file", "bytes", "sha256"],
                       [[name, str(v["bytes"]), v["sha256"][:16] + "..."] for name, v in list(files.items())[:12]]))
        env = lock.get("environment") or {}
        blocks.append(("p", "Environment: " + (", ".join(f"`{k}={v}`" for k, v in env.items()) or "none set") +
                       f". Workload file sha256 `{(lock.get('workload') or {}).get('sha256', '')[:16]}...`; inputs "
                       "saved in inputs.json. `neuron-migrate compare A B` lists what changed between two runs."))
    return blocks


def _licence(s):
    lic = s.get("licence") or {}
    blocks = [("h2", "May we use it?")]
    if lic:
        rows = [[what, str((lic.get(what) or {}).get("licence")), str((lic.get(what) or {}).get("source")),
                 (lic.get(what) or {}).get("status", "")] for what in ("model", "dataset") if lic.get(what)]
        blocks.append(("table", ["what", "licence", "found in", "status"], rows))
        blocks.append(("p", ("Flags: " + "; ".join(lic["flags"])) if lic.get("flags") else "No licence flags."
                       + f" ({lic.get('note')})"))
    return blocks


def _findings(report):
    findings = report.get("findings") or []
    blocks = [("h2", f"Findings ({len(findings)})")]
    for f in findings:
        blocks.append(("p", f"**{f['severity']}** [{f['section']}] {f['message']}"))
        if f.get("traceback"):
            blocks.append(("code", f["traceback"]))
    return blocks


def _verdict(s):
    verdicts = s.get("verdict") or []
    blocks = [("h2", "Verdict")]
    if not verdicts:
        return blocks + [("p", "The workload sets no stop conditions.")]
    blocks.append(("table", ["condition", "verdict", "value", "is", "limit"],
                   [[v["condition"], v["verdict"].upper(), number(v["measured"]), v.get("source", "measured"),
                     f"{v['comparison']} {number(v['limit'])}"] for v in verdicts]))
    labels = sorted({v["label"] for v in verdicts if v.get("label")})
    if labels:
        blocks.append(("p", "Predicted values are Trainium's from the device clock (" + "; ".join(labels) +
                            "); the simulator's host time decides no gate."))
    for v in verdicts:
        if v.get("note"):
            blocks.append(("p", f"{v['condition']}: {v['note']}."))
    return blocks
