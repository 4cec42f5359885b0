"""The repros of the review of the exit hook (review 13, csrc/ExitQuiesce.cpp), kept as
regression tests: each script exits 0 when its finding is fixed (tests/exit_review/). 01: a
daemon thread stuck in a backward does not make the exit wait forever (the flush has a limit);
02: a point-to-point future completes in an atexit handler that runs after ours; 03: a
completion that throws (the user completed the future first) does not delay the exit. Review
14: 04, torch.jit.wait (which keeps the GIL) on a point-to-point future returns; 05, a `then`
callback that releases the GIL while the process exits does not abort it. 02-05 launch two
ranks (tests/exit_review/_two_ranks.py for 04-05): `make test-distributed` runs them."""
import pytest

from conftest import review_repros, run_review_repro

pytestmark = pytest.mark.distributed_extra


@pytest.mark.parametrize("script", review_repros("exit_review"))
def test_review_finding_stays_fixed(script, tmp_path):
    run_review_repro("exit_review", script, tmp_path)
