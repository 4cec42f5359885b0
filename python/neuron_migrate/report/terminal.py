"""Rich renderables for the terminal: the fit table and the run summary."""
from rich.table import Table

from .format import count, fixed, fraction, gib, number


def fit_table(result):
    table = Table(title=f"{result['architecture']} ({count(result['parameters'])} parameters, {result['dtype']}): "
                        f"batch {result['batch_per_core']} x {result['max_seq_len']} tokens per core, "
                        f"{result['headroom_reserved']:.0%} of HBM kept free")
    for column in ("platform", "LNC", "TP", "HBM/core", "params/core", "KV cache/core", "total/core", "fits"):
        table.add_column(column, justify="right" if column not in ("platform", "fits") else "left")
    for row in result["rows"]:
        verdict = "[green]yes" if row["fits"] else "[red]no" + (f" ({'; '.join(row['problems'])})" if row["problems"] else "")
        table.add_row(row["platform"], str(row["lnc"]), str(row["tp"]), gib(row["hbm_per_core_bytes"]),
                      gib(row["parameter_bytes_per_core"]), gib(row["cache_bytes_per_core"]),
                      gib(row["total_bytes_per_core"]), verdict)
    smallest = "; ".join(f"{key}: TP={value['tp'] if value['tp'] else 'none'}"
                         + ("" if value["among"] == "the listed degrees" else f" ({value['among']})")
                         for key, value in result["smallest_fitting_tp"].items())
    table.caption = f"smallest fitting TP degree: {smallest}\nKV cache: {result['cache_method']}" + (
        f"\nnot offered: {', '.join(result['not_offered'])}" if result.get("not_offered") else "")
    return table


def prediction_rows(result):
    """The prediction table's header and rows as text (shared with the report's table)."""
    currency = result.get("currency")
    headers = ["platform", "LNC", "TP", "TTFT ms", "per token ms", "tokens/s", "MFU prefill", "MBU decode",
               f"{currency or 'cost'}/1M output tokens"]
    rows = [[r["platform"], str(r["lnc"]), str(r["tp"]), fixed(r["ttft_ms"], 1), fixed(r["per_token_ms"], 2),
             number(r["tokens_per_s"], 4), fraction(r.get("mfu_prefill")),
             fraction(r.get("mbu_decode")), number(r.get("per_million_output_tokens"))] for r in result["rows"]]
    return headers, rows


def prediction_title(result):
    return (f"{result['label']}: {result['config'].rstrip('/').rsplit('/', 1)[-1]}, {result['mode']}, batch "
            f"{result['batch']}, {result['input_tokens']} tokens in / {result['output_tokens']} out")


def prediction_notes(result):
    """The lines under the prediction table: where the figures come from and the cost rule."""
    notes = [f"from the {result['source']}"] + ([f"loop: {result['loop']}"] if result.get("loop") else [])
    notes += list(result.get("cost_assumptions", {}).values()) or [
        "no cost: no price_per_hour for these platforms (or neuron): give a workload file with [cost] prices"]
    return notes


def prediction_table(result):
    """The table, then its notes (plain lines: they wrap on a narrow terminal, a caption is cut)."""
    from rich import box
    from rich.console import Group
    from rich.text import Text
    headers, rows = prediction_rows(result)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    for index, column in enumerate(headers):  # cells keep their width; headers wrap between words
        widest = max([len(row[index]) for row in rows] + [len(word) for word in column.split()])
        table.add_column(column, justify="left" if index == 0 else "right", min_width=widest, overflow="fold")
    for row in rows:
        table.add_row(*row)
    return Group(Text(prediction_title(result), style="bold"), table,
                 *(Text(note) for note in prediction_notes(result)))


def training_table(result):
    """A training step per platform and TP degree (the dry run's), with its memory per core."""
    currency = result.get("currency") or "cost"
    layout = result.get("layout") or {}
    pipeline = (f" x PP {layout['pp']} ({layout.get('microbatches') or (result['rows'] or [{}])[0].get('microbatches')}"
                " microbatches, 1F1B)" if (layout.get("pp") or 1) > 1 else "")
    table = Table(title=f"{result['label']}: a training step, DP {result['dp']} ({layout.get('sharding', 'fsdp2')})"
                        f"{pipeline} x TP{' with sequence parallelism' if layout.get('sequence_parallel') else ''}, "
                        f"{result['local_batch']} x {result['seq_len']} tokens per DP rank"
                        + (", activation checkpointing" if result["activation_checkpointing"] else ""))
    for column in ("platform", "LNC", "TP", "instances", "step ms", "collectives ms", "tokens/s", "MFU",
                   "memory/core GiB", "hours to budget", f"{currency} to budget"):
        table.add_column(column, justify="left" if column == "platform" else "right")
    for row in result["rows"]:
        table.add_row(row["platform"], str(row["logical_nc_config"]), str(row["tp"]), str(row["instances"]),
                      number(row["step_ms"], 4), number(row["collectives_ms"], 3), number(row["tokens_per_s"], 4),
                      f"{row['mfu']:.1%}", number(row["memory_gib"]["total"], 3),
                      number(row["hours_to_budget"], 3) if row["hours_to_budget"] else "-",
                      number(row["cost_to_budget"], 3) if row["cost_to_budget"] else "-")
    from rich.console import Group
    from rich.text import Text
    return Group(table, Text(f"from the {result['source']}"), Text(result["rows"][0]["modelled"] if result["rows"] else ""))


def serving_requests(result):
    """What the served requests are: their lengths, and how their prompts are prefilled."""
    lengths = result.get("serving_lengths")
    if lengths:
        inputs = sorted({pair[0] for pair in lengths})
        what = (f"the workload's {len(lengths)} prompts in turn ({inputs[0]} to {inputs[-1]} tokens in, "
                f"{result['output_tokens']} out)")
    else:
        what = f"{result['input_tokens']} tokens in / {result['output_tokens']} out"
    chunk = result.get("chunked_prefill")
    return what + (f", prompts prefilled in chunks of a {chunk}-token step budget" if chunk else
                   ", each prompt prefilled whole before the next step")


def serving_table(result):
    """Requests served at each concurrency level, per platform and TP degree (continuous batching)."""
    currency = result.get("currency")
    table = Table(title=f"{result['label']}: served with continuous batching (closed loop at each concurrency, "
                        f"open loop at each rate, {serving_requests(result)}, serving: {result['serving']})")
    for column in ("platform", "TP", "load", "tokens/s", "TTFT P50 ms", "TTFT P95 ms", "TPOT P50 ms",
                   "TPOT P95 ms", "latency P95 ms", f"{currency or 'cost'}/1M output tokens"):
        table.add_column(column, justify="left" if column == "platform" else "right")
    for row in result["rows"]:
        for level in row.get("serving_levels") or []:
            load = (f"concurrency {level['concurrency']}" if level.get("rate_per_s") is None else
                    f"{level['rate_per_s']:g} req/s (batch {level['concurrency']})")
            table.add_row(row["platform"], str(row["tp"]), load, number(level["tokens_per_s"], 4),
                          fixed(level["ttft_ms"]["p50"], 2), fixed(level["ttft_ms"]["p95"], 2),
                          fixed(level["tpot_ms"]["p50"], 3), fixed(level["tpot_ms"]["p95"], 3),
                          fixed(level["latency_ms"]["p95"], 2), number(level.get("per_million_output_tokens")))
    return table


def verdict_table(verdicts):
    table = Table(title="Stop conditions")
    for column in ("condition", "verdict", "value", "is", "limit"):
        table.add_column(column)
    for item in verdicts:
        colour = {"go": "green", "no-go": "red"}.get(item["verdict"], "yellow")
        table.add_row(item["condition"], f"[{colour}]{item['verdict']}", number(item.get("measured")),
                      item.get("source", "measured"), f"{item['comparison']} {number(item['limit'])}")
    return table


def summary(report):
    """A short answer per question, then the verdict table."""
    from rich.console import Group
    from rich.panel import Panel
    panel = Panel("\n".join(summary_lines(report)),
                  title=f"{report.get('workload')}: {report.get('target')} vs {report.get('baseline')} "
                        f"({report.get('status')})")
    verdicts = report["sections"].get("verdict") or []
    return Group(panel, verdict_table(verdicts)) if verdicts else panel


def summary_lines(report):
    """One line per answered question (plain text; also the report's "At a glance")."""
    s = report["sections"]
    lines = []
    census = s.get("census") or {}
    if census.get("ops") is not None:
        lines.append(f"will it run?   {census.get('distinct_ops')} distinct ops, "
                     f"{len(census.get('fallback_ops') or [])} run on the CPU by TorchNeuron"
                     f"{' (predicted from the census)' if census.get('fallback_source') == 'predicted' else ''}, "
                     f"{len(census.get('wide_values') or [])} 64-bit value problem(s), "
                     f"{len((s.get('cuda_scan') or {}).get('findings') or [])} CUDA-only line(s)")
    quality = s.get("quality") or {}
    training = s.get("training") or {}
    if quality.get("requests"):
        lines.append(f"right?         logits max abs error {number(quality.get('logits_max_abs_error'))}, "
                     f"greedy agreement {number(quality.get('greedy_agreement'))}")
    if training.get("loss_max_abs_diff") is not None:
        lines.append(f"right?         training loss max abs diff {number(training['loss_max_abs_diff'])}, restart diff "
                     f"{number((training.get('restart') or {}).get('max_abs_diff'))}")
    compiles = s.get("compiles") or {}
    if "graphs_compiled" in compiles:
        failed = compiles.get("requests_failed") or []
        lines.append(f"compiles?      {compiles['graphs_compiled']} graphs, {compiles['recompiles']} recompiles "
                     f"(backend {compiles['backend']})" + (f"; {len(failed)} shape(s) failed to compile, see findings"
                                                           if failed else ""))
    elif compiles.get("finding") or compiles.get("skipped"):
        lines.append(f"compiles?      {compiles.get('finding') or compiles.get('skipped')}")
    levels = ((s.get("speed") or {}).get("target") or {}).get("levels") or []
    for level in levels:
        lines.append(f"how fast?      concurrency {level['concurrency']}: {level['tokens_per_s']:.1f} tokens/s, "
                     f"P95 {number(level['latency_ms']['p95'])} ms, TTFT P95 {number(level['ttft_ms']['p95'])} ms, "
                     f"errors {level['error_rate']:.0%}")
    if training.get("time_per_step_s") is not None:
        lines.append(f"how fast?      {number(training['time_per_step_s'])} s per training step")
    if report.get("target_simulated"):
        lines.append("               (host timings on the simulated device, not a Trainium prediction)")
    target = (s.get("speed") or {}).get("target") or {}
    for level in levels:
        p = level.get("predicted")
        if p:
            lines.append(f"how fast?      predicted on {target.get('platform')}, concurrency {level['concurrency']}: "
                         f"{number(p['tokens_per_s'])} tokens/s, P95 {number(p['latency_ms']['p95'])} ms, TTFT P95 "
                         f"{number(p['ttft_ms']['p95'])} ms, {number(p['per_token_ms']['p50'])} ms per token")
    if any(level.get("predicted") for level in levels):
        lines.append(f"               ({target.get('predicted_label')})")
    prediction = s.get("prediction") or {}
    for row in prediction.get("rows") or [] if prediction.get("task") == "train" else []:
        lines.append(f"how fast?      predicted training on {row['platform']} at DP {row['dp']} x TP {row['tp']} (dry run): "
                     f"{number(row['step_ms'])} ms per step, {number(row['tokens_per_s'])} tokens/s, MFU {row['mfu']:.1%}, "
                     f"{number(row['memory_gib']['total'])} GiB per core"
                     + (f", {number(row['cost_to_budget'])} {prediction.get('currency')} for the run"
                        if row.get("cost_to_budget") is not None else ""))
    if prediction.get("task") == "train" and prediction.get("rows"):
        lines.append(f"               ({prediction['label']})")
    for row in prediction.get("rows") or [] if prediction.get("task") != "train" else []:
        lines.append(f"how fast?      predicted on {row['platform']} at TP {row['tp']} (dry run): TTFT {number(row['ttft_ms'])} ms, "
                     f"{number(row['per_token_ms'])} ms per token, {number(row['tokens_per_s'])} tokens/s"
                     + (f", {number(row['per_million_output_tokens'])} {prediction.get('currency')} per 1M tokens"
                        if row.get("per_million_output_tokens") is not None else ""))
    if prediction.get("rows") and prediction.get("task") != "train":
        lines.append(f"               ({prediction['label']}, {prediction['input_tokens']} tokens in, "
                     f"{prediction['output_tokens']} out, batch 1)")
    fit = s.get("fit") or {}
    if fit.get("smallest_fitting_tp"):
        lines.append("fits?          " + ", ".join(f"{k}: TP={v['tp']}" for k, v in fit["smallest_fitting_tp"].items()))
    cores = (s.get("memory") or {}).get("target_peak_per_core") or []
    if cores:
        lines.append("               measured peak " + ", ".join(f"core {c['core']}: {c['peak_bytes'] / 2**20:.1f} MiB"
                                                              for c in cores))
    running = ((s.get("cost") or {}).get("running") or {}).get("target") or {}
    currency = (s.get("cost") or {}).get("currency")
    if running.get("per_million_tokens") is not None:
        lines.append(f"cost?          {number(running['per_million_tokens'])} {currency} per 1M tokens (from "
                     f"measured throughput; {running.get('assumption') or 'price_per_hour.' + running['device']})")
    predicted = running.get("predicted") or {}
    if predicted.get("per_million_tokens") is not None:
        lines.append(f"cost?          {number(predicted['per_million_tokens'])} {currency} per 1M tokens on "
                     f"{predicted['platform']}, one core's share of price_per_hour.{predicted['price_key']} "
                     f"({predicted['label']})")
    licence = s.get("licence") or {}
    if licence:
        lines.append(f"may we use it? model licence {(licence.get('model') or {}).get('licence')} "
                     f"({(licence.get('model') or {}).get('status')})" + (f"; flags: {'; '.join(licence['flags'])}"
                                                                           if licence.get("flags") else ""))
    verdicts = s.get("verdict") or []
    if verdicts:
        tally = {name: sum(1 for v in verdicts if v["verdict"] == name) for name in ("go", "no-go", "not measured")}
        lines.append("verdict:       " + ", ".join(f"{n} {name}" for name, n in tally.items() if n)
                     + "".join(f"; NO-GO {v['condition']}" for v in verdicts if v["verdict"] == "no-go"))
    errors = [f for f in report.get("findings") or [] if f["severity"] == "error"]
    if errors:
        lines.append(f"findings:      {len(errors)} error(s), first: [{errors[0]['section']}] {errors[0]['message'][:120]}")
    return lines
