"""The calibration table (issue 25 §4; docs/device-clock.md): the stored predictions and the
docs' table are what the dry run predicts now; the issue's 20% bar."""
import json
import os
import subprocess
import sys

import pytest

from torch_neuron_sim import calibration, dry_run

pytest.importorskip("transformers")


def test_the_stored_table_and_docs_are_current():
    """Re-predicts every published row (2-6 minutes on 2 busy cores: one Dynamo trace per
    prediction) and compares with the committed files."""
    done = subprocess.run([sys.executable, "-m", "torch_neuron_sim.calibration", "--check"], capture_output=True,
                          text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=1500)
    assert done.returncode == 0, done.stderr


def test_fitted_figures_are_marked_and_the_error_is_the_largest_check():
    """Fitted: the vllm-neuron step cost (the 8B per-token figure) and tensor_utilization (the two
    given TTFTs together); the error neuron-migrate quotes is the largest of the dense checks, or
    of all of them for a mixture-of-experts model."""
    with open(calibration.RESULTS) as f:
        results = json.load(f)
    assert results["cost_model"] == dry_run.COST_MODEL_VERSION
    fitted = [r for r in results["rows"] if r["fitted"]]
    assert sorted((r["model"], r["metric"]) for r in fitted) == [
        ("Llama-3.1-8B", "per_token_ms"), ("Llama-3.1-8B", "ttft_ms"), ("Llama-3.3-70B", "ttft_ms")]
    assert all(r["given"] for r in fitted)
    checks = [r for r in results["rows"] if not r["fitted"]]
    assert dry_run.calibration_error() == max(abs(r["error"]) for r in checks if not r["kind"].startswith("MoE"))
    assert dry_run.calibration_error(moe=True) == max(abs(r["error"]) for r in checks)
    assert {r["kind"] for r in checks} == {"prefill", "decode", "verify", "batch", "MoE decode", "MoE verify"}


def test_the_given_rows_checks_are_within_the_issues_20_percent():
    """Issue 25's bar, on the rows it gave. Cost model v1 missed it (the 8B TTFT 20.1% low); v2
    took in the serving stacks' prefill buckets and GQA attention and scatters' traffic; v3 the
    prefill kernels (causal tiles, sequence parallelism) and TensorE's achieved share, fitted to
    the given TTFTs (docs/device-clock.md). The rows found later are checks with their errors
    shown per kind, not held to a bar here."""
    with open(calibration.RESULTS) as f:
        results = json.load(f)
    given = [row for row in results["rows"] if row["given"] and not row["fitted"]]
    assert len(given) == 2
    assert all(abs(row["error"]) <= 0.20 for row in given)


def test_the_readme_quotes_the_current_errors():
    with open(calibration.RESULTS) as f:
        results = json.load(f)
    with open(os.path.join(calibration.ROOT, "README.md")) as f:
        readme = f.read()
    for row in results["rows"]:
        if not row["fitted"]:
            assert f"{row['error']:+.1%}".replace("+", "" if row["error"] < 0 else "+") in readme, row


def test_a_missing_or_damaged_results_file_is_unknown_not_a_crash(tmp_path, monkeypatch):
    monkeypatch.setattr(calibration, "RESULTS", str(tmp_path / "calibration.json"))
    assert calibration.calibration_error() is None
    assert calibration.main(["--check"]) == 1  # says to run make calibrate, without predicting first
    (tmp_path / "calibration.json").write_text('{"cost_model": "%s", "rows": [{"fitted": false}]}'
                                               % dry_run.COST_MODEL_VERSION)
    assert calibration.calibration_error() is None
