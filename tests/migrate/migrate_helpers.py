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
