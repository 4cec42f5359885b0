"""The repros of the review of the lazily loaded compile backend (review 12), kept as
regression tests: each script exits 0 when its finding is fixed (tests/import_review/, one
process each). 01: two threads' first torch.compile at once; 02: the backend passed as a
callable before any lookup by name is a registered backend; 03: TORCH_DEVICE_BACKEND_AUTOLOAD=0
and a lookup by name (Dynamo loading our entry point); 04: a source tree without the installed
package's entry point."""
import pytest

from conftest import review_repros, run_review_repro


@pytest.mark.parametrize("script", review_repros("import_review"))
def test_review_finding_stays_fixed(script, tmp_path):
    run_review_repro("import_review", script, tmp_path)
