"""A labelled upper bound for Trainium, before any hardware: bytes and FLOPs per generated
token, counted on the meta device (torch.utils.flop_counter), against each chip's published
HBM bandwidth and BF16 compute (data/platforms.toml). Decode at batch B moves the weights
once per step plus B caches, and does B tokens' FLOPs: tokens/s <= B / max(bytes/BW, FLOPs/peak).
A bound, not a prediction: real kernels reach a fraction of it."""
import torch
from torch.utils.flop_counter import FlopCounterMode

from . import platforms as hw
from .fit import DTYPES, build_on_meta, cache_bytes, cache_model, load_config, parameter_bytes


def decode_flops(model, context_len):
    """FLOPs of one decode step (batch 1) after a prefill of `context_len` tokens, on meta."""
    ids = torch.zeros(1, context_len, dtype=torch.long, device="meta")
    with torch.no_grad():
        cache = model(input_ids=ids, use_cache=True).past_key_values
        step = torch.zeros(1, 1, dtype=torch.long, device="meta")
        with FlopCounterMode(display=False) as counter:
            model(input_ids=step, past_key_values=cache, use_cache=True)
    return counter.get_total_flops()


def bound(config_or_path, dtype, context_len, batch_sizes=(1, 8, 32), platform_names=("trn2", "trn3")):
    config = load_config(config_or_path)
    model = build_on_meta(config, DTYPES[dtype])
    params = parameter_bytes(model)
    cache = cache_bytes(cache_model(model, config), context_len)
    flops = decode_flops(model, context_len)
    rows = []
    for name in platform_names:
        spec = hw.platforms()[name]
        bandwidth = spec["hbm_bandwidth_bytes_per_s"]
        peak = spec["bf16_flops_per_s"] if dtype != "float32" else spec["fp32_flops_per_s"]
        for batch in batch_sizes:
            step_bytes = params["total_bytes"] + batch * cache
            step_flops = batch * flops
            seconds = max(step_bytes / bandwidth, step_flops / peak)
            rows.append({"platform": name, "batch": batch, "bytes_per_step": step_bytes, "flops_per_step": step_flops,
                         "bound_tokens_per_s": batch / seconds,
                         "limited_by": "HBM bandwidth" if step_bytes / bandwidth >= step_flops / peak else "compute"})
    return {"context_len": context_len, "dtype": dtype, "flops_per_token": flops,
            "weight_bytes": params["total_bytes"], "cache_bytes_per_sequence": cache,
            "bytes_per_token_batch1": params["total_bytes"] + cache, "rows": rows,
            "label": "roofline upper bound per chip (one chip's HBM bandwidth and BF16 peak, ideal kernels); "
                     "not a measurement", "source": "data/platforms.toml (AWS Neuron documentation)"}
