"""Mixture-of-experts layers on the `neuron` device: vLLM leaves an out-of-tree platform's MoE
to the platform (UnquantizedMoeBackend.OOT); this one computes each token's top-k experts in
device ops, reading only the experts the token was routed to (as a MoE kernel does)."""
import torch
import torch.nn.functional as F
from vllm.model_executor.custom_op import CustomOp
from vllm.model_executor.layers.fused_moe.activation import MoEActivation
from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import UnquantizedFusedMoEMethod


@CustomOp.register_oot(name="UnquantizedFusedMoEMethod")
class NeuronUnquantizedFusedMoEMethod(UnquantizedFusedMoEMethod):
    def __init__(self, moe):
        super().__init__(moe)
        self.moe_kernel = None

    @property
    def is_monolithic(self) -> bool:
        return False  # the router selects the experts first (vLLM's modular path)

    def forward_oot(self, layer, x, topk_weights, topk_ids, shared_experts=None, shared_experts_input=None):
        if shared_experts is not None:
            raise NotImplementedError("MoE layers with shared experts are not supported on the neuron platform yet")
        if layer.expert_map is not None:
            raise NotImplementedError("expert parallelism is not supported on the neuron platform yet")
        if layer.activation != MoEActivation.SILU:
            raise NotImplementedError(f"MoE activation {layer.activation.value} is not supported on the neuron "
                                      "platform yet (silu only)")
        w13, w2 = layer.w13_weight, layer.w2_weight  # [experts, 2 x intermediate, hidden], [experts, hidden, intermediate]
        weights = topk_weights.to(x.dtype).unsqueeze(-1)  # [tokens, k, 1]
        inputs = x.unsqueeze(1) * weights if layer.apply_router_weight_on_input else x.unsqueeze(1)
        h = torch.matmul(w13[topk_ids], inputs.unsqueeze(-1)).squeeze(-1)  # [tokens, k, 2 x intermediate]
        gate, up = h.chunk(2, dim=-1)
        out = torch.matmul(w2[topk_ids], (F.silu(gate) * up).unsqueeze(-1)).squeeze(-1)  # [tokens, k, hidden]
        if not layer.apply_router_weight_on_input:
            out = out * weights
        return out.sum(dim=1)
