"""review42: the device's `_moe_C::topk_sigmoid` op has the wrong schema: every sigmoid-routed MoE fails.

Bug: kernels.define_ops defines topk_softmax and topk_sigmoid with one schema (ROUTING_SCHEMA:
..., bool renormalize, Tensor? e_score_correction_bias=None, Tensor? is_padding=None). vLLM 0.32's
wrapper vllm._custom_ops.topk_sigmoid always passes 8 arguments,
(..., renormalize, e_score_correction_bias, routed_scaling_factor: float, is_padding=...), as vLLM's
CUDA build declares it. Every call therefore fails with
    RuntimeError: _moe_C::topk_sigmoid() expected at most 7 argument(s) but received 8
both from FusedTopKRouter (scoring_func="sigmoid") and from FusedTopKBiasRouter (sigmoid + correction
bias, e.g. DeepSeek-V3-style/GLM-4.5-style routers when not grouped). And the kernel has no
routed_scaling_factor, which vLLM applies inside this op for the sigmoid path (the softmax path
scales after the op).

Expected (vLLM's own torch fallback at the end of fused_topk_bias): ids = topk(sigmoid(logits) +
bias), weights = sigmoid(logits)[ids], renormalized if asked, times routed_scaling_factor.

Fix: a schema of its own for topk_sigmoid, "(Tensor(a!) topk_weights, Tensor(b!) topk_ids,
Tensor(c!) token_expert_indices, Tensor gating_output, bool renormalize,
Tensor? e_score_correction_bias=None, float routed_scaling_factor=1.0, Tensor? is_padding=None) -> ()",
and multiply the weights by routed_scaling_factor after renormalizing.
"""
import sys

import torch
import torch_neuronx  # noqa: F401  (registers the neuron device)

from vllm_neuron_sim import kernels

DEV = torch.device("neuron", 0)


def reference(logits, bias, k, renormalize, scale, scoring):
    scores = logits.float().sigmoid() if scoring == "sigmoid" else logits.float().softmax(-1)
    ids = torch.topk(scores if bias is None else scores + bias, k, dim=-1).indices
    weights = scores.gather(-1, ids)
    if renormalize:
        weights = weights / weights.sum(-1, keepdim=True)
    return weights * scale, ids


def main():
    kernels.define_ops()
    from vllm.model_executor.layers.fused_moe.router.fused_topk_bias_router import fused_topk_bias
    from vllm.model_executor.layers.fused_moe.router.fused_topk_router import fused_topk
    g = torch.Generator().manual_seed(0)
    logits, hidden = torch.randn(6, 8, generator=g), torch.randn(6, 16, generator=g)
    bias = torch.randn(8, generator=g) * 0.1
    failures = []

    def check(name, run, ref):
        try:
            weights, ids = run()
        except Exception as error:  # noqa: BLE001
            failures.append(f"{name}: {type(error).__name__}: {str(error)[:140]}")
            return
        want_w, want_ids = ref
        if not (torch.equal(ids.cpu().long(), want_ids) and torch.allclose(weights.cpu(), want_w, atol=1e-6)):
            failures.append(f"{name}: weights/ids differ from the reference\n{weights.cpu()}\n{want_w}")

    check("fused_topk sigmoid", lambda: fused_topk(hidden.to(DEV), logits.to(DEV), 2, True, scoring_func="sigmoid")[:2],
          reference(logits, None, 2, True, 1.0, "sigmoid"))
    check("fused_topk_bias sigmoid, routed_scaling_factor 2.5",
          lambda: fused_topk_bias(hidden.to(DEV), logits.to(DEV), "sigmoid", bias.to(DEV), 2, True,
                                  routed_scaling_factor=2.5),
          reference(logits, bias, 2, True, 2.5, "sigmoid"))
    # the softmax op (same file) is right; kept as a control
    check("fused_topk_bias softmax, routed_scaling_factor 2.5",
          lambda: fused_topk_bias(hidden.to(DEV), logits.to(DEV), "softmax", bias.to(DEV), 2, True,
                                  routed_scaling_factor=2.5),
          reference(logits, bias, 2, True, 2.5, "softmax"))
    for f in failures:
        print("FAIL:", f)
    if failures:
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
