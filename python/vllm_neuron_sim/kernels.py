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
