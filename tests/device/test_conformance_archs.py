"""Causal-LM architecture conformance on a fixed subset: tiny random models, CPU versus neuron.

The same checks as the full sweep (`python -m conformance.arch_sweep`, results in COMPAT.md):
forward logits within rtol = atol = 1e-4, and 16 greedy new tokens identical to CPU's with the
default cache and with a static cache.
"""
import os
import sys

import pytest

from conftest import ROOT  # noqa: E402

sys.path.insert(0, ROOT)

from conformance.arch_sweep import ATOL, NEW_TOKENS, OK, check_architecture  # noqa: E402

ARCHITECTURES = ["llama", "qwen3", "mistral", "gemma3_text", "phi3", "gpt2", "qwen2", "olmo"]


@pytest.mark.parametrize("model_type", ARCHITECTURES)
def test_architecture_matches_cpu(model_type):
    res = check_architecture(model_type)
    why = "; ".join(res["reason"])
    assert res["cpu_ok"], f"the CPU reference failed: {why}"
    assert res["params"] and res["params"] < 2_000_000
    assert res["forward"] == OK, why
    assert res["max_abs_diff"] is not None and res["max_abs_diff"] <= ATOL * 10, why
    assert res["generate"] == OK, why
    assert res["static"] == OK, why  # all eight support a static cache
    assert res["neuron_ok"], why


def test_generation_really_generates(neuron):
    """The harness's generation config really gives NEW_TOKENS greedy tokens, on neuron."""
    import torch
    from conformance.arch_sweep import build_model, generation_config, make_inputs

    model = build_model("llama").to(neuron)
    ids = make_inputs(model, "llama", 1, 8, seed=2).to(neuron)
    model.generation_config = generation_config(model, "static", "llama")
    assert model.generation_config.eos_token_id is None
    assert model.generation_config.disable_compile
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids))
    assert out.device.type == "neuron"
    assert out.shape == (1, 8 + NEW_TOKENS)
    assert torch.equal(out[:, :8].cpu(), ids.cpu())
