"""Paged attention on the `neuron` device, in the device's own ops (no vLLM CPU or CUDA kernels).

Note [Paged attention on neuron]
The KV cache of a layer is vLLM's paged cache, [blocks, block_size, kv_heads, 2 x head_size]
(layout LBNHC: a block's slots are rows; a row holds a token's key, then its value). A step's
new keys and values are written to their slots (slot_mapping) with one index_copy_; then the
step's queries, [tokens, heads, head_size] packed request after request, are padded to
[requests, max query length] and attend, through one scaled_dot_product_attention, to each
request's blocks gathered from its block table ([requests, blocks x block_size] positions),
under a mask that keeps, for query i of a request with c cached tokens, the positions up to c + i
(causal) and, with a sliding window w, above c + i - w. The outputs go back to their packed rows.
Every tensor's shape is set by (requests, longest query, blocks of the longest request): the same
three numbers give the same programs, which is what a compiled step's shape buckets key on.
"""
import dataclasses
from typing import ClassVar

import torch
from vllm.v1.attention.backend import (AttentionBackend, AttentionImpl, AttentionMetadataBuilder, AttentionType,
                                       CommonAttentionMetadata, MultipleOf)
from vllm.v1.kv_cache_layout import KVCacheLayout


class NeuronAttentionBackend(AttentionBackend):
    forward_includes_kv_cache_update: bool = True
    accept_output_buffer: bool = True
    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float16, torch.bfloat16, torch.float32]
    supported_kv_cache_dtypes: ClassVar[list] = ["auto", "float16", "bfloat16", "float32"]

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec=None):
        return [MultipleOf(1)]

    @classmethod
    def get_supported_head_sizes(cls) -> list[int]:
        return []  # any

    @classmethod
    def supported_kv_cache_layouts(cls):
        return (KVCacheLayout.LBNHC,)

    @staticmethod
    def get_name() -> str:
        return "CUSTOM"

    @classmethod
    def supports_non_causal(cls) -> bool:
        return False

    @classmethod
    def supports_sliding_window(cls) -> bool:
        return True

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type == AttentionType.DECODER

    @staticmethod
    def get_impl_cls():
        return NeuronAttentionImpl

    @staticmethod
    def get_builder_cls():
        return NeuronAttentionMetadataBuilder


@dataclasses.dataclass
class NeuronAttentionMetadata:
    num_actual_tokens: int
    num_reqs: int
    max_query_len: int
    slot_mapping: torch.Tensor  # [tokens] on the device
    block_table: torch.Tensor  # [requests, blocks] on the device
    packed_to_padded: torch.Tensor  # [tokens]: request x max_query_len + position in the query
    context_lens: torch.Tensor  # [requests, 1, 1]: tokens cached before this step's queries
    seq_lens: torch.Tensor  # [requests, 1, 1]


class NeuronAttentionMetadataBuilder(AttentionMetadataBuilder[NeuronAttentionMetadata]):
    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.block_size = kv_cache_spec.block_size
        self.device = device

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> NeuronAttentionMetadata:
        m = common_attn_metadata
        reqs, tokens, longest = m.num_reqs, m.num_actual_tokens, m.max_query_len
        starts = m.query_start_loc_cpu[:reqs + 1].to(torch.int64)
        seq_lens = (m.seq_lens_cpu_upper_bound if getattr(m, "seq_lens_cpu_upper_bound", None) is not None
                    else m.seq_lens.cpu())[:reqs].to(torch.int64)
        query_lens = starts[1:] - starts[:-1]
        request = torch.repeat_interleave(torch.arange(reqs), query_lens)
        position = torch.arange(int(starts[-1])) - starts[:-1].repeat_interleave(query_lens)
        packed_to_padded = request * longest + position
        blocks = -(-m.max_seq_len // self.block_size)
        as_device = lambda t: t.to(self.device, non_blocking=True)  # noqa: E731
        return NeuronAttentionMetadata(
            num_actual_tokens=tokens, num_reqs=reqs, max_query_len=longest,
            slot_mapping=m.slot_mapping[:tokens].to(torch.int64),
            block_table=m.block_table_tensor[:reqs, :blocks].to(torch.int64),
            packed_to_padded=as_device(packed_to_padded[:tokens]),
            context_lens=as_device((seq_lens - query_lens).view(reqs, 1, 1)),
            seq_lens=as_device(seq_lens.view(reqs, 1, 1)))


class NeuronAttentionImpl(AttentionImpl):
    def __init__(self, num_heads, head_size, scale, num_kv_heads, alibi_slopes, sliding_window, kv_cache_dtype,
                 logits_soft_cap=None, attn_type=AttentionType.DECODER, kv_sharing_target_layer_name=None,
                 sinks=None):
        if alibi_slopes is not None:
            raise NotImplementedError("ALiBi attention is not supported on the neuron platform yet")
        if logits_soft_cap:
            raise NotImplementedError("attention logit soft-capping is not supported on the neuron platform yet")
        if sinks is not None:
            raise NotImplementedError("attention sinks are not supported on the neuron platform yet")
        if attn_type != AttentionType.DECODER:
            raise NotImplementedError(f"{attn_type} attention is not supported on the neuron platform (decoder only)")
        self.num_heads, self.head_size, self.scale = num_heads, head_size, float(scale)
        self.num_kv_heads = num_kv_heads
        self.sliding_window = sliding_window
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output, output_scale=None,
                output_block_scale=None):
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("fused output quantization is not supported on the neuron platform")
        if attn_metadata is None:  # a profiling run
            return output
        m = attn_metadata
        tokens, d = m.num_actual_tokens, self.head_size
        # [blocks, heads, block_size, 2d] logical, [blocks, block_size, heads, 2d] in memory (LBNHC)
        cache = kv_cache.permute(0, 2, 1, 3)
        slots = cache.view(-1, self.num_kv_heads, 2 * d)
        if self.kv_sharing_target_layer_name is None:
            new = torch.cat([key[:tokens], value[:tokens]], dim=-1).to(slots.dtype)
            slots.index_copy_(0, m.slot_mapping, new)
        reqs, longest = m.num_reqs, m.max_query_len
        gathered = cache[m.block_table]  # [reqs, blocks, block_size, kv_heads, 2d]
        gathered = gathered.reshape(reqs, -1, self.num_kv_heads, 2 * d).transpose(1, 2)
        positions = torch.arange(gathered.shape[2], device=query.device).view(1, 1, -1)
        # positions past a request's length hold whatever an earlier request left in a reused block:
        # zeroed, for a masked NaN or inf would still reach the product (0 x inf = NaN)
        gathered = gathered.masked_fill((positions >= m.seq_lens).unsqueeze(-1), 0)
        k, v = gathered[..., :d].to(query.dtype), gathered[..., d:].to(query.dtype)  # a cache of another dtype
        q = query.new_zeros(reqs * longest, self.num_heads, d)
        q.index_copy_(0, m.packed_to_padded, query[:tokens])
        q = q.view(reqs, longest, self.num_heads, d).transpose(1, 2)
        last = m.context_lens + torch.arange(longest, device=q.device).view(1, -1, 1)  # each query's own position
        keep = positions <= last
        if self.sliding_window is not None:
            keep = keep & (positions > last - self.sliding_window)
        out = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=keep.unsqueeze(1), scale=self.scale,
            enable_gqa=self.num_heads != self.num_kv_heads)
        out = out.transpose(1, 2).reshape(reqs * longest, self.num_heads * d)
        output[:tokens].view(tokens, -1).copy_(out.index_select(0, m.packed_to_padded))
        return output
