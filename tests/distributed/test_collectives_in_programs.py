"""A compiled graph's functional collectives run inside its program (Note [Collectives in
programs] in csrc/compile/ProgramCollectives.cpp): collectives_in_programs_worker.py on 2 ranks, in
launch-blocking mode, asynchronous mode (on shared cores and not), and with the graph cut at its
collectives instead (NEURON_SIM_COLLECTIVES_IN_PROGRAMS=0); values equal eager's and the CPU's."""
import os
import subprocess
import sys

import pytest

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "collectives_in_programs_worker.py")


@pytest.mark.parametrize("mode", [
    {},
    {"NEURON_LAUNCH_BLOCKING": "0", "NEURON_SIM_SHARED_CORES": "1"},
    {"NEURON_LAUNCH_BLOCKING": "0", "NEURON_SIM_SHARED_CORES": "0"},
    {"NEURON_SIM_COLLECTIVES_IN_PROGRAMS": "0"},
], ids=["launch-blocking", "async-shared-cores", "async", "cut-at-collectives"])
def test_compiled_collectives_equal_eager_and_the_cpu(mode, tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1", **mode)
    result = subprocess.run([sys.executable, WORKER], cwd=str(tmp_path), env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stdout.count(": ok: ok") == 2, result.stdout


@pytest.mark.parametrize("script", ["failed_program_settles_its_collectives.py", "warm_program_keeps_has_collectives.py"])
def test_review_27_findings_stay_fixed(script, tmp_path):
    """Review 27: (1) a program that fails after issuing a collective waits for it before the
    error goes on (asynchronous mode: the next call reused the arena while the collective still
    ran, wrong values on both ranks); (2) a program with collectives from AOTAutograd's cache is
    recorded has_collectives."""
    path = os.path.join(os.path.dirname(WORKER), script)
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    result = subprocess.run([sys.executable, path], cwd=str(tmp_path), env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
