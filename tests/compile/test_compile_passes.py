"""Note [Propagating only what changed] (compile/passes.py): after the passes, every node's fake
value has the metadata and the aliasing (which earlier value's storage it uses) that a
whole-graph propagation gives it, so the lowering plans the same memory."""
import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

import torch_neuronx  # noqa: F401
from torch_neuron_sim.compile import passes
from tiny_models import CONFIGS, build


@pytest.fixture(autouse=True)
def _fresh(fresh_dynamo):
    """Each test compiles afresh (conftest.fresh_dynamo)."""


def layout(gm):
    """Per node: (dtype, shape, stride, offset, the first node whose value shares its storage)."""
    owners, rows = {}, []
    for node in gm.graph.nodes:
        if node.op == "output":  # its value is not read (a whole-graph propagation sets one)
            continue
        val = node.meta.get("val")
        items = val if isinstance(val, (list, tuple)) else [val]
        row = []
        for t in items:
            if isinstance(t, torch.Tensor):
                owner = owners.setdefault(t.untyped_storage()._cdata, node.name)
                row.append((t.dtype, tuple(t.shape), t.stride(), t.storage_offset(), owner))
            else:
                row.append(t if isinstance(t, (int, float, bool, type(None))) else type(t).__name__)
        rows.append((node.name, str(node.target), tuple(row)))
    return rows


@pytest.fixture
def compared(monkeypatch):
    """Before constant folding (the last pass that changes values), keeps the graph's layout,
    propagates the whole graph again and keeps that layout too; also counts the incremental
    propagations that fell back to a whole-graph one."""
    seen = []
    run_passes, fold, propagate = passes.run_passes, passes.fold_constants, passes._propagate
    calls = {"whole": 0, "stats": None}

    def counting_propagate(gm):
        calls["whole"] += 1
        return propagate(gm)

    def compare_then_fold(gm):
        incremental = layout(gm)
        fell_back = calls["whole"]
        propagate(gm)
        seen.append((incremental, layout(gm), fell_back))
        return fold(gm)

    def counting_passes(gm, on_device_ops):
        calls["whole"] = 0
        stats = run_passes(gm, on_device_ops)
        seen[-1] = (stats,) + seen[-1]
        return stats
    monkeypatch.setattr(passes, "_propagate", counting_propagate)
    monkeypatch.setattr(passes, "fold_constants", compare_then_fold)
    monkeypatch.setattr(passes, "run_passes", counting_passes)
    return seen


def test_static_cache_decode_graph_propagates_like_the_whole_graph(compared, tmp_path, monkeypatch):
    """A Llama decode step: 64-bit position arithmetic narrowed and widened, the static KV cache
    updated in place (views of the cache read after it)."""
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path))
    model = build("llama", dtype=torch.bfloat16).to("neuron")
    ids = torch.randint(1, 128, (1, 8), generator=torch.Generator().manual_seed(1)).to("neuron")
    model.generate(ids, max_new_tokens=3, do_sample=False, pad_token_id=0, cache_implementation="static")
    assert counters["neuron"]["compiled_graphs"] >= 1
    rewritten = [(stats, fell_back) for stats, inc, whole, fell_back in compared
                 if stats["narrowed_64bit"] or stats["reinplaced"]]
    assert rewritten, [stats for stats, *_ in compared]
    assert any(stats["reinplaced"] for stats, _ in rewritten)
    assert all(fell_back == 0 for _, fell_back in rewritten), rewritten  # recomputed alone, no whole pass
    for stats, incremental, whole, _ in compared:
        assert incremental == whole, stats


def test_narrowed_results_read_through_views_propagate_like_the_whole_graph(compared, tmp_path, monkeypatch):
    """An int64 sum narrowed to 32 bits and widened back, whose result is read through views and
    by a 64-bit op that is not narrowed."""
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path))

    def f(positions, offsets, x):
        p = positions + offsets            # narrowed
        q = p.view(2, 4).t()               # views of the widened result
        return x[q.reshape(-1)] * 2, q.sum(), (p * 3_000_000_000)  # the last one stays 64-bit

    positions = torch.arange(8, device="neuron")
    offsets = torch.full((8,), 5, device="neuron")
    x = torch.randn(16, 3, device="neuron")
    got = torch.compile(f, backend="neuron")(positions, offsets, x)
    expected = f(positions.cpu(), offsets.cpu(), x.cpu())
    for g, e in zip(got, expected):
        assert torch.equal(g.cpu(), e)
    ((stats, incremental, whole, fell_back),) = compared
    assert stats["narrowed_64bit"] >= 1 and fell_back == 0, (stats, fell_back)
    assert incremental == whole
