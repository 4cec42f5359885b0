"""The repros of the review of the recurrent-layer change (review 11), kept as regression
tests: each script exits 0 when its finding is fixed (tests/rnn_review/, one process each:
01 watches for a crash of a child process, the compiled ones start from a fresh Dynamo).
Finding 4 (asynchronous mode's per-call meta run) is tracked apart and has no script here."""
import pytest

from conftest import review_repros, run_review_repro


@pytest.mark.parametrize("script", review_repros("rnn_review"))
def test_review_finding_stays_fixed(script, tmp_path):
    run_review_repro("rnn_review", script, tmp_path)
