"""The repro scripts in device/regressions/, each run in its own process (each depends on what
was imported first); each exits 0 while the behaviour it checks holds. The contract they guard:
the compile backend "neuron" is registered with Dynamo exactly once and is usable however the
process gets to it: two threads' first torch.compile at once, the backend passed as a callable
before any lookup by name, TORCH_DEVICE_BACKEND_AUTOLOAD=0 with a lookup by name (Dynamo
loading our entry point), and a source tree without the installed package's entry point."""
import os

import pytest

from conftest import regression_scripts, run_regression_script

REGRESSIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "regressions")


@pytest.mark.parametrize("script", regression_scripts(REGRESSIONS))
def test_regression_stays_fixed(script, tmp_path):
    run_regression_script(os.path.join(REGRESSIONS, script), tmp_path)
