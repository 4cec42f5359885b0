"""vLLM's Triton kernels around the model, as device ops (the device has no Triton): registered
through vllm.triton_utils.dispatcher as vLLM's CPU platform registers its C++ ones."""
import torch


def compute_slot_mapping(num_tokens, max_num_tokens, query_start_loc, positions, block_table, block_table_stride,
                         slot_mapping, KV_CACHE_BLOCK_SIZE, TOTAL_CP_WORLD_SIZE=1, TOTAL_CP_RANK=0,  # noqa: N803
                         CP_KV_CACHE_INTERLEAVE_SIZE=1, PAD_ID=-1, BLOCK_SIZE=1024):  # noqa: N803
    """slot_mapping[t] = the KV cache slot of token t: its request's block (block_table) at its
    position // block size, times the block size, plus position % block size; PAD_ID past
    num_tokens (vllm.v1.worker.block_table.ComputeSlotMappingKernel)."""
    if TOTAL_CP_WORLD_SIZE != 1:
        raise NotImplementedError("context parallelism is not supported on the neuron platform")
    tokens = torch.arange(num_tokens, device=positions.device)
    request = torch.searchsorted(query_start_loc[1:].to(torch.int64), tokens, right=True)
    position = positions[:num_tokens]
    block = block_table.view(-1, block_table_stride)[request, position // KV_CACHE_BLOCK_SIZE].to(torch.int64)
    slot_mapping[:num_tokens] = block * KV_CACHE_BLOCK_SIZE + position % KV_CACHE_BLOCK_SIZE
    slot_mapping[num_tokens:max_num_tokens] = PAD_ID


def _unsupported(what):
    def refuse(*args, **kwargs):
        raise NotImplementedError(f"{what} is not supported on the neuron platform yet")
    return refuse


def register():
    from vllm.triton_utils.dispatcher import register_kernels
    speculative = _unsupported("speculative decoding")
    register_kernels({
        "vllm.v1.worker.block_table.ComputeSlotMappingKernel.kernel": compute_slot_mapping,
        "vllm.v1.sample.rejection_sampler.rejection_greedy_sample_kernel": speculative,
        "vllm.v1.sample.rejection_sampler.rejection_random_sample_kernel": speculative,
        "vllm.v1.sample.rejection_sampler.expand_kernel": speculative,
        "vllm.v1.sample.rejection_sampler.sample_recovered_tokens_kernel": speculative,
    })


def _topk_routing(scores, topk_weights, topk_ids, token_expert_indices, renormalize, bias, scale=1.0):
    chosen = scores if bias is None else scores + bias.to(scores.dtype)
    ids = torch.topk(chosen, topk_ids.shape[-1], dim=-1).indices
    weights = scores.gather(-1, ids)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    if scale != 1.0:
        weights = weights * scale
    topk_weights.copy_(weights)
    topk_ids.copy_(ids)
    tokens, k = ids.shape
    token_expert_indices.copy_(torch.arange(k * tokens, device=ids.device).view(k, tokens).t())


def topk_softmax(topk_weights, topk_ids, token_expert_indices, gating_output, renormalize,
                 e_score_correction_bias=None, is_padding=None):
    """A router's top-k of softmax(gating_output) ([tokens, k] weights and expert ids, the weights
    renormalized to sum to 1 if asked; a correction bias changes the choice, not the weights)."""
    _topk_routing(torch.softmax(gating_output.float(), dim=-1), topk_weights, topk_ids, token_expert_indices,
                  renormalize, e_score_correction_bias)


def topk_sigmoid(topk_weights, topk_ids, token_expert_indices, gating_output, renormalize,
                 e_score_correction_bias=None, routed_scaling_factor=1.0, is_padding=None):
    """As topk_softmax, over sigmoid(gating_output), the weights then scaled by routed_scaling_factor."""
    _topk_routing(torch.sigmoid(gating_output.float()), topk_weights, topk_ids, token_expert_indices, renormalize,
                  e_score_correction_bias, routed_scaling_factor)


_ROUTING = ("(Tensor(a!) topk_weights, Tensor(b!) topk_ids, Tensor(c!) token_expert_indices, "
            "Tensor gating_output, bool renormalize, Tensor? e_score_correction_bias=None, ")
SCHEMAS = {"topk_softmax": _ROUTING + "Tensor? is_padding=None) -> ()",  # vllm._custom_ops' argument lists
           "topk_sigmoid": _ROUTING + "float routed_scaling_factor=1.0, Tensor? is_padding=None) -> ()"}


def define_ops():
    """vLLM's MoE routing ops (vllm._custom_ops.topk_softmax, topk_sigmoid) for the device: vLLM's
    CPU build defines no `_moe_C` library (its CPU experts route inside their kernel), so the ops
    are defined here (torch.library, the schema vLLM's CUDA build declares) with device kernels."""
    for name, kernel in (("topk_softmax", topk_softmax), ("topk_sigmoid", topk_sigmoid)):
        if not hasattr(torch.ops._moe_C, name):
            torch.library.define(f"_moe_C::{name}", SCHEMAS[name])
            torch.library.impl(f"_moe_C::{name}", "PrivateUse1")(kernel)
