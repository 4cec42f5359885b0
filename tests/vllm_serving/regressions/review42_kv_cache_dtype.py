"""review42: a KV cache dtype other than the model's crashes the first request (or is silently garbage).

Bug: NeuronAttentionBackend advertises supported_kv_cache_dtypes = ["auto", "float16", "bfloat16",
"float32"], and NeuronPlatform.get_attn_backend_cls returns the backend for *any* selector config
(vLLM leaves validation of an out-of-tree backend to the platform; CUDA/ROCm call
backend.validate_configuration). NeuronAttentionImpl.forward writes the new keys/values into the cache
in the cache's dtype (`.to(slots.dtype)`) but then feeds the gathered cache, still in that dtype, to
scaled_dot_product_attention together with the query in the model's dtype. With
`LLM(..., dtype="float32", kv_cache_dtype="bfloat16")` the engine starts, then the first request dies:
    RuntimeError: Expected query, key, and value to have the same dtype ... query.dtype: float
    key.dtype: c10::BFloat16
(checked end to end on the demo model). An "fp8" cache (allocated as uint8 by vLLM) is accepted
too: the new keys are cast to uint8 (garbage) and SDPA then fails the same way.

Expected: a supported cache dtype works (the gathered K/V cast to the query's dtype, as vLLM CPU's
kernel converts cache elements on load), and an unsupported one (fp8...) is refused when the backend
is selected, with a clear message, instead of crashing the serving engine at its first step.

Fix: in forward, `k, v = k.to(query.dtype), v.to(query.dtype)` after the gather; in
get_attn_backend_cls, refuse `not NeuronAttentionBackend.supports_kv_cache_dtype(cfg.kv_cache_dtype)`
(or call NeuronAttentionBackend.validate_configuration and raise on any reason).
"""
import sys

import torch
import torch_neuronx  # noqa: F401  (registers the neuron device)
from vllm.v1.attention.backend import CommonAttentionMetadata

from vllm_neuron_sim.attention import NeuronAttentionImpl, NeuronAttentionMetadataBuilder

DEV = torch.device("neuron", 0)


def make_case(qlens, seqs, heads=4, kv_heads=2, d=8, block_size=4, num_blocks=64, dtype=torch.float32,
              kv_dtype=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    kv_dtype = kv_dtype or dtype
    reqs = len(qlens)
    max_blocks = 16
    perm = torch.randperm(num_blocks - 1, generator=g) + 1
    block_table = torch.randint(0, num_blocks, (reqs + 2, max_blocks), generator=g, dtype=torch.int32)  # stale rows
    used = 0
    for r in range(reqs):
        n = -(-seqs[r] // block_size)
        block_table[r, :n] = perm[used:used + n]
        used += n
    cache = torch.randn(num_blocks, block_size, kv_heads, 2 * d, generator=g).to(kv_dtype)  # memory [B, N, H, C]
    tokens = sum(qlens)
    q = torch.randn(tokens, heads, d, generator=g).to(dtype)
    k = torch.randn(tokens, kv_heads, d, generator=g).to(dtype)
    v = torch.randn(tokens, kv_heads, d, generator=g).to(dtype)
    slots = [int(block_table[r, p // block_size]) * block_size + p % block_size
             for r in range(reqs) for p in range(seqs[r] - qlens[r], seqs[r])]
    return dict(qlens=list(qlens), seqs=list(seqs), heads=heads, kv_heads=kv_heads, d=d, block_size=block_size,
                num_blocks=num_blocks, dtype=dtype, kv_dtype=kv_dtype, block_table=block_table, cache=cache,
                q=q, k=k, v=v, slots=torch.tensor(slots, dtype=torch.int64))


def run_plugin(c, window=None, kv_cache_dtype="auto"):
    qlens, seqs, reqs = c["qlens"], c["seqs"], len(c["qlens"])
    tokens = sum(qlens)
    qsl = torch.tensor([0] + torch.tensor(qlens).cumsum(0).tolist(), dtype=torch.int32)
    seq_t = torch.tensor(seqs, dtype=torch.int32)
    common = CommonAttentionMetadata(
        query_start_loc=qsl.to(DEV), query_start_loc_cpu=qsl, seq_lens=seq_t.to(DEV), num_reqs=reqs,
        num_actual_tokens=tokens, max_query_len=max(qlens), max_seq_len=max(seqs),
        block_table_tensor=c["block_table"].to(DEV), slot_mapping=c["slots"].to(DEV),
        seq_lens_cpu_upper_bound=seq_t)
    builder = object.__new__(NeuronAttentionMetadataBuilder)
    builder.block_size, builder.device = c["block_size"], DEV
    metadata = builder.build(0, common)
    impl = NeuronAttentionImpl(c["heads"], c["d"], c["d"] ** -0.5, c["kv_heads"], None, window, kv_cache_dtype)
    kv_cache = c["cache"].clone().to(DEV).permute(0, 2, 1, 3)  # logical [B, H, N, C], LBNHC memory
    out = torch.zeros(tokens, c["heads"] * c["d"], dtype=c["dtype"]).to(DEV)
    impl.forward(None, c["q"].to(DEV), c["k"].to(DEV), c["v"].to(DEV), kv_cache, metadata, out)
    return out.cpu().view(tokens, c["heads"], c["d"]).float()


def reference(c, window=None):
    heads, kvh, d, bs = c["heads"], c["kv_heads"], c["d"], c["block_size"]
    cache = c["cache"].clone().reshape(-1, kvh, 2 * d)
    cache[c["slots"]] = torch.cat([c["k"], c["v"]], -1).to(c["kv_dtype"])
    cache = cache.view(c["num_blocks"], bs, kvh, 2 * d).double()
    outs, start = [], 0
    for r, (ql, seq) in enumerate(zip(c["qlens"], c["seqs"])):
        if ql == 0:
            continue
        kv = cache[c["block_table"][r].long()].reshape(-1, kvh, 2 * d)[:seq]
        k = kv[..., :d].repeat_interleave(heads // kvh, 1)
        v = kv[..., d:].repeat_interleave(heads // kvh, 1)
        s = torch.einsum("qhd,khd->hqk", c["q"][start:start + ql].double(), k) * d ** -0.5
        qpos, kpos = torch.arange(seq - ql, seq).view(-1, 1), torch.arange(seq).view(1, -1)
        keep = kpos <= qpos
        if window is not None:
            keep &= kpos > qpos - window
        outs.append(torch.einsum("hqk,khd->qhd", s.masked_fill(~keep, float("-inf")).softmax(-1), v).float())
        start += ql
    return torch.cat(outs)


def main():
    failures = []
    for kv_dtype in (torch.bfloat16, torch.float16):
        case = make_case([1, 5, 3], [10, 20, 35], dtype=torch.float32, kv_dtype=kv_dtype)
        try:
            got = run_plugin(case, kv_cache_dtype=str(kv_dtype).split(".")[1])
        except Exception as error:  # noqa: BLE001
            failures.append(f"float32 model, {kv_dtype} KV cache: forward raised {type(error).__name__}: "
                            f"{str(error)[:160]}")
            continue
        err = (got - reference(case)).abs().max().item()
        if not err < 2e-2:
            failures.append(f"float32 model, {kv_dtype} KV cache: max error {err}")

    from vllm.v1.attention.selector import AttentionSelectorConfig
    from vllm_neuron_sim.neuron_platform import NeuronPlatform
    config = AttentionSelectorConfig(head_size=64, dtype=torch.float32, kv_cache_dtype="fp8", block_size=32)
    try:
        backend = NeuronPlatform.get_attn_backend_cls(None, config)
        failures.append(f"kv_cache_dtype='fp8' accepted: get_attn_backend_cls returned {backend} (the cache "
                        "would be uint8 and the forward casts keys into it)")
    except (ValueError, NotImplementedError):
        pass
    for f in failures:
        print("FAIL:", f)
    if failures:
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
