"""The repros of the review of the distributed change (review 9), kept as regression tests:
each script (tests/dist_review/, two ranks spawned by _harness.py) exits 0 when its finding is
fixed. 01: a reduce-scatter's future completes without wait(); 02: a future callback that runs
another collective and waits for it (PowerSGD's hook) does not deadlock; 03: a wait() that
timed out does not leave AVG's sum undivided; 04: all_gather_into_tensor into a flat output
(Accelerate's gather) on Gloo; 05: PowerSGD over several buckets issues its collectives in one
order on every rank; 06: a group freed (by DDP) after destroy_process_group does not hang.
(04-06 come from the helpers that wrote the training and multi-host tests.) 07-11: the second review
(review 9b): zero-copy after a peer failed, completed works pinning tensors, a failed rank's counter
running ahead, a preposted irecv holding up collectives, the transport chosen by layout; 12: a
PREMUL_SUM reduce_scatter of a transposed input; 13: memory a failed zero-copy call lent to a
peer still writing into it is not given to a new tensor; 14: asynchronous collectives of two groups
issued in different orders (review 9b, finding 6) and the futures' users ordered by events; 15: a
transport thread never waits for the GIL (the intermittent PowerSGD failure of issue 9). 16-17: the
third review (review 10): groups sharing a communication stream; torch.manual_seed waiting for
the collectives of every group; 18: review 10, finding 4 (releases piling up threads); 19: a
point-to-point work's `then` callback dropped after Python began finalizing (std::terminate at exit).
About 2.5 minutes of 2-rank launches with deliberate timeouts: `make test-distributed` runs them
(keeping `make test` shorter, issue 9)."""
import pytest

from conftest import review_repros, run_review_repro

pytestmark = pytest.mark.distributed_extra


@pytest.mark.parametrize("script", review_repros("dist_review"))
def test_review_finding_stays_fixed(script, tmp_path):
    run_review_repro("dist_review", script, tmp_path)
