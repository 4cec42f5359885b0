"""The repros of the review of the exit hook (review 13, csrc/ExitQuiesce.cpp), kept as
regression tests: each script exits 0 when its finding is fixed (tests/exit_review/). 01: a
daemon thread stuck in a backward does not make the exit wait forever (the flush has a limit);
02: a point-to-point future completes in an atexit handler that runs after ours; 03: a
completion that throws (the user completed the future first) does not delay the exit.
02 and 03 launch two ranks: `make test-distributed` runs them."""
import pytest

from conftest import review_repros, run_review_repro

pytestmark = pytest.mark.distributed_extra


@pytest.mark.parametrize("script", review_repros("exit_review"))
def test_review_finding_stays_fixed(script, tmp_path):
    run_review_repro("exit_review", script, tmp_path)
