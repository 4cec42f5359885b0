"""review42: the neuron MoE layer copies each token's expert weights: memory tokens x top_k x expert size.

Bug: NeuronUnquantizedFusedMoEMethod.forward_oot computes `w13[topk_ids]` and `w2[topk_ids]`, which
materialize a [tokens, top_k, 2*intermediate, hidden] and a [tokens, top_k, hidden, intermediate]
copy of the expert weights, one per (token, expert) pair. The transient memory is
tokens * top_k * 3 * intermediate * hidden elements: here 64 tokens and 4 small experts already need
~21x the layer's whole expert weights. For a real model (Qwen3-30B-A3B: hidden 2048, moe
intermediate 768, top-8, bf16) that is ~75 MiB per token, ~150 GiB for a 2048-token prefill step,
far more than a core's HBM. (And the KV cache sizing runs no profiling step:
review42_kv_cache_sizing_no_profile.py, so this is not caught at startup either.) A MoE kernel
reads each expert's weights once per step, it does not copy them per token.

Expected: the layer's transient device memory stays O(tokens * top_k * (hidden + 2*intermediate))
plus at most one expert's weights, here below the layer's total expert weights; and the output
equals the reference (checked too).

Fix: loop over the experts (or sort the (token, expert) pairs by expert): for each expert e with
routed rows idx, `h = x[idx] @ w13[e].T`, `out.index_add_(0, token_of[idx], (silu(g)*u) @ w2[e].T * w)`;
a fixed number of expert iterations keeps the shapes static.
"""
import sys
import types

import torch
import torch.nn.functional as F
import torch_neuronx  # noqa: F401  (registers the neuron device)
from vllm.model_executor.layers.fused_moe.activation import MoEActivation

from vllm_neuron_sim.moe import NeuronUnquantizedFusedMoEMethod

DEV = torch.device("neuron", 0)
E, H, I, T, K = 4, 128, 256, 64, 2


def reference(x, w13, w2, weights, ids):
    out = torch.zeros(T, H)
    for t in range(T):
        for j in range(K):
            gate, up = (w13[ids[t, j]] @ x[t]).chunk(2)
            out[t] += (w2[ids[t, j]] @ (F.silu(gate) * up)) * weights[t, j]
    return out


def main():
    g = torch.Generator().manual_seed(0)
    w13, w2 = torch.randn(E, 2 * I, H, generator=g) * 0.05, torch.randn(E, H, I, generator=g) * 0.05
    x, weights = torch.randn(T, H, generator=g), torch.rand(T, K, generator=g)
    ids = torch.randint(0, E, (T, K), generator=g, dtype=torch.int32)
    layer = types.SimpleNamespace(w13_weight=w13.to(DEV), w2_weight=w2.to(DEV), expert_map=None,
                                  activation=MoEActivation.SILU, apply_router_weight_on_input=False)
    xs, ws, ids_d = x.to(DEV), weights.to(DEV), ids.to(DEV)
    torch.neuron.synchronize(DEV)
    before = torch.neuron.memory_allocated(DEV)
    torch.neuron.reset_peak_memory_stats(DEV)
    out = NeuronUnquantizedFusedMoEMethod.forward_oot(None, layer, xs, ws, ids_d)
    torch.neuron.synchronize(DEV)
    transient = torch.neuron.max_memory_allocated(DEV) - before
    expert_bytes = (w13.numel() + w2.numel()) * 4
    err = (out.cpu() - reference(x, w13, w2, weights, ids)).abs().max().item()
    print(f"transient {transient / 2**20:.1f} MiB for {T} tokens, top-{K}; all expert weights "
          f"{expert_bytes / 2**20:.1f} MiB; max error {err:.2e}")
    failures = []
    if err > 1e-4:
        failures.append(f"output differs from the reference by {err}")
    if transient > expert_bytes:
        failures.append(f"the layer's transient memory ({transient / 2**20:.1f} MiB) exceeds the layer's whole "
                        f"expert weights ({expert_bytes / 2**20:.1f} MiB): per-token copies of expert weights")
    for f in failures:
        print("FAIL:", f)
    if failures:
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
