"""The dry run's sweep (issue 41 §2): `dry_run.predict` of every causal-LM architecture of
COMPAT.md (its tiny config, `conformance.tiny_configs.build_config`) at TP 1 and TP 2, compiled,
16 tokens in and 3 out: each either answers (positive TTFT and per-token figures) or refuses with
its reason (a ValueError or RuntimeError whose message says what the dry run cannot do and what
to try). Anything else (another exception type, a non-positive figure) is a dry-run bug, listed
as such.

    python -m conformance.predict_sweep [--only SUBSTR ...] [--output docs/predict-sweep.md] [--json FILE]

tests/device/test_predict_sweep.py runs it over a fixed sample of the architectures in CI and
checks the table is complete; `make conformance` runs it whole.
"""
import argparse
import json
import logging
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

TPS = (1, 2)
INPUT_TOKENS, OUTPUT_TOKENS = 16, 3
ANSWERS, REFUSES, BUG = "answers", "refuses", "BUG"


def architectures():
    """Every causal-LM architecture COMPAT.md lists (transformers' own mapping), sorted."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def check(model_type, tp):
    """{model_type, tp, outcome, detail, seconds}: the dry run's answer for one architecture and TP."""
    from torch_neuron_sim import dry_run

    from conformance.tiny_configs import build_config
    start = time.perf_counter()
    try:
        config = build_config(model_type)
    except Exception as error:  # noqa: BLE001  (the harness's config, not the dry run)
        return {"model_type": model_type, "tp": tp, "outcome": "no config", "detail": f"{type(error).__name__}: "
                f"{_first_line(error)}", "seconds": time.perf_counter() - start}
    try:
        p = dry_run.predict(config, "trn2", tp=tp, input_tokens=INPUT_TOKENS, output_tokens=OUTPUT_TOKENS)
    except (ValueError, RuntimeError) as error:
        outcome, detail = REFUSES, _first_line(error)
    except Exception as error:  # noqa: BLE001  (what the sweep exists to find)
        outcome, detail = BUG, f"{type(error).__name__}: {_first_line(error)}"
    else:
        good = p.ttft_ms > 0 and p.per_token_ms > 0
        outcome = ANSWERS if good else BUG
        detail = f"TTFT {p.ttft_ms:.3f} ms, {p.per_token_ms:.3f} ms per token"
    return {"model_type": model_type, "tp": tp, "outcome": outcome, "detail": detail,
            "seconds": time.perf_counter() - start}


def _first_line(error):
    text = str(error).strip()
    return text.splitlines()[0][:300] if text else type(error).__name__


def table(results, seconds):
    rows = {}
    for r in results:
        rows.setdefault(r["model_type"], {})[r["tp"]] = r
    counts = {}
    for r in results:
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    lines = ["# The dry run's sweep", "",
             f"`dry_run.predict` of every causal-LM architecture of COMPAT.md (its tiny config, "
             f"`conformance/tiny_configs.py`) on trn2 at TP {' and '.join(map(str, TPS))}, compiled, {INPUT_TOKENS} "
             f"tokens in and {OUTPUT_TOKENS} out: it answers, or refuses with its reason. Made by "
             f"`python -m conformance.predict_sweep` in {seconds / 60:.1f} minutes; "
             "`tests/device/test_predict_sweep.py` keeps it so.", "",
             "**Summary: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) + f" (of {len(results)}).**", "",
             "| model_type | " + " | ".join(f"TP {tp}" for tp in TPS) + " |", "|---|" + "---|" * len(TPS)]
    for name in sorted(rows):
        cells = []
        for tp in TPS:
            r = rows[name].get(tp)
            cells.append("-" if r is None else f"{r['outcome']}: {r['detail']}".replace("|", "\\|"))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", action="append", default=[], metavar="SUBSTR")
    parser.add_argument("--output", default=os.path.join("docs", "predict-sweep.md"))
    parser.add_argument("--json", help="also write the raw results here")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)  # the tiny configs' notes (special tokens beyond the vocabulary, ...)
    from transformers.utils import logging as transformers_logging
    transformers_logging.set_verbosity_error()
    names = [n for n in architectures() if not args.only or any(s in n for s in args.only)]
    start = time.perf_counter()
    results = []
    for name in names:
        for tp in TPS:
            results.append(check(name, tp))
            r = results[-1]
            print(f"{name} TP {tp}: {r['outcome']} ({r['seconds']:.1f} s) {r['detail']}", file=sys.stderr, flush=True)
    with open(args.output, "w", encoding="utf-8") as handle:
        handle.write(table(results, time.perf_counter() - start))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=1)
    return 1 if any(r["outcome"] == BUG for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
