"""The repros of review 15 (small bfloat16 matmuls through oneDNN's brgemm kernel, Note [Small
bfloat16 matmuls]), kept as regression tests: each script exits 0 when its finding is fixed
(tests/matmul_review/, one process each: they set oneDNN's flag and the thread count).
01: with torch.backends.mkldnn.flags(enabled=False) the kernel raised (ATen's brgemm refuses
to run) where at::mm computes; 02: a shape's verdict ignored the intra-op thread count, which
changes at::mm's bits for some shapes (32x768x31). From review 15b: 03, oneDNN turned off by
the host while a queued bf16 mm ran on the stream worker failed the stream (ATen's brgemm
checks the flag per call); 04, a verdict taken while oneDNN was off for a moment stayed "no".
From review 16 (the direct form for CPUs without AMX): 05, the once-per-process answer whether the
kernel runs at all was kept as "none" when oneDNN was off for a moment during its trial; 06, a
narrow weight with a long K made the kernel pack and keep a buffer of 128 bytes per element of K."""
import pytest

from conftest import review_repros, run_review_repro


@pytest.mark.parametrize("script", review_repros("matmul_review"))
def test_review_finding_stays_fixed(script, tmp_path):
    run_review_repro("matmul_review", script, tmp_path)
