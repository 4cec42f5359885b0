"""neuron-migrate compare: what changed between two runs, regressions flagged, and refusal
when the runs' conditions differ."""
import copy
import json
import os

import pytest

from migrate_helpers import DATA, main, run, write
from neuron_migrate.compare import compare

WORKLOAD = f"""
[workload]
name = "cmp"
[model]
factory = "{os.path.join(DATA, 'custom_models.py')}:filtered"
[inputs]
prompt_lengths = [6]
max_new_tokens = 2
vocab_limit = 64
[serve]
requests = 2
[compile]
enabled = false
"""


@pytest.fixture(scope="module")
def baseline_report(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cmp")
    status, report = run(write(folder, "w.toml", WORKLOAD), str(folder / "a"))
    return folder, report


def _save(folder, name, report):
    os.makedirs(folder / name, exist_ok=True)
    with open(folder / name / "report.json", "w") as handle:
        json.dump(report, handle)
    return str(folder / name)


def test_same_run_has_no_quality_regression(baseline_report):
    folder, a = baseline_report
    result = compare(a, copy.deepcopy(a))
    assert not result["refused"] and result["regressions"] == []
    assert any(r["metric"] == "ops run on the CPU (fallback)" for r in result["metrics"])


def test_regressions_and_changes_are_flagged(baseline_report, capsys):
    folder, a = baseline_report
    b = copy.deepcopy(a)
    b["sections"]["lock"]["versions"]["torch-neuronx"] = "2.14.0"
    b["sections"]["lock"]["environment"]["NEURON_RT_VISIBLE_CORES"] = "1"
    b["sections"]["census"]["fallback_ops"].append("aten::cumprod")
    level = b["sections"]["speed"]["target"]["levels"][0]
    level["latency_ms"]["p95"] *= 2
    result = compare(a, b)
    assert ("torch-neuronx", a["sections"]["lock"]["versions"]["torch-neuronx"], "2.14.0") in result["versions"]
    assert result["environment"][0][0] == "NEURON_RT_VISIBLE_CORES"
    assert result["new_fallback_ops"] == ["aten::cumprod"]
    # the run is on the simulated device: host time is compared with host time, in its own row
    assert a["target_simulated"]
    assert set(result["regressions"]) == {"ops run on the CPU (fallback)",
                                          "P95 latency ms at concurrency 1 (simulator host time)"}
    assert main(["compare", _save(folder, "a2", a), _save(folder, "b", b)]) == 1
    out = capsys.readouterr().out
    assert "new CPU fallback op: aten::cumprod" in out and "REGRESSION" in out


def test_runs_under_different_conditions_are_refused(baseline_report, capsys):
    folder, a = baseline_report
    b = copy.deepcopy(a)
    b["conditions"]["model"]["dtype"] = "bfloat16"
    b["conditions"]["inputs"]["max_new_tokens"] = 32
    result = compare(a, b)
    assert result["refused"]
    assert {key for key, _, _ in result["condition_changes"]} == {"model.dtype", "inputs.max_new_tokens"}
    assert main(["compare", _save(folder, "a3", a), _save(folder, "c", b)]) == 2
    assert "refused" in capsys.readouterr().out


def test_changed_model_files_are_refused(baseline_report):
    folder, a = baseline_report
    b = copy.deepcopy(a)
    files = b["sections"]["lock"]["model"]["files"]
    name = next(iter(files))
    files[name]["sha256"] = "0" * 64
    assert compare(a, b)["model_file_changes"][0][0] == name


def test_not_a_report_is_an_error(tmp_path, capsys):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "report.json").write_text('{"schema": "other"}')
    assert main(["compare", str(tmp_path / "x"), str(tmp_path / "x")]) == 2


def test_new_prices_are_a_change_not_a_cost_regression(baseline_report):
    folder, a = baseline_report
    a = copy.deepcopy(a)
    a["target_simulated"] = False  # as measured on a real device: its measured cost is the deciding one
    a["sections"]["cost"] = {"currency": "USD", "running": {"target": {
        "device": "neuron", "price_per_hour": 1.0, "tokens_per_s": 100.0,
        "per_million_tokens": 1.0 / 3600 / 100 * 1e6}}}
    b = copy.deepcopy(a)
    b["sections"]["cost"]["running"]["target"].update(price_per_hour=2.0, per_million_tokens=2.0 / 3600 / 100 * 1e6)
    result = compare(a, b)
    assert result["regressions"] == []  # the same throughput under the team's new price table
    assert result["prices"] == [("price_per_hour (target)", 1.0, 2.0)]
    row = next(r for r in result["metrics"] if r["metric"] == "cost per 1M tokens")
    assert row["note"] == "prices changed" and row["b"] == 2 * row["a"]
    same_prices = copy.deepcopy(a)
    same_prices["sections"]["cost"]["running"]["target"]["per_million_tokens"] *= 2  # a slower run
    assert compare(a, same_prices)["regressions"] == ["cost per 1M tokens"]


def test_missing_or_truncated_report_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty")]) == 2  # raised FileNotFoundError
    assert "cannot read the report" in " ".join(capsys.readouterr().out.split())
    (tmp_path / "truncated").mkdir()
    (tmp_path / "truncated" / "report.json").write_text('{"schema": "neuron-migrate/report", "schema_version": 1}')
    assert main(["compare", str(tmp_path / "truncated"), str(tmp_path / "truncated")]) == 2  # raised KeyError
    assert "without its sections" in " ".join(capsys.readouterr().out.split())
