"""Sliding-window models compile once (Note [Sliding-window static caches compile once],
python/torch_neuron_sim/compile/transformers_patches.py): a static-cache generate of 32 tokens,
past the window, is at most a prefill and a decode program, with the tokens of the eager
generate; COMPAT.md's "graphs for 32 tokens" column keeps that for every architecture."""
import os
import re
import sys

import pytest
import torch

from conftest import ROOT  # noqa: E402

sys.path.insert(0, ROOT)

from conformance.arch_sweep import COMPILED_TOKENS, GRAPHS_COLUMN, MAX_GRAPHS, OK, build_model, make_inputs  # noqa: E402
from conformance.tiny_configs import SLIDING_WINDOW  # noqa: E402

# every family of sliding-window layer in COMPAT.md: Mistral's window on every layer, Gemma 2/3,
# Cohere 2 and gpt-oss alternating windowed and full layers, OLMo 3, EXAONE 4
ARCHITECTURES = ["mistral", "ministral", "gemma2", "gemma3_text", "cohere2", "gpt_oss", "olmo3", "exaone4"]


def _generate(model, ids, compiled, new_tokens=COMPILED_TOKENS):
    with torch.no_grad():
        return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                              do_sample=False, eos_token_id=None, pad_token_id=0,
                              cache_implementation="static", disable_compile=not compiled).cpu()


def _graphs():
    from torch._dynamo.utils import counters
    return int(counters["neuron"]["compiled_graphs"])


@pytest.fixture
def fresh_dynamo():
    import torch._dynamo
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("prompt", [8, SLIDING_WINDOW + 4], ids=["window-fills-in-decode", "prompt-past-window"])
@pytest.mark.parametrize("model_type", ARCHITECTURES)
def test_sliding_window_generate_is_one_prefill_and_one_decode_program(model_type, prompt, fresh_dynamo):
    model = build_model(model_type).to("neuron")
    ids = make_inputs(model, model_type, 1, prompt, seed=2).to("neuron")
    eager = _generate(model, ids, compiled=False)
    before = _graphs()
    compiled = _generate(model, ids, compiled=True)
    assert torch.equal(compiled, eager), f"{model_type}: compiled tokens differ from eager across the window"
    assert 1 <= _graphs() - before <= MAX_GRAPHS, f"{model_type}: {_graphs() - before} graphs for {COMPILED_TOKENS} tokens"
    # a second generation reuses the cache (reset) and the programs: nothing compiles again
    before = _graphs()
    assert torch.equal(_generate(model, ids, compiled=True), eager)
    assert _graphs() == before


def test_a_batch_of_two_prompts_crosses_the_window_compiled_as_eager(fresh_dynamo):
    model = build_model("mistral").to("neuron")
    ids = make_inputs(model, "mistral", 2, 8, seed=3).to("neuron")
    eager = _generate(model, ids, compiled=False)
    before = _graphs()
    assert torch.equal(_generate(model, ids, compiled=True), eager)
    assert _graphs() - before <= MAX_GRAPHS


def test_the_layers_length_is_read_from_the_device_after_compiled_steps(fresh_dynamo):
    """After compiled one-token updates only the device knows the length: the property reads it,
    and what generate's masks ask of the layer matches transformers' own arithmetic."""
    from transformers.cache_utils import StaticSlidingWindowLayer
    layer = StaticSlidingWindowLayer(max_cache_len=64, sliding_window=4)
    k = torch.randn(1, 2, 3, 8, device="neuron")
    layer.update(k, k)  # prefill of 3: transformers' own update
    assert layer.cumulative_length_int == 3 and int(layer.cumulative_length) == 3

    @torch.compile(backend="neuron", dynamic=False, fullgraph=True)
    def step(layer, k):
        return layer.update(k, k)

    reference = StaticSlidingWindowLayer(max_cache_len=64, sliding_window=4)  # transformers' code, on CPU
    reference.update(k.cpu(), k.cpu())
    before = _graphs()
    for i in range(5):  # fills the window at the second step, then rolls
        one = torch.full((1, 2, 1, 8), float(i + 1), device="neuron")
        keys, values = step(layer, one)
        want_keys, _ = reference.update(one.cpu(), one.cpu())
        assert torch.equal(keys.cpu(), want_keys), f"step {i}"
        assert layer.__dict__["_host_length"] is None  # counted on the device only
        assert layer.cumulative_length_int == reference.cumulative_length_int == 4 + i
        assert layer.get_mask_sizes(1) == reference.get_mask_sizes(1)
    assert _graphs() - before == 1
    layer.reset()
    assert layer.cumulative_length_int == 0 and int(layer.cumulative_length) == 0


def test_other_devices_run_transformers_own_update():
    """The patch changes nothing off neuron: a CPU layer never takes the tensor path, and its int
    is the host's (no device read)."""
    from transformers.cache_utils import StaticSlidingWindowLayer
    layer = StaticSlidingWindowLayer(max_cache_len=64, sliding_window=4)
    for n in (3, 1, 1, 1):
        layer.update(torch.randn(1, 2, n, 8), torch.randn(1, 2, n, 8))
    assert layer.__dict__["_host_length"] == 6 == layer.cumulative_length_int
    assert int(layer.cumulative_length) == 4  # upstream advances the tensor only while not full (3, then 1)


def test_compat_records_at_most_two_graphs_for_every_compiled_architecture():
    """COMPAT.md (python -m conformance.arch_sweep): every architecture whose static-cache generate
    compiles does so in at most MAX_GRAPHS programs for COMPILED_TOKENS tokens, sliding windows
    included, and none hits Dynamo's recompile limit."""
    with open(os.path.join(ROOT, "COMPAT.md")) as handle:
        lines = handle.read().splitlines()
    header = next(line for line in lines if line.startswith("| model_type |"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    assert GRAPHS_COLUMN in columns, f"COMPAT.md has no column {GRAPHS_COLUMN!r}: rerun the sweep"
    compiled_at, graphs_at = columns.index("static cache, compiled"), columns.index(GRAPHS_COLUMN)
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines
            if re.match(r"\| [a-z0-9_\-]+ \|", line) and not line.startswith("| model_type")]
    compiled = [r for r in rows if r[compiled_at] == OK]
    assert len(compiled) >= 100
    over = {r[0]: r[graphs_at] for r in compiled if not (r[graphs_at].isdigit() and 1 <= int(r[graphs_at]) <= MAX_GRAPHS)}
    assert not over, f"more than {MAX_GRAPHS} programs for {COMPILED_TOKENS} tokens: {over}"
    assert not [r[0] for r in rows if r[compiled_at] == "recompile limit" and r[0] in ARCHITECTURES]
