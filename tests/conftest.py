import os
import subprocess
import sys
import warnings

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import torch_neuronx  # noqa: E402,F401


def run_python(code, env=None, timeout=120):
    """Runs `code` in a fresh interpreter (for settings read at start-up); returns the result."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True,
                          text=True, timeout=timeout)


TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
# Helpers shared by several feature folders (tiny_models.py) live here, beside this file; a
# feature's own helpers live in its folder, which pytest puts on sys.path for that folder's
# files (the default "prepend" import mode, no __init__.py: every basename must be unique).
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)

# Set in a run of a test file under every_op_queued(): the file's own re-run test skips.
QUEUED_RUN = os.environ.get("NEURON_LAUNCH_BLOCKING") == "0" and os.environ.get("NEURON_SIM_INLINE_BYTES") == "0"


def every_op_queued(test_file):
    """Runs the test file `test_file` again in asynchronous mode with every op queued
    (NEURON_LAUNCH_BLOCKING=0, NEURON_SIM_INLINE_BYTES=0) and asserts that it passes."""
    env = dict(os.environ, NEURON_LAUNCH_BLOCKING="0", NEURON_SIM_INLINE_BYTES="0", NEURON_SIM_SHARED_CORES="0")
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test_file],
                            env=env, capture_output=True, text=True, timeout=900, cwd=TESTS)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def regression_scripts(folder):
    """The repro scripts in `folder` (a feature's regressions/), by name; files starting with
    "_" are their helpers."""
    return sorted(f for f in os.listdir(folder) if f.endswith(".py") and not f.startswith("_"))


# A repro exits with this code when what it checks does not apply on this machine (a CPU
# feature it needs is missing), after checking what does apply; its last line says why.
NOT_APPLICABLE = 77


def run_regression_script(path, tmp_path):
    """Runs the repro script at `path` in its own process (a fresh program cache, offline, its
    folder first on sys.path) and asserts it exits 0: the behaviour it checks holds (exit 77:
    skipped, with the reason it printed)."""
    script = os.path.basename(path)
    env = dict(os.environ, TORCH_NEURONX_NEFF_CACHE_DIR=str(tmp_path / "cache"), HF_HUB_OFFLINE="1")
    result = subprocess.run([sys.executable, path], cwd=str(tmp_path), env=env,
                            capture_output=True, text=True, timeout=600)
    if result.returncode == NOT_APPLICABLE:
        pytest.skip(f"{script}: " + (result.stdout.strip().splitlines() or ["not applicable here"])[-1])
    assert result.returncode == 0, f"{script}:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"


@pytest.fixture
def neuron():
    return torch.device("neuron")


@pytest.fixture
def fresh_dynamo(tmp_path, monkeypatch):
    """A compile test's clean slate: Dynamo reset, no dynamo metrics or counters, its own
    program cache folder and its own AOTAutograd cache folder (test_compile*.py use it for every
    test)."""
    from torch._dynamo.utils import counters
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "neff_cache"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor_cache"))
    torch._dynamo.reset()
    torch_neuronx.reset_dynamo_metrics()
    counters.clear()
    yield
    torch._dynamo.reset()
