"""The repros of the review of the recurrent-layer change (review 11), kept as regression
tests: each script exits 0 when its finding is fixed (tests/rnn_review/, one process each:
01 watches for a crash of a child process, the compiled ones start from a fresh Dynamo).
Finding 4 (asynchronous mode's per-call meta run) is tracked apart and has no script here."""
import os
import subprocess
import sys

import pytest

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rnn_review")
REPROS = sorted(f for f in os.listdir(HERE) if f.endswith(".py"))


@pytest.mark.parametrize("script", REPROS)
def test_review_finding_stays_fixed(script, tmp_path):
    env = dict(os.environ, TORCH_NEURONX_NEFF_CACHE_DIR=str(tmp_path / "cache"), HF_HUB_OFFLINE="1")
    result = subprocess.run([sys.executable, os.path.join(HERE, script)], cwd=str(tmp_path), env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{script}:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
