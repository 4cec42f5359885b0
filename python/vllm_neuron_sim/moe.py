"""Mixture-of-experts layers on the `neuron` device: vLLM leaves an out-of-tree platform's MoE
to the platform (UnquantizedMoeBackend.OOT); this one computes each expert over the tokens routed to it,
in device ops: an expert's weights are read once a step, and only experts some token chose."""
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
        tokens, k = topk_ids.shape
        pairs = topk_ids.reshape(-1).to(torch.int64)
        order = torch.argsort(pairs, stable=True)  # the (token, choice) pairs grouped by expert
        counts = torch.bincount(pairs, minlength=w13.shape[0]).tolist()  # one host read a layer
        rows = order // k  # each pair's token
        weights = topk_weights.reshape(-1)[order].to(x.dtype).unsqueeze(-1)
        inputs = x[rows]
        if layer.apply_router_weight_on_input:
            inputs = inputs * weights
        out = torch.zeros_like(x)
        start = 0
        for expert, count in enumerate(counts):  # each expert's weights read once, for its tokens
            if count == 0:
                continue
            h = inputs[start:start + count] @ w13[expert].t()
            gate, up = h.chunk(2, dim=-1)
            y = (F.silu(gate) * up) @ w2[expert].t()
            if not layer.apply_router_weight_on_input:
                y = y * weights[start:start + count]
            out.index_add_(0, rows[start:start + count], y)
            start += count
        return out
