"""FlexAttention on neuron (Note [FlexAttention on neuron], compile/flex_attention.py): eager and
compiled, forward and backward, with block masks (causal, torchtitan's document masking),
score_mods (ALiBi, a learnable relative bias) and GQA, against the same call on the CPU and the
dense masked computation in float64."""
import warnings

import pytest
import torch
import torch._dynamo
from torch.nn.attention.flex_attention import AuxRequest, and_masks, create_block_mask, create_mask, flex_attention

import torch_neuronx
from torch_neuron_sim.compile import backend

B, H, S, D = 2, 4, 256, 32
TOLERANCE = {torch.float32: dict(rtol=1e-4, atol=1e-5), torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}
DTYPES = [torch.float32, torch.bfloat16]


@pytest.fixture(autouse=True)
def _fresh(fresh_dynamo):
    """Each test compiles afresh (conftest.fresh_dynamo); flex_attention's eager warning is PyTorch's."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        yield


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def document_ids(positions):
    """torchtitan's get_document_mask_mod: a document starts where `positions` resets to 0."""
    return torch.cumsum((positions == 0).int(), dim=1) - 1


def document_causal(doc_ids):
    def same_document(b, h, q_idx, kv_idx):
        return doc_ids[b, q_idx] == doc_ids[b, kv_idx]
    return and_masks(causal, same_document)


def alibi(slopes):
    def score_mod(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)
    return score_mod


def packed_positions():
    """Two rows of packed documents (lengths 100+156 and 60+70+126), as torchtitan packs them."""
    rows = [[100, 156], [60, 70, 126]]
    return torch.stack([torch.cat([torch.arange(n) for n in lengths]) for lengths in rows])


def case(name, device):
    """(score_mod, mask_mod, kv heads) of a named case, its captured tensors on `device`."""
    if name == "causal":
        return None, causal, H
    if name == "document":
        return None, document_causal(document_ids(packed_positions()).to(device)), H
    if name == "alibi":
        slopes = torch.exp2(-torch.arange(1, H + 1, dtype=torch.float32)).to(device)
        return alibi(slopes), causal, H
    if name == "gqa":
        return None, causal, H // 2
    raise ValueError(name)


CASES = ["causal", "document", "alibi", "gqa"]


def inputs(dtype, kv_heads, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, S, D, generator=g)
    k, v = (torch.randn(B, kv_heads, S, D, generator=g) for _ in range(2))
    return [t.to(dtype).to(device).requires_grad_() for t in (q, k, v)]


def masked_scores(q, k, score_mod, mask_mod):
    """The scores after score_mod and the mask (-inf where masked), densely, on the CPU."""
    group = q.shape[1] // k.shape[1]
    scores = q @ k.repeat_interleave(group, 1).transpose(-2, -1) / D ** 0.5
    if score_mod is not None:  # b, h, q_idx and kv_idx broadcast over the scores
        scores = score_mod(scores, *(torch.arange(n).view([-1 if i == dim else 1 for i in range(4)])
                                     for dim, n in enumerate(scores.shape)))
    return scores.masked_fill(~create_mask(mask_mod, B, H, S, S, device="cpu"), float("-inf"))


def dense_reference(q, k, v, score_mod, mask_mod):
    """The dense masked computation in float64 on the CPU, with plain autograd: (out, leaves)."""
    q, k, v = (t.detach().cpu().double().requires_grad_() for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    out = masked_scores(q, k, score_mod, mask_mod).softmax(-1) @ v.repeat_interleave(group, 1)
    return out, (q, k, v)


def run(fn, q, k, v, score_mod, block_mask, kv_heads):
    out = fn(q, k, v, score_mod=score_mod, block_mask=block_mask, enable_gqa=kv_heads != H)
    out.backward(torch.ones_like(out))
    return out.detach(), [t.grad for t in (q, k, v)]


def assert_close(got, expected, dtype):
    torch.testing.assert_close(got.cpu().to(expected.dtype), expected, **TOLERANCE[dtype])


# ---- eager ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", CASES)
def test_eager_equals_the_cpu_and_the_dense_masked_computation(name, dtype):
    score_mod, mask_mod, kv_heads = case(name, "neuron")
    q, k, v = inputs(dtype, kv_heads, "neuron")
    block_mask = create_block_mask(mask_mod, B, None, S, S, device="neuron")
    out, grads = run(flex_attention, q, k, v, score_mod, block_mask, kv_heads)
    assert out.device.type == "neuron" and all(g.device.type == "neuron" for g in grads)

    # the same call on the CPU (PyTorch runs FlexAttention's backward on no CPU: forward only)
    cpu_score_mod, cpu_mask_mod, _ = case(name, "cpu")
    q_cpu, k_cpu, v_cpu = (t.detach().cpu() for t in (q, k, v))
    with torch.no_grad():
        cpu_out = flex_attention(q_cpu, k_cpu, v_cpu, score_mod=cpu_score_mod, enable_gqa=kv_heads != H,
                                 block_mask=create_block_mask(cpu_mask_mod, B, None, S, S, device="cpu"))
    assert_close(out, cpu_out, dtype)

    expected, leaves = dense_reference(q, k, v, cpu_score_mod, cpu_mask_mod)
    expected.backward(torch.ones_like(expected))
    assert_close(out, expected.detach(), dtype)
    for got, leaf in zip(grads, leaves):
        assert_close(got, leaf.grad, dtype)


def test_eager_block_mask_on_neuron_matches_the_cpus():
    """create_block_mask(..., device="neuron") gives the CPU's block structure (torchtitan's
    document mask: blocks across documents are skipped)."""
    doc_ids = document_ids(packed_positions())
    on_neuron = create_block_mask(document_causal(doc_ids.to("neuron")), B, None, S, S, device="neuron")
    on_cpu = create_block_mask(document_causal(doc_ids), B, None, S, S, device="cpu")
    assert on_neuron.kv_num_blocks.device.type == "neuron"
    for got, expected in zip(on_neuron.as_tuple()[:-1], on_cpu.as_tuple()[:-1]):
        if isinstance(expected, torch.Tensor):
            assert torch.equal(got.cpu(), expected)
        else:
            assert got == expected
    assert on_neuron.sparsity() == on_cpu.sparsity() > 0


def test_eager_logsumexp_and_max_scores():
    """return_aux: the logsumexp (natural log, as PyTorch's entry point converts it) and the
    row maxima, which PyTorch does not return on the CPU."""
    score_mod, mask_mod, _ = case("alibi", "neuron")
    q, k, v = (t.detach() for t in inputs(torch.float32, H, "neuron"))
    block_mask = create_block_mask(mask_mod, B, None, S, S, device="neuron")
    _, aux = flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask,
                            return_aux=AuxRequest(lse=True, max_scores=True))
    scores = masked_scores(q.cpu(), k.cpu(), *case("alibi", "cpu")[:2])
    torch.testing.assert_close(aux.lse.cpu(), scores.logsumexp(-1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(aux.max_scores.cpu(), scores.amax(-1), rtol=1e-5, atol=1e-5)


def test_flash_backend_is_refused_with_a_clear_error():
    """kernel_options BACKEND="FLASH" selects CUDA's FlashAttention kernels; on neuron it would
    return a logsumexp in the wrong base (as it does on the CPU), so it is refused, eager and
    compiled."""
    q, k, v = inputs(torch.float32, H, "neuron")
    with pytest.raises(NotImplementedError, match="'BACKEND': 'FLASH'.*CUDA only.*leave BACKEND out"):
        flex_attention(q, k, v, kernel_options={"BACKEND": "FLASH"})
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed, match="'BACKEND': 'FLASH'.*CUDA only"):
        torch.compile(flex_attention, backend="neuron")(q, k, v, kernel_options={"BACKEND": "FLASH"})
    out = flex_attention(q, k, v, kernel_options={"BACKEND": "TRITON"})  # other kernels' options: ignored
    assert out.shape == q.shape


# ---- compiled -------------------------------------------------------------------------------------

def compiled_programs(monkeypatch):
    """The programs compiled from now on, as program.describe() gives them."""
    programs = []
    original = backend.debug.preserve

    def keep(name, gm, program):
        programs.append(program.describe())
        original(name, gm, program)
    monkeypatch.setattr(backend.debug, "preserve", keep)
    return programs


def assert_compiled_attention(programs):
    """A forward and a backward program, both made of ATen ops we run: the attention's matmuls
    and softmax are in them, and nothing fell back to eager."""
    types = [p["metadata"]["graph_type"] for p in programs]
    assert types == ["forward", "backward"], types
    forward, backward = (set(p["ops"]) for p in programs)
    assert {"aten::bmm", "aten::_safe_softmax", "aten::logsumexp"} <= forward, forward
    assert {"aten::bmm", "aten::exp"} <= backward, backward
    assert not any("flex" in op for op in forward | backward)
    assert torch_neuronx.get_fallback_ops() == []


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", CASES)
def test_compiled_equals_eager(name, dtype, monkeypatch):
    score_mod, mask_mod, kv_heads = case(name, "neuron")
    block_mask = create_block_mask(mask_mod, B, None, S, S, device="neuron")  # sorts on the CPU, as TorchNeuron
    eager_out, eager_grads = run(flex_attention, *inputs(dtype, kv_heads, "neuron"), score_mod, block_mask, kv_heads)
    programs = compiled_programs(monkeypatch)
    torch_neuronx.clear_op_tracking()
    out, grads = run(torch.compile(flex_attention, backend="neuron"), *inputs(dtype, kv_heads, "neuron"),
                     score_mod, block_mask, kv_heads)
    assert_compiled_attention(programs)
    assert_close(out, eager_out.cpu(), dtype)
    for got, expected in zip(grads, eager_grads):
        assert_close(got, expected.cpu(), dtype)


class Attention(torch.nn.Module):
    """A torchtitan-style attention layer: projections, FlexAttention with a block mask made by
    the compiled create_block_mask, and a learnable per-head relative bias (a score_mod capturing
    a parameter: its gradient comes out of the attention's backward)."""

    def __init__(self, dim=64, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim, bias=False)
        self.out = torch.nn.Linear(dim, dim, bias=False)
        self.bias = torch.nn.Parameter(torch.linspace(-0.1, 0.1, heads))

    def forward(self, x, block_mask):
        batch, length, dim = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        bias = self.bias

        def relative_bias(score, b, h, q_idx, kv_idx):
            return score + bias[h] * (q_idx - kv_idx) / length
        y = flex_attention(q, k, v, score_mod=relative_bias, block_mask=block_mask)
        return self.out(y.transpose(1, 2).reshape(batch, length, dim))


def train(model, x, block_mask, step, steps=2):
    losses = []
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        loss = step(model, x, block_mask).square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.detach().cpu())
    return torch.stack(losses), [p.detach().cpu() for p in model.parameters()]


def train_eager_and_compiled(reference, x, block_mask, compiled_step, monkeypatch):
    """(eager, compiled, programs): two copies of `reference` on neuron trained from its weights,
    one eagerly, one by `compiled_step`, and the neuron programs compiled for the second."""
    eager_model = type(reference)().to("neuron")
    eager_model.load_state_dict(reference.state_dict())
    eager = train(eager_model, x, block_mask, lambda m, *a: m(*a))
    programs = compiled_programs(monkeypatch)
    compiled_model = type(reference)().to("neuron")
    compiled_model.load_state_dict(reference.state_dict())
    return eager, train(compiled_model, x, block_mask, compiled_step), programs


def assert_trained_alike(compiled, eager, reference):
    torch.testing.assert_close(compiled[0], eager[0], rtol=1e-5, atol=1e-6)
    for got, expected in zip(compiled[1], eager[1]):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    assert not torch.equal(compiled[1][2], reference.bias.detach())  # the bias learned


def test_a_compiled_module_trains_as_eager(monkeypatch):
    torch.manual_seed(0)
    reference = Attention()
    x = torch.randn(B, S, 64).to("neuron")
    doc_ids = document_ids(packed_positions()).to("neuron")
    # torchtitan compiles create_block_mask with the default backend: neuron is selected for it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        block_mask = torch.compile(create_block_mask)(document_causal(doc_ids), B, None, S, S, device="neuron")
    eager, compiled, programs = train_eager_and_compiled(
        reference, x, block_mask, torch.compile(lambda m, *a: m(*a), backend="neuron"), monkeypatch)
    assert [p["metadata"]["graph_type"] for p in programs] == ["forward", "backward"]
    assert_trained_alike(compiled, eager, reference)


def test_compiled_inference_as_torchtitan_compiles_it(monkeypatch):
    """torchtitan compiles flex_attention with Inductor's options and no backend: on neuron tensors
    the neuron backend is selected (one inference program here, under no_grad) and returns the
    logsumexp eager returns."""
    score_mod, mask_mod, _ = case("alibi", "neuron")
    q, k, v = (t.detach() for t in inputs(torch.float32, H, "neuron"))
    block_mask = create_block_mask(mask_mod, B, None, S, S, device="neuron")
    with torch.no_grad():
        eager_out, eager_aux = flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask,
                                              return_aux=AuxRequest(lse=True))
        programs = compiled_programs(monkeypatch)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the backend's selection and options warn once
            compiled = torch.compile(flex_attention, options={"max_autotune": True, "coordinate_descent_tuning": True})
            out, aux = compiled(q, k, v, score_mod=score_mod, block_mask=block_mask, return_aux=AuxRequest(lse=True))
    assert [p["metadata"]["graph_type"] for p in programs] == ["inference"]
    torch.testing.assert_close(out.cpu(), eager_out.cpu(), **TOLERANCE[torch.float32])
    torch.testing.assert_close(aux.lse.cpu(), eager_aux.lse.cpu(), **TOLERANCE[torch.float32])


class RegionalAttention(Attention):
    """Attention whose flex_attention call is marked for regional_inductor, as torchtitan marks it
    when `--compile.backend aot_eager` compiles a model with FlexAttention."""

    def forward(self, x, block_mask):
        import torch.fx.traceback as fx_traceback
        with fx_traceback.annotate({"compile_with_inductor": {"inductor_configs": {}}}):
            return super().forward(x, block_mask)


def test_regional_inductor_region_on_neuron_runs_as_aot_eager(monkeypatch):
    """torchtitan's aot_eager for FlexAttention models: aot_autograd with regional_inductor as the
    forward and backward compilers. Inductor does not generate code for neuron, so the marked
    region runs eagerly with the rest (patch 5 of Note [Patches of torch internals]); training
    gives eager's losses and parameters, and no neuron program is compiled."""
    from torch._dynamo.backends.common import aot_autograd
    from torch.fx.passes import regional_inductor as regional_inductor_module
    from torch.fx.passes.regional_inductor import regional_inductor
    torch.manual_seed(0)
    reference = RegionalAttention()
    x = torch.randn(B, S, 64).to("neuron")
    block_mask = create_block_mask(causal, B, None, S, S, device="neuron")
    aot_eager = aot_autograd(fw_compiler=regional_inductor, bw_compiler=regional_inductor)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        eager, compiled, programs = train_eager_and_compiled(
            reference, x, block_mask, torch.compile(lambda m, *a: m(*a), backend=aot_eager, fullgraph=True),
            monkeypatch)
    assert programs == []
    assert any("Inductor does not generate code for the neuron device" in str(w.message) for w in caught) or \
        getattr(regional_inductor_module._compile_submod, "_warned")
    assert_trained_alike(compiled, eager, reference)
