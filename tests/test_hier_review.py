"""The repros of the review of the hierarchical collectives (review 11), kept as regression
tests: each script (tests/hier_review/, 2 or 4 ranks on this machine, pretending to be on the
hosts its layout names: _harness.py publishes fake host keys) exits 0 when its finding is fixed.
01: abort() ends a leader's pending step across hosts at once; 02: a rank that dies inside one
host fails the other hosts' ranks at once, not at the timeout; 03: a group name reused after
destroy_process_group gets one store prefix on every member; 04: the step across hosts ends at
the Work's deadline; 05: values for host layouts 2+2, interleaved, 3+1 and 1+3, every reduce
op, dtypes, broadcast roots and a subgroup spanning hosts. Four ranks and timeouts of several
seconds each: `make test-distributed`."""
import pytest

from conftest import review_repros, run_review_repro

pytestmark = pytest.mark.distributed_extra


@pytest.mark.parametrize("script", review_repros("hier_review"))
def test_review_finding_stays_fixed(script, tmp_path):
    run_review_repro("hier_review", script, tmp_path)
