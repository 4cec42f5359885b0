"""The dry run's sweep (issue 41 §2, conformance/predict_sweep.py, docs/predict-sweep.md): predict of
every causal-LM architecture of COMPAT.md at TP 1 and TP 2 answers or refuses with its reason.
The table covers every architecture with no other outcome; a sample of it (each kind of answer
and refusal) is run again here and must give the table's outcome."""
import os
import re
import sys

import pytest

from conftest import ROOT  # noqa: E402

sys.path.insert(0, ROOT)
from conformance import predict_sweep  # noqa: E402

TABLE = os.path.join(ROOT, "docs", "predict-sweep.md")
# one of each kind: dense, MoE, multimodal (its text decoder), per-layer sizes, an attention table
# of its own, a cache StaticCache cannot hold, not Llama-style, hybrid state-space
SAMPLE = ["llama", "qwen3_moe", "gemma3", "gemma4_text", "git", "deepseek_v4", "gpt2", "bamba"]


def table_rows():
    rows = {}
    with open(TABLE, encoding="utf-8") as handle:
        for line in handle:
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if len(cells) == 1 + len(predict_sweep.TPS) and cells[0] not in ("model_type", "---"):
                rows[cells[0]] = cells[1:]
    return rows


def test_the_table_covers_every_architecture_and_none_fails_otherwise():
    rows = table_rows()
    assert set(rows) == set(predict_sweep.architectures()), "docs/predict-sweep.md is stale: run make conformance"
    for name, cells in rows.items():
        for cell in cells:
            outcome = cell.split(":")[0]
            assert outcome in (predict_sweep.ANSWERS, predict_sweep.REFUSES, "no config"), (name, cell)


@pytest.mark.parametrize("model_type", SAMPLE)
def test_a_sample_of_the_sweep_gives_the_tables_outcome(model_type):
    cells = table_rows()[model_type]
    for tp, cell in zip(predict_sweep.TPS, cells):
        result = predict_sweep.check(model_type, tp)
        assert result["outcome"] == cell.split(":")[0], (model_type, tp, result, cell)
        if result["outcome"] == predict_sweep.REFUSES:
            assert cell.split(": ", 1)[1].replace("\\|", "|") == result["detail"]
