"""Decompositions applied while AOTAutograd traces a graph for the neuron device: the device's
fused attention op (the overrideable SDPA, Accelerator.cpp) becomes the CPU flash-attention
op it computes with, forward and backward, so the program runs it on host views directly."""
import torch

aten = torch.ops.aten


def _attention(query, key, value, attn_bias=None, dropout_p=0.0, is_causal=False, return_debug_mask=False,
               scale=None):
    output, logsumexp = aten._scaled_dot_product_flash_attention_for_cpu(
        query, key, value, dropout_p, is_causal, attn_mask=attn_bias, scale=scale)
    empty = query.new_empty((0,), dtype=torch.int64)
    return (output, logsumexp, empty, empty, query.shape[2], key.shape[2], empty, empty,
            query.new_empty((0,)))


def _attention_backward(grad_out, query, key, value, attn_bias, grad_input_mask, out, logsumexp, cum_seq_q,
                        cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset, scale=None):
    grad_query, grad_key, grad_value = aten._scaled_dot_product_flash_attention_for_cpu_backward(
        grad_out, query, key, value, out, logsumexp, dropout_p, is_causal,
        attn_mask=attn_bias if attn_bias is not None and attn_bias.numel() else None, scale=scale)
    return grad_query, grad_key, grad_value, None


def decomposition_table():
    from torch._decomp import decomposition_table as torch_decompositions
    return {
        # dropout as rand_like < p (which then draws from the device's generator, passes.py):
        # native_dropout's kernel has no generator argument and would use the CPU's.
        aten.native_dropout.default: torch_decompositions[aten.native_dropout.default],
        aten._scaled_dot_product_fused_attention_overrideable.default: _attention,
        aten._scaled_dot_product_fused_attention_overrideable_backward.default: _attention_backward,
    }
