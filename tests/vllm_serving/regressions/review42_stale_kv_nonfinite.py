"""review42: stale KV cache contents outside a request's sequence leak into its attention output.

Bug: NeuronAttentionImpl.forward gathers every slot of the blocks in the request's block-table
row (`cache[m.block_table]`, blocks = ceil(max_seq_len / block_size) for every request) and
hides the positions at or past seq_len (the tail of the last, partly filled block, whole
unused blocks, the stale block ids vLLM leaves past a row's live blocks) only through SDPA's
boolean mask. Masked positions still enter the matmuls: a score masked to -inf gets weight 0,
but 0 * inf and 0 * nan give NaN. Those slots keep whatever an earlier request wrote before its
blocks were freed and handed on, so one request that overflowed (an fp16/bf16 inf in its keys or
values) poisons every later request that gets one of its blocks. The request's outputs become
NaN although none of its own positions holds a non-finite value. vLLM's CPU kernel reads only
positions < seq_len.

Expected: a request's output depends only on the K/V at its own positions 0..seq_len-1 (here: equal
to the reference, finite).

Fix: zero the gathered K/V that the mask drops before SDPA, e.g.
`valid = (positions < m.seq_lens).unsqueeze(-1)` ([reqs, 1, positions, 1]) and
`k = k.masked_fill(~valid, 0); v = v.masked_fill(~valid, 0)` (or gather only live blocks).
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
    # request 0: a decode at position 9 (seq_len 10, block_size 4: its third block holds positions
    # 8, 9 and two stale slots); request 1: a longer prefill, so request 0's row is gathered over
    # more blocks than it owns (stale block ids past its live blocks)
    case = make_case([1, 6], [10, 30])
    bs = case["block_size"]
    last_block = int(case["block_table"][0, 9 // bs])
    case["cache"][last_block, 10 % bs:] = float("inf")  # a freed block's old contents, past seq_len
    live = {int(b) for r, seq in enumerate(case["seqs"]) for b in case["block_table"][r, :-(-seq // bs)]}
    stale_block = next(b for b in range(1, case["num_blocks"]) if b not in live)
    case["block_table"][0, 3:] = stale_block  # past request 0's 3 live blocks: a freed block's id
    case["cache"][stale_block] = float("nan")
    got = run_plugin(case)
    ref = reference(case)
    failures = []
    if not torch.isfinite(got).all():
        failures.append(f"{int((~torch.isfinite(got)).any(-1).any(-1).sum())} of {got.shape[0]} query rows are "
                        "not finite (stale non-finite slots past seq_len leaked in)")
    elif not torch.allclose(got, ref, atol=1e-5):
        failures.append(f"max error {(got - ref).abs().max().item()}")
    for f in failures:
        print("FAIL:", f)
    if failures:
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
