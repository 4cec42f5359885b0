"""The repro scripts in kernels/regressions/, each run in its own process (they set oneDNN's
flag and the thread count, watch for a crash of a child, or start from a fresh Dynamo); each
exits 0 while the behaviour it checks holds. The contracts they guard:
- small bfloat16 matmuls (Note [Small bfloat16 matmuls]) give at::mm's bits whatever the host
  does meanwhile: oneDNN turned off (for good or for a moment, also while a queued product runs
  or while the once-per-process trial runs) and any intra-op thread count; a narrow weight with
  a long K neither slows down nor keeps a buffer per element of K;
- the recurrent and SyncBatchNorm kernels keep CUDA's contracts: shapes and devices checked
  (a wrong workspace raises, never crashes; `out` and CPU operands on the wrong device raise),
  output dtypes and layouts as CUDA's, a single running statistic updated alone, and a
  compiled LSTM without an initial state trains;
- mixing float64 with float32 operands raises where CPU and CUDA raise.
The small-matmul repros carry the marker `small_matmul`: `make test-cpu-variants` runs them
again with oneDNN limited to other CPUs' instruction sets."""
import os

import pytest

from conftest import regression_scripts, run_regression_script

REGRESSIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "regressions")
SMALL_MATMUL = {"mkldnn_disabled_raises.py", "probe_ignores_thread_count.py", "mkldnn_toggle_during_queued_mm.py",
                "transient_flag_caches_false_verdict.py", "form_caches_none_after_transient_flag.py",
                "narrow_long_weights_slow_and_memory.py", "one_row_nan_piece_order.py",
                "dot_form_race_sigill.py", "dot_form_flush_denormal_split.py"}
assert SMALL_MATMUL <= set(regression_scripts(REGRESSIONS)), "a small-matmul repro was renamed or removed"


@pytest.mark.parametrize("script", [pytest.param(s, marks=pytest.mark.small_matmul) if s in SMALL_MATMUL else s
                                    for s in regression_scripts(REGRESSIONS)])
def test_regression_stays_fixed(script, tmp_path):
    run_regression_script(os.path.join(REGRESSIONS, script), tmp_path)

