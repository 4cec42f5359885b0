"""Shared by tests/migrate/test_migrate_*.py: workload files written into a temporary folder and
neuron-migrate runs made in-process through its command-line entry point."""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))  # the repository
sys.path.insert(0, os.path.join(ROOT, "python"))
DATA = os.path.join(HERE, "data", "migrate")
DEMO_MODEL = os.path.join(ROOT, "demo", "model")
QWEN_27B = os.path.join(HERE, "data", "qwen3_5_27b")

from neuron_migrate.cli import main  # noqa: E402

import torch  # noqa: E402


class _Properties:
    name, total_memory = "Fake H200", 141 * 2**30


class FakeCudaLike:
    """torch.cuda before CUDA is initialised: device_count() and is_available() answer, the
    memory and property functions raise RuntimeError("Invalid device argument") until init()."""

    def __init__(self, missing=()):
        self.initialised, self.calls, self.peaks = False, [], {0: 0, 1: 0}
        for name in missing:
            setattr(self, name, None)

    def is_available(self):
        return True

    def device_count(self):
        return 2

    def is_initialized(self):
        return self.initialised

    def init(self):
        self.calls.append("init")
        self.initialised = True

    def _ready(self, name, index=0):
        if not self.initialised:
            raise RuntimeError("Invalid device argument : did you call init?")
        if not 0 <= index < 2:
            raise RuntimeError("Invalid device argument")
        self.calls.append(name)

    def reset_peak_memory_stats(self, index=0):
        self._ready("reset_peak_memory_stats", index)

    def max_memory_allocated(self, index=0):
        self._ready("max_memory_allocated", index)
        return self.peaks[index]

    def memory_allocated(self, index=0):
        self._ready("memory_allocated", index)
        return 0

    def get_device_properties(self, index=0):
        self._ready("get_device_properties", index)
        return _Properties()

    def synchronize(self):
        self._ready("synchronize")

    def get_rng_state(self, device="cuda"):
        self._ready("get_rng_state")
        return torch.zeros(16, dtype=torch.uint8)

    def set_rng_state(self, state, device="cuda"):
        self._ready("set_rng_state")


def write(folder, name, text):
    path = os.path.join(folder, name)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    return path


def tiny_llama_folder(folder):
    """A tiny Llama config (random weights at run time) in `folder`/tinyllama."""
    import tiny_models
    from transformers import AutoConfig
    path = os.path.join(folder, "tinyllama")
    AutoConfig.for_model("llama", **tiny_models.CONFIGS["llama"]).save_pretrained(path)
    return path


def run(workload_path, out, *extra):
    """Runs `neuron-migrate run` in this process; returns (exit status, report dict)."""
    status = main(["run", workload_path, "--out", out, "--no-progress", *extra])
    with open(os.path.join(out, "report.json"), encoding="utf-8") as handle:
        return status, json.load(handle)
