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


def _entry(row, metric, published, predicted):
    return {"model": row["model"], "setup": row["setup"], "metric": metric, "published_ms": published,
            "predicted_ms": round(predicted, 2), "error": round(predicted / published - 1, 4),
            "fitted": row.get("fitted") == metric, "serving": row["serving"], "source": row["source"]}


def predict_rows():
    """One entry per published figure: TTFT, per-token latency, and a verify step where given."""
    results = []
    for row in rows():
        config = os.path.join(ROOT, row["config"])
        args = dict(platform=row["platform"], tp=row["tp"], logical_nc_config=row["lnc"],
                    input_tokens=row["input_tokens"], output_tokens=row["output_tokens"], serving=row["serving"],
                    max_model_len=row.get("max_model_len"))
        p = dry_run.predict(config, **args)
        results.append(_entry(row, "ttft_ms", row["ttft_ms"], p.ttft_ms))
        results.append(_entry(row, "per_token_ms", row["per_token_ms"], p.per_token_ms))
        if "verify_step_ms" in row:
            v = dry_run.predict(config, **args, step_tokens=row["verify_step_tokens"])
            results.append(_entry(row, "verify_step_ms", row["verify_step_ms"], v.per_token_ms))
        # The same programs without the serving stack's fixed cost per step: the device's share.
        overhead_ms = dry_run.serving_overhead_ns(row["serving"]) / 1e6
        results[-2 if "verify_step_ms" not in row else -3]["device_only_ms"] = round(p.ttft_ms - overhead_ms, 2)
        results[-1 if "verify_step_ms" not in row else -2]["device_only_ms"] = round(p.per_token_ms - overhead_ms, 2)
    return {"cost_model": dry_run.COST_MODEL_VERSION, "rows": results}


METRICS = {"ttft_ms": "TTFT", "per_token_ms": "per-token latency", "verify_step_ms": "4-token verify step"}


def table(results):
    lines = ["| model, setup | figure | published | predicted | error | device alone (no serving cost) |",
             "|---|---|---|---|---|---|"]
    for r in results["rows"]:
        error = f"{r['error']:+.1%}" + (" (fitted: not a check)" if r["fitted"] else "")
        device = f"{r['device_only_ms']:.1f} ms" if "device_only_ms" in r else ""
        lines.append(f"| {r['model']}: {r['setup']}; serving {r['serving']} | {METRICS[r['metric']]} | "
                     f"{r['published_ms']} ms | {r['predicted_ms']:.1f} ms | {error} | {device} |")
    checks = [abs(r["error"]) for r in results["rows"] if not r["fitted"]]
    lines.append("")
    lines.append(f"Cost model {results['cost_model']}: largest error of the checks (fitted figures left out): "
                 f"{max(checks):.1%}.")
    return "\n".join(lines)


def _docs_with(text):
    with open(DOCS) as f:
        docs = f.read()
    if BEGIN not in docs or END not in docs:
        raise RuntimeError(f"{DOCS} has no '{BEGIN}' ... '{END}' markers for the calibration table")
    head, rest = docs.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return head + BEGIN + "\n" + text + "\n" + END + tail


def calibration_error():
    """The largest |predicted / published - 1| of the checks in data/calibration.json, or None."""
    try:
        with open(RESULTS) as f:
            results = json.load(f)
        if results.get("cost_model") != dry_run.COST_MODEL_VERSION:
            return None
        checks = [abs(float(r["error"])) for r in results["rows"] if not r["fitted"]]
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
