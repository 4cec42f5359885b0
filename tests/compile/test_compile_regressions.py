"""The repro scripts in compile/regressions/, each run in its own process (several set the
launch mode or start threads that could deadlock) with a fresh program cache; each exits 0
while the behaviour it checks holds. The contracts they guard for torch.compile(backend="neuron"):
- a program reads each call's inputs where they are: a view of an input follows the input's
  storage offset, inputs that aliased at trace time are not assumed to alias later;
- two threads (on one stream or two, launch-blocking or asynchronous) may run one compiled
  function at once, also with a custom op whose Python kernel gives up the GIL;
- random ops in a program draw from the neuron generator, in program order with the host's
  draws (same values in asynchronous and launch-blocking mode), never from the CPU's; each is
  lowered with its generator overload of the same signature and its arguments' own kinds
  (randint, randperm, randint_like(x, tensor) compile);
- a graph may return constants, CPU tensors and tensor lists, take CPU scalars and Python
  numbers where the schema wants a tensor, and fail its backward's compile into the fallback;
- the 64-bit rule compiled equals eager: ops with several results, view(dtype) and as_strided
  of an offset view keep int64/float64;
- complex values: conj and _neg_view (a complex product's backward) are computed, not dropped
  bits, and an output that is a view of one stays a view with its bit; an output may be a view of
  another dtype than its base (view_as_real, also of an input with the negative bit, also over a
  storage that is not a whole number of the view's elements);
- the program loader rejects a sealed program whose arena slot is smaller than its tensor, and
  a step never replaces a fixed value's storage or metadata (a program writes only its own memory)."""
import os

import pytest

from conftest import regression_scripts, run_regression_script

REGRESSIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "regressions")


@pytest.mark.parametrize("script", regression_scripts(REGRESSIONS))
def test_regression_stays_fixed(script, tmp_path):
    run_regression_script(os.path.join(REGRESSIONS, script), tmp_path)
