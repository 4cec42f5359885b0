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


@pytest.fixture
def neuron():
    return torch.device("neuron")
