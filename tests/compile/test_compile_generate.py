"""Hugging Face generation through the compiled forward (static cache), and the Trainer with
torch_compile=True, on neuron (issue 8)."""
import os
import subprocess
import sys

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters
from transformers import AutoModelForCausalLM, CompileConfig

import torch_neuronx
from tiny_models import CONFIGS, build

from conftest import ROOT  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh(fresh_dynamo):
    """Each test compiles afresh (conftest.fresh_dynamo)."""


def on_neuron(model, tmp_path, dtype):
    model.save_pretrained(tmp_path / "model")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "model", dtype=dtype, device_map="neuron")
    assert loaded.device.type == "neuron"
    return loaded


def prompt(length=8, seed=1):
    return torch.randint(1, 128, (1, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("model_type", sorted(CONFIGS))
def test_static_cache_generate_compiles_and_equals_eager_cpu(model_type, dtype, tmp_path):
    model = build(model_type, dtype=dtype)
    ids = prompt()
    expected = model.generate(ids, max_new_tokens=16, do_sample=False, pad_token_id=0)
    neuron_model = on_neuron(model, tmp_path, dtype)
    out = neuron_model.generate(ids.to("neuron"), max_new_tokens=16, do_sample=False, pad_token_id=0,
                                cache_implementation="static")
    compiled = counters["neuron"]["compiled_graphs"]
    assert compiled >= 1, "generate() with a static cache did not compile the forward"
    assert torch.equal(out.cpu(), expected)
    again = neuron_model.generate(ids.to("neuron"), max_new_tokens=16, do_sample=False, pad_token_id=0,
                                  cache_implementation="static")
    assert torch.equal(again.cpu(), expected)
    assert counters["neuron"]["compiled_graphs"] == compiled, "a second generate() with the same shapes compiled"


def test_chunked_prefill_runs_through_the_compiled_forward(tmp_path):
    model = build("llama")
    ids = prompt(length=20, seed=4)
    expected = model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0)
    neuron_model = on_neuron(model, tmp_path, torch.float32)
    out = neuron_model.generate(ids.to("neuron"), max_new_tokens=8, do_sample=False, pad_token_id=0,
                                cache_implementation="static", prefill_chunk_size=8)
    assert torch.equal(out.cpu(), expected)
    names = [r.graph_name for r in torch_neuronx.get_dynamo_metrics()]
    assert names, "nothing was compiled"


def test_compile_config_fullgraph(tmp_path):
    model = build("qwen3")
    ids = prompt()
    expected = model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0)
    neuron_model = on_neuron(model, tmp_path, torch.float32)
    out = neuron_model.generate(ids.to("neuron"), max_new_tokens=8, do_sample=False, pad_token_id=0,
                                cache_implementation="static",
                                compile_config=CompileConfig(backend="neuron", fullgraph=True))
    assert torch.equal(out.cpu(), expected)
    assert counters["neuron"]["compiled_graphs"] >= 1


def test_run_generate_example_unchanged_on_the_demo_model(tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1", TORCH_NEURONX_NEFF_CACHE_DIR=str(tmp_path / "cache"))
    result = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "run_generate.py"),
                             os.path.join(ROOT, "demo", "model"), "To read a file, use"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("To read a file, use")
    assert len(result.stdout.split()) > 10
    # It compiled: the program cache holds the compiled graphs.
    programs = [f for _, _, files in os.walk(tmp_path / "cache") for f in files if f.endswith(".neff")]
    assert programs


def test_trainer_with_torch_compile_trains_on_neuron(tmp_path):
    from transformers import Trainer, TrainingArguments

    model = build("llama").train()
    rows = torch.randint(1, 128, (16, 12), generator=torch.Generator().manual_seed(5))
    data = [{"input_ids": row, "labels": row} for row in rows]
    args = TrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, num_train_epochs=1,
                             learning_rate=1e-3, logging_steps=1, report_to=[], torch_compile=True,
                             save_strategy="no", use_cpu=False, dataloader_pin_memory=False)
    trainer = Trainer(model=model, args=args, train_dataset=data)
    assert trainer.args.device.type == "neuron"
    assert args.torch_compile_backend == "neuron"
    result = trainer.train()
    assert result.global_step == 4
    assert torch.isfinite(torch.tensor(result.training_loss))
    graph_types = {r.graph_name.split("_")[-2] for r in torch_neuronx.get_dynamo_metrics()}
    assert {"forward", "backward"} <= graph_types, graph_types
