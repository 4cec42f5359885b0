"""Variable-length attention on neuron: torch.nn.attention.varlen.varlen_attn (torchtitan's
VarlenAttention) calls aten::_flash_attention_forward / _backward, FlashAttention's kernels, which
PyTorch ships for CUDA only (the CPU raises NotImplementedError). Neuron has them (Note
[FlashAttention's ops on neuron], csrc/kernels/VarlenAttention.cpp); each result here is checked
against the dense masked computation of every sequence on its own, in float64 on the CPU."""
import math
import textwrap

import pytest
import torch
import torch_neuronx  # noqa: F401
from torch.nn.attention.varlen import AuxRequest, varlen_attn

from conftest import run_python

D = "neuron"


def reference(q, k, v, cu_q, cu_k, window=(-1, -1), scale=None, seqused_k=None):
    """Each sequence attends to its own keys only; FlashAttention's window aligned to the bottom
    right (query i of sq, key j of sk: i + sk - sq - left <= j <= i + sk - sq + right). Returns the
    output [Tq, Hq, D] and logsumexp [Hq, Tq] (+inf for a row with no key), in float64."""
    q, k, v = (t.double() for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    out = torch.zeros_like(q)
    lse = torch.full((q.shape[1], q.shape[0]), math.inf, dtype=torch.float64)
    scale = scale if scale is not None else 1 / math.sqrt(q.shape[-1])
    for b in range(len(cu_q) - 1):
        q0, q1, k0, k1 = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b]), int(cu_k[b + 1])
        if seqused_k is not None:
            k1 = k0 + int(seqused_k[b])
        sq, sk = q1 - q0, k1 - k0
        if sq == 0:
            continue
        qs = q[q0:q1].transpose(0, 1)
        ks = k[k0:k1].transpose(0, 1).repeat_interleave(group, 0)
        vs = v[k0:k1].transpose(0, 1).repeat_interleave(group, 0)
        scores = qs @ ks.transpose(1, 2) * scale
        i = torch.arange(sq)[:, None] + sk - sq
        j = torch.arange(sk)[None, :]
        allowed = torch.ones(sq, sk, dtype=torch.bool)
        if window[1] >= 0:
            allowed &= j <= i + window[1]
        if window[0] >= 0:
            allowed &= j >= i - window[0]
        scores = scores.masked_fill(~allowed, -math.inf)
        row_lse = torch.logsumexp(scores, -1)
        empty = torch.isneginf(row_lse)
        probs = torch.where(empty[..., None], 0.0, (scores - row_lse[..., None]).exp())
        out[q0:q1] = (probs @ vs).transpose(0, 1)
        lse[:, q0:q1] = torch.where(empty, math.inf, row_lse)
    return out, lse


def packed(lengths_q, lengths_k=None, heads=4, kv_heads=4, dim=16, dtype=torch.float32, seed=0):
    lengths_k = lengths_k or lengths_q
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(sum(lengths_q), heads, dim, generator=g).to(dtype)
    k = torch.randn(sum(lengths_k), kv_heads, dim, generator=g).to(dtype)
    v = torch.randn(sum(lengths_k), kv_heads, dim, generator=g).to(dtype)
    cu_q = torch.tensor([0] + list(torch.tensor(lengths_q).cumsum(0)), dtype=torch.int32)
    cu_k = torch.tensor([0] + list(torch.tensor(lengths_k).cumsum(0)), dtype=torch.int32)
    return q, k, v, cu_q, cu_k


TOL = {torch.float32: dict(atol=2e-5, rtol=2e-5), torch.bfloat16: dict(atol=2e-2, rtol=2e-2)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("window", [(-1, 0), (-1, -1), (3, 0), (2, 1)], ids=["causal", "full", "sliding", "both"])
@pytest.mark.parametrize("kv_heads", [4, 2], ids=["mha", "gqa"])
def test_varlen_attn_forward_and_backward_equal_each_sequence_attending_alone(dtype, window, kv_heads):
    q, k, v, cu_q, cu_k = packed([5, 1, 9, 3], kv_heads=kv_heads, dtype=dtype)
    want_out, want_lse = reference(q, k, v, cu_q, cu_k, window)
    leaves = [t.to(D).requires_grad_() for t in (q, k, v)]
    out, lse = varlen_attn(*leaves, cu_q.to(D), cu_k.to(D), 9, 9, window_size=window,
                           enable_gqa=kv_heads != 4, return_aux=AuxRequest(lse=True))
    assert out.dtype == dtype and out.shape == q.shape and lse.shape == (4, q.shape[0]) and lse.dtype == torch.float32
    torch.testing.assert_close(out.cpu().double(), want_out, **TOL[dtype])
    torch.testing.assert_close(lse.cpu().double(), want_lse, **TOL[dtype])

    grad = torch.randn(q.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    out.backward(grad.to(D))
    ref = [t.double().requires_grad_() for t in (q, k, v)]
    reference(*ref, cu_q, cu_k, window)[0].backward(grad.double())
    for name, got, want in zip("qkv", leaves, ref):
        assert got.grad.dtype == dtype, name
        torch.testing.assert_close(got.grad.cpu().double(), want.grad, **TOL[dtype], msg=lambda m: f"d{name}: {m}")


def test_cross_attention_lengths_rows_without_keys_and_unused_tail():
    """Queries and keys of different lengths per sequence (bottom-right causal alignment), a
    causal row that sees no key (zero output, logsumexp +inf, as CUDA's kernel), an empty
    sequence, and packed rows past the last offset (zero, untouched by any sequence)."""
    q, k, v, cu_q, cu_k = packed([4, 0, 3], [2, 3, 6])
    q = torch.cat([q, torch.randn(2, 4, 16)])  # two rows past cu_q[-1]
    out, lse, rng, unused, debug = torch.ops.aten._flash_attention_forward(
        q.to(D), k.to(D), v.to(D), cu_q.to(D), cu_k.to(D), 4, 6, 0.0, True, False)
    want_out, want_lse = reference(q, k, v, cu_q, cu_k, (-1, 0))
    torch.testing.assert_close(out.cpu().double(), want_out, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(lse.cpu().double(), want_lse, atol=2e-5, rtol=2e-5)
    assert torch.isinf(lse[:, 0]).all() and torch.isinf(lse[:, 1]).all()  # 4 queries, 2 keys: rows 0, 1 see none
    assert (out[:2].cpu() == 0).all() and (out[-2:].cpu() == 0).all()
    assert rng.dtype == torch.uint64 and rng.shape == (2,) and unused.shape == () and debug.numel() == 0


def test_dense_layout_and_seqused_k():
    """Without offsets the inputs are [B, S, H, D] and logsumexp [B, H, S] (CUDA's dense path);
    seqused_k keeps the first keys of each sequence (a KV cache slot larger than its contents)."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 5, 4, 8, generator=g) for _ in range(3))
    out, lse, *_ = torch.ops.aten._flash_attention_forward(q.to(D), k.to(D), v.to(D), None, None, 5, 5, 0.0, True,
                                                            False, scale=0.3)
    cu = torch.tensor([0, 5, 10], dtype=torch.int32)
    want_out, want_lse = reference(q.reshape(10, 4, 8), k.reshape(10, 4, 8), v.reshape(10, 4, 8), cu, cu, (-1, 0), 0.3)
    torch.testing.assert_close(out.cpu().double().reshape(10, 4, 8), want_out, atol=2e-5, rtol=2e-5)
    assert lse.shape == (2, 4, 5)
    torch.testing.assert_close(lse.cpu().double().permute(1, 0, 2).reshape(4, 10), want_lse, atol=2e-5, rtol=2e-5)

    q, k, v, cu_q, cu_k = packed([1, 1], [6, 6])
    used = torch.tensor([4, 2], dtype=torch.int32)
    out = varlen_attn(q.to(D), k.to(D), v.to(D), cu_q.to(D), cu_k.to(D), 1, 6, seqused_k=used.to(D))
    torch.testing.assert_close(out.cpu().double(), reference(q, k, v, cu_q, cu_k, seqused_k=used)[0],
                               atol=2e-5, rtol=2e-5)


def test_float64_inputs_keep_a_float32_logsumexp_eager_and_compiled():
    """Review 28: the 64-bit rule widened every result of the kernel back to float64; the logsumexp
    is float32 in CUDA's contract, PyTorch's meta function and the compiled path."""
    q, k, v, cu_q, cu_k = packed([2, 4], dtype=torch.float64)
    args = [t.to(D) for t in (q, k, v, cu_q, cu_k)]
    out, lse, *_ = torch.ops.aten._flash_attention_forward(*args, 4, 4, 0.0, True, False)
    assert out.dtype == torch.float64 and lse.dtype == torch.float32

    def f(q, k, v, cu_q, cu_k):
        return varlen_attn(q, k, v, cu_q, cu_k, 4, 4, window_size=(-1, 0), return_aux=AuxRequest(lse=True))[1]

    assert f(*args).dtype == torch.compile(f, backend="neuron", fullgraph=True)(*args).dtype == torch.float32
    torch.testing.assert_close(lse.cpu().double(), reference(q, k, v, cu_q, cu_k, (-1, 0))[1], atol=2e-5, rtol=2e-5)


def test_no_dropout_inplace_overload_writes_out():
    q, k, v, cu_q, cu_k = packed([3, 4])
    out = torch.empty_like(q, device=D)
    lse = torch.ops.aten._flash_attention_forward_no_dropout_inplace(out, q.to(D), k.to(D), v.to(D), cu_q.to(D),
                                                                     cu_k.to(D), 4, 4, 0.0, True, False)
    want_out, want_lse = reference(q, k, v, cu_q, cu_k, (-1, 0))
    torch.testing.assert_close(out.cpu().double(), want_out, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(lse.cpu().double(), want_lse, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("call, message", [
    (lambda q, k, v, c: torch.ops.aten._flash_attention_forward(q, k, v, c, c, 4, 4, 0.1, True, False),
     "dropout_p=0.1 is not supported"),
    (lambda q, k, v, c: torch.ops.aten._flash_attention_forward(q, k[:, :3], v[:, :3], c, c, 4, 4, 0.0, True, False),
     "must be a multiple of the key/value's 3"),
    (lambda q, k, v, c: torch.ops.aten._flash_attention_forward(q, k, v, c, None, 4, 4, 0.0, True, False),
     "give both cum_seq_q and cum_seq_k"),
    (lambda q, k, v, c: torch.ops.aten._flash_attention_forward(q, k, v, c * 2, c, 4, 4, 0.0, True, False),
     "offsets must rise and stay within"),
    (lambda q, k, v, c: torch.ops.aten._flash_attention_forward(q, k, v[..., :8], c, c, 4, 4, 0.0, True, False),
     "with the query's head size 16"),
    (lambda q, k, v, c: torch.ops.aten._flash_attention_forward(q, k, v, c, c, 4, 4, 0.0, True, False,
                                                                alibi_slopes=torch.ones(4, device=D)),
     "alibi_slopes are not supported"),
    (lambda q, k, v, c: torch.ops.aten._flash_attention_forward(q, k, v.double(), c, c, 4, 4, 0.0, True, False),
     "need one dtype"),
    (lambda q, k, v, c: torch.ops.aten._flash_attention_forward(q[..., :0], k[..., :0], v[..., :0], c, c, 4, 4, 0.0,
                                                                True, False),
     "a head size of 1 or more"),  # review 28: 1/sqrt(0) made the logsumexp NaN
], ids=["dropout", "heads", "one-offsets", "offsets-out-of-range", "value-head-size", "alibi", "dtypes",
        "head-size-0"])
def test_bad_input_is_refused_with_what_was_wrong(call, message):
    q, k, v, cu, _ = packed([4, 4])
    with pytest.raises(RuntimeError, match=message):
        call(q.to(D), k.to(D), v.to(D), cu.to(D))


def test_asynchronous_mode_and_compiled_graphs():
    """Queued kernels (NEURON_LAUNCH_BLOCKING=0), a compiled training step through varlen_attn's
    custom ops and a compiled call of the aten op give the eager values (compiled, both become
    neuron::flash_attention_forward/_backward, which have CPU kernels for the program's steps)."""
    code = textwrap.dedent("""
        import torch, torch_neuronx
        from torch.nn.attention.varlen import varlen_attn
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(12, 4, 16, generator=g) for _ in range(3))
        cu = torch.tensor([0, 5, 12], dtype=torch.int32, device="neuron")

        def step(q, k, v):
            return varlen_attn(q, k, v, cu, cu, 7, 7, window_size=(-1, 0)).square()

        results = {}
        for mode, fn in (("eager", step), ("compiled", torch.compile(step, backend="neuron", fullgraph=True))):
            for _ in range(3):  # the first call of a signature runs inline; later ones are queued
                leaves = [t.to("neuron").requires_grad_() for t in (q, k, v)]
                out = fn(*leaves)
                out.sum().backward()  # the compiled backward program
            results[mode] = [out.detach().cpu()] + [t.grad.cpu() for t in leaves]
        for got, want in zip(results["compiled"], results["eager"]):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        # the aten op called by name in a compiled graph (dense layout, sliding window)
        def direct(q, k, v):
            return torch.ops.aten._flash_attention_forward(q, k, v, None, None, 6, 6, 0.0, False, False,
                                                           window_size_left=2, window_size_right=0)[:2]
        args = [t.reshape(2, 6, 4, 16).to("neuron") for t in (q, k, v)]
        for got, want in zip(torch.compile(direct, backend="neuron", fullgraph=True)(*args), direct(*args)):
            torch.testing.assert_close(got.cpu(), want.cpu(), atol=1e-5, rtol=1e-5)
        print("OK")
    """)
    result = run_python(code, env={"NEURON_LAUNCH_BLOCKING": "0"})
    assert result.returncode == 0, result.stderr[-4000:]
    assert "OK" in result.stdout
