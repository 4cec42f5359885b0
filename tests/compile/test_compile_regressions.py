"""The repros of the review of torch.compile(backend="neuron") (review 8), kept as regression
tests: each script exits 0 when its finding is fixed (tests/compile_review/, one process
each: several set the launch mode or start threads that could deadlock). 12-14 come from
review 14: the 64-bit rule on ops with several results (widened each) and on views (never
narrowed); 15 (review 14 too): a program's kernels are not seen by a Python dispatch mode
(`x & 0xFF` failed under AOTAutograd's first-call check)."""
import pytest

from conftest import review_repros, run_review_repro


@pytest.mark.parametrize("script", review_repros("compile_review"))
def test_review_finding_stays_fixed(script, tmp_path):
    run_review_repro("compile_review", script, tmp_path)
