"""The calibration table (issue 25 §4): each published Trainium measurement in
data/calibration.toml, the dry run's prediction of it, and the error (predicted / published - 1).

    python -m torch_neuron_sim.calibration          # predicts every row (about a minute on 2 cores),
                                                    # writes data/calibration.json and the docs' table
    python -m torch_neuron_sim.calibration --check  # exit 1 when either differs from a fresh prediction

`make calibrate` runs the first. A row's `fitted` figure is the point a constant was fitted to:
shown, but its zero error is not a check, and calibration_error() leaves it out."""
import argparse
import json
import os
import statistics
import sys
import tomllib

from . import dry_run

HERE = os.path.dirname(__file__)
ROWS = os.path.join(HERE, "data", "calibration.toml")
RESULTS = os.path.join(HERE, "data", "calibration.json")
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
DOCS = os.path.join(ROOT, "docs", "device-clock.md")
BEGIN, END = "<!-- calibration table: make calibrate -->", "<!-- end of calibration table -->"


def rows():
    with open(ROWS, "rb") as f:
        return tomllib.load(f)["row"]


def _fitted(row):
    """The row's figures a constant was fitted to (`fitted`: one metric or a list)."""
    fitted = row.get("fitted", [])
    return [fitted] if isinstance(fitted, str) else list(fitted)


def _entry(row, metric, published, predicted, kind, unit="ms"):
    return {"model": row["model"], "setup": row["setup"], "metric": metric, "kind": kind, "unit": unit,
            "published_ms": published, "predicted_ms": round(predicted, 2),
            "error": round(predicted / published - 1, 4), "fitted": metric in _fitted(row),
            "given": bool(row.get("given")), "serving": row["serving"], "source": row["source"]}


def row_arguments(row):
    """dry_run.predict's arguments for a row: its setup, and the prefill buckets its source
    documents (`context_encoding_buckets`, or NxD Inference's automatic buckets up to
    `max_context_length`); without either, the stack's rule up to max_model_len."""
    buckets = row.get("context_encoding_buckets")
    if buckets is None and "max_context_length" in row:
        buckets = dry_run._nxdi_buckets(row["max_context_length"])
    return dict(platform=row["platform"], tp=row["tp"], logical_nc_config=row["lnc"],
                input_tokens=row["input_tokens"], output_tokens=row["output_tokens"], serving=row["serving"],
                max_model_len=row.get("max_model_len"), prefill_buckets=buckets)


def predict_rows():
    """One entry per published figure of each row: TTFT (kind "prefill"), per-token latency
    ("decode", or "MoE decode" for a mixture-of-experts model), speculative verify steps of
    `verify_steps` [[tokens, ms], ...] ("verify" / "MoE verify"), and output tokens/s at
    `concurrency` and its median TPOT ("batch": the continuous-batching simulator, Note [Serving
    under load])."""
    results = []
    overhead = {}
    for row in rows():
        config = os.path.join(ROOT, row["config"])
        args = row_arguments(row)
        moe = "MoE " if dry_run.is_moe(config) else ""
        p = dry_run.predict(config, **args)
        overhead_ms = dry_run.serving_overhead_ns(row["serving"]) / 1e6
        if "ttft_ms" in row:
            results.append(_entry(row, "ttft_ms", row["ttft_ms"], p.ttft_ms, moe + "prefill"))
            results[-1]["device_only_ms"] = round(p.ttft_ms - overhead_ms, 2)
        if "per_token_ms" in row:
            results.append(_entry(row, "per_token_ms", row["per_token_ms"], p.per_token_ms, moe + "decode"))
            results[-1]["device_only_ms"] = round(p.per_token_ms - overhead_ms, 2)
        for tokens, published in row.get("verify_steps", []):
            v = dry_run.predict(config, **args, step_tokens=tokens)
            results.append(_entry(row, f"verify_step_ms:{tokens}", published, v.per_token_ms, moe + "verify"))
            results[-1]["device_only_ms"] = round(v.per_token_ms - overhead_ms, 2)
        if "concurrency" in row:
            level, = dry_run.serve(config, **args, concurrency=(row["concurrency"],))
            if "throughput_tok_s" in row:
                results.append(_entry(row, f"throughput_tok_s:{row['concurrency']}", row["throughput_tok_s"],
                                      level.tokens_per_s, moe + "batch", unit="tok/s"))
            if "tpot_ms" in row:
                results.append(_entry(row, f"tpot_ms:{row['concurrency']}", row["tpot_ms"], level.tpot_ms["p50"],
                                      moe + "batch"))
    return {"cost_model": dry_run.COST_MODEL_VERSION, "rows": results}


def _figure(metric):
    name, _, count = metric.partition(":")
    return {"ttft_ms": "TTFT", "per_token_ms": "per-token latency",
            "verify_step_ms": f"{count}-token verify step",
            "throughput_tok_s": f"output tokens/s at concurrency {count}",
            "tpot_ms": f"median TPOT at concurrency {count}"}[name]


DENSE_KINDS = ("prefill", "decode", "verify", "batch")
MOE_KINDS = tuple(f"MoE {kind}" for kind in DENSE_KINDS)
KINDS = DENSE_KINDS + MOE_KINDS


def table(results):
    lines = ["| model, setup | kind | figure | published | predicted | error | device alone (no serving cost) |",
             "|---|---|---|---|---|---|---|"]
    for r in results["rows"]:
        error = f"{r['error']:+.1%}" + (" (fitted: not a check)" if r["fitted"] else "")
        unit = r.get("unit", "ms")
        device = f"{r['device_only_ms']:.1f} ms" if "device_only_ms" in r else ""
        given = " (given)" if r.get("given") else ""
        lines.append(f"| {r['model']}: {r['setup']}; serving {r['serving']}{given} | {r['kind']} | "
                     f"{_figure(r['metric'])} | {r['published_ms']} {unit} | {r['predicted_ms']:.1f} {unit} | "
                     f"{error} | {device} |")
    checks = [r for r in results["rows"] if not r["fitted"]]
    lines.append("")
    lines.append("| kind | checks | median abs error | largest abs error |")
    lines.append("|---|---|---|---|")
    for kind in KINDS:
        errors = sorted(abs(r["error"]) for r in checks if r["kind"] == kind)
        if errors:
            lines.append(f"| {kind} | {len(errors)} | {statistics.median(errors):.1%} | {errors[-1]:.1%} |")
    lines.append("")
    lines.append(f"Cost model {results['cost_model']}: largest error of the checks (fitted figures left out): "
                 f"{max(abs(r['error']) for r in checks):.1%}.")
    return "\n".join(lines)


def _docs_with(text):
    with open(DOCS) as f:
        docs = f.read()
    if BEGIN not in docs or END not in docs:
        raise RuntimeError(f"{DOCS} has no '{BEGIN}' ... '{END}' markers for the calibration table")
    head, rest = docs.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return head + BEGIN + "\n" + text + "\n" + END + tail


def calibration_error(kinds=DENSE_KINDS):
    """The largest |predicted / published - 1| of the checks of `kinds` in data/calibration.json
    (default: a dense model's figures; add MOE_KINDS for a mixture-of-experts model), or None."""
    try:
        with open(RESULTS) as f:
            results = json.load(f)
        if results.get("cost_model") != dry_run.COST_MODEL_VERSION:
            return None
        checks = [abs(float(r["error"])) for r in results["rows"] if not r["fitted"] and r.get("kind") in kinds]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # missing or damaged: unknown, as documented
    return max(checks) if checks else None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the stored results or docs are stale")
    args = parser.parse_args(argv)
    if args.check and not os.path.isfile(RESULTS):
        print(f"stale: {RESULTS} does not exist; run `make calibrate`", file=sys.stderr)
        return 1
    results = predict_rows()
    docs = _docs_with(table(results))
    stored = json.dumps(results, indent=1) + "\n"
    if args.check:
        with open(RESULTS) as f:
            same_results = f.read() == stored
        with open(DOCS) as f:
            same_docs = f.read() == docs
        if not (same_results and same_docs):
            print(f"stale: {'' if same_results else RESULTS} {'' if same_docs else DOCS}; run `make calibrate`",
                  file=sys.stderr)
            return 1
        return 0
    with open(RESULTS, "w") as f:
        f.write(stored)
    with open(DOCS, "w") as f:
        f.write(docs)
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
