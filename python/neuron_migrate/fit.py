"""Does it fit? Parameters and KV cache per core, counted on the meta device (no weights are
loaded, so a 27B model answers in seconds), for each Trainium platform, logical-core
configuration (LNC) and tensor-parallel degree, against the per-core HBM budget."""
import json
import math

import torch

from . import platforms as hw

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load_config(model):
    """A transformers config from a model folder, a config.json path or a config object;
    a multimodal wrapper gives its text decoder's config."""
    from transformers import AutoConfig, PretrainedConfig
    if isinstance(model, PretrainedConfig):
        config = model
    else:
        config = AutoConfig.from_pretrained(model)  # a folder, or a config JSON file of any name
    if getattr(config, "text_config", None) is not None and not _is_causal_lm(config):
        config = config.get_text_config()
    return config


def _is_causal_lm(config):
    from transformers import MODEL_FOR_CAUSAL_LM_MAPPING
    return type(config) in MODEL_FOR_CAUSAL_LM_MAPPING


def build_on_meta(config, dtype):
    """The model with every tensor on the meta device: shapes and dtypes, no storage."""
    from transformers import AutoModelForCausalLM
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config, dtype=dtype)


def parameter_bytes(model):
    """Bytes of the unique parameters and buffers; matrices (sharded by tensor parallelism)
    apart from vectors (norms, biases: kept whole on every core)."""
    seen, sharded, replicated, count = set(), 0, 0, 0
    for tensor in list(model.parameters()) + list(model.buffers()):
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        size = tensor.numel() * tensor.element_size()
        if isinstance(tensor, torch.nn.Parameter):
            count += tensor.numel()
        if tensor.dim() >= 2:
            sharded += size
        else:
            replicated += size
    return {"parameters": count, "sharded_bytes": sharded, "replicated_bytes": replicated,
            "total_bytes": sharded + replicated}


def _tensors_in(obj, seen):
    """Every tensor reachable from a cache object (attributes, lists, tuples, dicts)."""
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from _tensors_in(value, seen)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            yield from _tensors_in(value, seen)
    elif hasattr(obj, "__dict__") and type(obj).__module__.startswith("transformers"):
        for value in vars(obj).values():
            yield from _tensors_in(value, seen)


def _cache_bytes_per_layer(model, length):
    ids = torch.zeros(1, length, dtype=torch.long, device="meta")
    with torch.no_grad():
        cache = model(input_ids=ids, use_cache=True).past_key_values
    layers = getattr(cache, "layers", None) or [cache]
    return [sum(t.numel() * t.element_size() for t in _tensors_in(layer, set())) for layer in layers]


def cache_model(model, config):
    """Cache bytes of one sequence as a function of its length: per layer, a constant part
    (recurrent / convolution state) and a per-token part (keys and values), measured by two
    prefills on the meta device; sliding-window layers stop growing at the window."""
    try:
        short, long_ = _cache_bytes_per_layer(model, 8), _cache_bytes_per_layer(model, 16)
    except Exception as error:  # an architecture whose forward does not run on meta
        return _formula_cache_model(config, f"meta forward failed ({type(error).__name__}: {error})")
    layer_types = getattr(config, "layer_types", None) or []
    window = getattr(config, "sliding_window", None)
    layers = []
    for index, (a, b) in enumerate(zip(short, long_)):
        per_token = (b - a) / 8
        kind = layer_types[index] if index < len(layer_types) else "attention"
        layers.append({"type": kind, "constant_bytes": a - 8 * per_token, "bytes_per_token": per_token,
                       "window": window if "sliding" in kind else None})
    return {"method": "measured on the meta device (two prefills, 8 and 16 tokens)", "layers": layers}


def _formula_cache_model(config, why):
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    size = torch.finfo(getattr(config, "dtype", None) or torch.bfloat16).bits // 8
    per_token = 2 * heads * head_dim * size
    layers = [{"type": "attention", "constant_bytes": 0, "bytes_per_token": per_token, "window": None}
              for _ in range(config.num_hidden_layers)]
    return {"method": f"formula 2 x kv_heads x head_dim x bytes per layer ({why})", "layers": layers}


def cache_bytes(cache, seq_len, batch=1):
    """Bytes of the cache of `batch` sequences of `seq_len` tokens."""
    total = 0
    for layer in cache["layers"]:
        tokens = min(seq_len, layer["window"]) if layer["window"] else seq_len
        total += layer["constant_bytes"] + layer["bytes_per_token"] * tokens
    return int(total * batch)


def per_core_bytes(params, cache_total, config, tp):
    """Bytes one core holds at tensor-parallel degree `tp`: matrices split `tp` ways, vectors
    whole; keys/values split by KV head (a core keeps at least one head, so a degree above
    the KV-head count replicates heads)."""
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    cache_share = math.ceil(kv_heads / tp) / kv_heads if tp <= kv_heads else 1 / kv_heads
    return {"parameters": int(params["sharded_bytes"] / tp + params["replicated_bytes"]),
            "cache": int(cache_total * cache_share)}


def argument_problems(platforms, lnc, tp, batch_per_core, max_seq_len, headroom):
    """[(argument, what is wrong)] for fit's arguments; checked before any model is built."""
    known = hw.platforms()
    problems = []
    for platform in platforms:
        if platform not in known:
            problems.append(("platforms", f"unknown platform {platform!r} (known: {', '.join(known)})"))
    offered = {p: known[p]["lnc"] for p in platforms if p in known}
    if offered and lnc and not any(set(lnc) & set(values) for values in offered.values()):
        problems.append(("lnc", f"no platform offers LNC {', '.join(map(str, lnc))} ("
                                + "; ".join(f"{p} offers {', '.join(map(str, v))}" for p, v in offered.items()) + ")"))
    for name, values in (("lnc", lnc), ("tp", tp)):
        if not values or any(v < 1 for v in values):
            problems.append((name, f"expected a non-empty list of positive integers, got {list(values)}"))
    for name, value in (("batch_per_core", batch_per_core), ("max_seq_len", max_seq_len)):
        if value < 1:
            problems.append((name, f"expected a positive integer, got {value}"))
    if not 0 <= headroom < 1:
        problems.append(("headroom", f"expected a fraction of the HBM kept free, 0 <= headroom < 1, got {headroom}"))
    return problems


def fit(model, dtype="bfloat16", platforms=("trn1", "trn2", "trn3"), lnc=(1, 2), tp=(1, 2, 4, 8),
        batch_per_core=1, max_seq_len=4096, headroom=0.1):
    """The fit table for `model` (folder, config.json or config): one row per platform, LNC and
    TP degree, and the smallest fitting TP degree per platform and LNC. Bad arguments raise
    ValueError naming them."""
    problems = argument_problems(platforms, lnc, tp, batch_per_core, max_seq_len, headroom)
    if problems:
        raise ValueError("; ".join(f"{name}: {message}" for name, message in problems))
    config = load_config(model)
    torch_dtype = DTYPES[dtype]
    meta_model = build_on_meta(config, torch_dtype)
    params = parameter_bytes(meta_model)
    cache = cache_model(meta_model, config)
    cache_total = cache_bytes(cache, max_seq_len, batch_per_core)
    heads = config.num_attention_heads
    rows, smallest, not_offered = [], {}, []
    for platform in platforms:
        spec = hw.platforms()[platform]
        for logical in lnc:
            if logical not in spec["lnc"]:
                not_offered.append(f"{platform} has no LNC={logical}")
                continue
            budget = hw.hbm_bytes_per_core(platform, logical)
            usable = int(budget * (1 - headroom))
            max_cores = hw.cores_per_instance(platform, logical)
            key = f"{platform} LNC={logical}"
            for degree in tp:
                share = per_core_bytes(params, cache_total, config, degree)
                need = share["parameters"] + share["cache"]
                problems = []
                if heads % degree:
                    problems.append(f"{heads} attention heads do not split {degree} ways")
                if degree > max_cores:
                    problems.append(f"more than the {max_cores} cores of a {spec['chips_per_instance_note']}")
                fits = need <= usable and not problems
                rows.append({"platform": platform, "lnc": logical, "tp": degree,
                             "hbm_per_core_bytes": budget, "usable_bytes": usable,
                             "parameter_bytes_per_core": share["parameters"],
                             "cache_bytes_per_core": share["cache"], "total_bytes_per_core": need,
                             "headroom": 1 - need / budget, "fits": fits, "problems": problems})
                if fits and (key not in smallest or degree < smallest[key]["tp"]):  # in any listed order
                    smallest[key] = {"tp": degree, "among": "the listed degrees"}
            if key not in smallest:
                smallest[key] = {"tp": _smallest_power_of_two(params, cache_total, config, usable, max_cores),
                                 "among": f"powers of two up to the {max_cores} cores of one instance "
                                          f"(none of the listed degrees fits)"}
    return {"model": str(model) if not hasattr(model, "to_dict") else config.model_type,
            "architecture": type(meta_model).__name__, "dtype": dtype, "batch_per_core": batch_per_core,
            "max_seq_len": max_seq_len, "headroom_reserved": headroom,
            "parameters": params["parameters"], "parameter_bytes": params["total_bytes"],
            "cache_bytes_per_core_at_tp1": cache_total, "cache_method": cache["method"],
            "attention_heads": heads,
            "kv_heads": getattr(config, "num_key_value_heads", None) or heads,
            "rows": rows, "smallest_fitting_tp": smallest, "not_offered": not_offered}


def _smallest_power_of_two(params, cache_total, config, usable, max_cores):
    """Beyond the listed degrees: the smallest power-of-two degree up to the instance's cores
    that fits and splits the heads, or None."""
    degree = 1
    while degree <= max_cores:
        share = per_core_bytes(params, cache_total, config, degree)
        if share["parameters"] + share["cache"] <= usable and config.num_attention_heads % degree == 0:
            return degree
        degree *= 2
    return None


def to_json(result):
    return json.dumps(result, indent=2)
