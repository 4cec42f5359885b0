"""Tiny, offline configs for every causal-LM architecture of the pinned transformers.

`build_config(model_type)` starts from the architecture's default config
(`AutoConfig.for_model(model_type)`), shrinks it generically (`generic_overrides`: hidden ~64,
2 layers, 4 heads / 2 kv heads, intermediate 128, vocab 512, 256 positions, 4 experts, ...) and
then applies the per-architecture fix in `FIXES`, if any. Everything is built from keyword
arguments so that each config class's own validation and derived fields (layer_types, head_dim,
...) see consistent values.
"""
import copy

from transformers import AutoConfig, PreTrainedConfig
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

HIDDEN = 64
LAYERS = 2
HEADS = 4
KV_HEADS = 2
HEAD_DIM = HIDDEN // HEADS
INTERMEDIATE = 128
MOE_INTERMEDIATE = 64
VOCAB = 512
POSITIONS = 256
EXPERTS = 4
TOP_K = 2
SLIDING_WINDOW = 16  # smaller than prompt + 16 new tokens, so the window is really exercised

# attribute name -> new value (or a function of the old value); applied where the attribute
# exists with a non-None value.
_FIXED = {
    # widths
    **dict.fromkeys(["hidden_size", "n_embd", "d_model", "n_embed", "embed_dim", "dim", "emb_dim",
                     "embedding_dim", "embedding_size", "word_embed_proj_dim", "hidden_dim",
                     "d_embed"], HIDDEN),
    # depth
    **dict.fromkeys(["num_hidden_layers", "n_layer", "num_layers", "n_layers", "decoder_layers",
                     "encoder_layers", "num_blocks"], LAYERS),
    # heads
    **dict.fromkeys(["num_attention_heads", "n_head", "n_heads", "num_heads",
                     "decoder_attention_heads", "encoder_attention_heads"], HEADS),
    **dict.fromkeys(["head_dim", "attention_head_dim", "kv_channels", "dim_head", "head_size",
                     "attention_head_size", "d_head"], HEAD_DIM),
    # feed-forward
    **dict.fromkeys(["intermediate_size", "ffn_dim", "decoder_ffn_dim", "encoder_ffn_dim",
                     "n_inner", "d_ff", "ffn_hidden_size", "dim_ff", "dff", "inner_hidden_size",
                     "d_inner", "prefix_dense_intermediate_size"], INTERMEDIATE),
    **dict.fromkeys(["moe_intermediate_size", "shared_expert_intermediate_size",
                     "expert_intermediate_size", "shared_intermediate_size",
                     "moe_shared_expert_intermediate_size", "shared_experts_intermediate_size",
                     "expert_ffn_hidden_size"],
                    MOE_INTERMEDIATE),
    # vocabulary / positions
    **dict.fromkeys(["vocab_size", "unpadded_vocab_size"], VOCAB),
    "vocab_size_per_layer_input": lambda v: min(v, VOCAB),
    **dict.fromkeys(["max_position_embeddings", "n_positions", "n_ctx", "max_seq_len",
                     "max_sequence_length", "seq_length", "original_max_position_embeddings"],
                    lambda v: min(v, POSITIONS) if isinstance(v, int) else v),
    # mixture of experts
    **dict.fromkeys(["num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"],
                    lambda v: min(v, EXPERTS) if isinstance(v, int) else v),
    **dict.fromkeys(["num_experts_per_tok", "num_experts_per_token", "moe_topk", "moe_k",
                     "top_k_experts", "moe_top_k"],
                    lambda v: min(v, TOP_K) if isinstance(v, int) else v),
    **dict.fromkeys(["n_shared_experts", "num_shared_experts", "moe_num_shared_experts"],
                    lambda v: min(v, 1) if isinstance(v, int) else v),
    **dict.fromkeys(["n_group", "num_expert_group", "topk_group"], 1),
    "first_k_dense_replace": lambda v: min(v, 1) if isinstance(v, int) else v,
    # multi-head latent attention (DeepSeek-style)
    "kv_lora_rank": 16, "q_lora_rank": 32, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8,
    "v_head_dim": HEAD_DIM, "qk_head_dim": 16,
    # sparse-attention indexers (DeepSeek V3.2 style)
    "index_n_heads": HEADS, "index_head_dim": 16, "index_topk": 8,
    # linear attention / state-space layers
    **dict.fromkeys(["linear_num_key_heads", "linear_num_heads"], 2),
    "linear_num_value_heads": HEADS,
    **dict.fromkeys(["linear_key_head_dim", "linear_value_head_dim", "linear_head_dim"], 16),
    **dict.fromkeys(["mamba_d_state", "state_size", "d_state"], 16),
    **dict.fromkeys(["mamba_n_groups", "n_groups"], 1),
    # mamba heads x head dim = expand (2) x hidden
    "mamba_n_heads": 8, "mamba_d_head": HIDDEN * 2 // 8, "mamba_d_ssm": HIDDEN * 2,
    **dict.fromkeys(["mamba_dt_rank", "time_step_rank"], 8),
    **dict.fromkeys(["mamba_chunk_size", "chunk_size"],
                    lambda v: min(v, 16) if isinstance(v, int) else v),
    # windows
    **dict.fromkeys(["sliding_window", "sliding_window_size"],
                    lambda v: SLIDING_WINDOW if isinstance(v, int) and not isinstance(v, bool) else v),
    # partial rotary (GPT-J style) must fit in the head
    "rotary_dim": HEAD_DIM // 2,
    # per-layer inputs / low-rank extras (Gemma 3n)
    "hidden_size_per_layer_input": lambda v: min(v, 16), "laurel_rank": 8,
}

# keys holding one entry per layer; the first found defines which layers are kept
_LAYER_LIST_PREFERENCE = ["layer_types", "layers_block_type", "layer_block_types",
                          "attention_types_per_layer", "mlp_layer_types", "block_types"]
_DEPTH_KEYS = ["num_hidden_layers", "n_layer", "num_layers", "n_layers", "decoder_layers"]
_SPECIAL_TOKEN_SUFFIXES = ("token_id", "token_index", "token_ids")
_NOT_TOKENS = {"pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id",
               "sep_token_id", "forced_eos_token_id", "forced_bos_token_id", "eod_token_id",
               "cls_token_id", "mask_token_id", "unk_token_id"}


def _kept_layers(d, depth):
    """Indices of the original layers kept: layer 0 and the first layer of a different kind."""
    for key in _LAYER_LIST_PREFERENCE:
        types = d.get(key)
        if isinstance(types, list) and len(types) == depth:
            other = next((i for i, t in enumerate(types) if t != types[0]), None)
            if other is not None:
                rest = [i for i in range(1, depth) if i != other]
                return sorted(([0, other] + rest)[:LAYERS])
            break
    return list(range(LAYERS))


def generic_overrides(d):
    """Keyword overrides that shrink the config whose `to_dict()` is `d`."""
    out = {}
    for key, value in d.items():
        if key in _FIXED and value is not None and not isinstance(value, (dict, list, str)):
            new = _FIXED[key]
            new = new(value) if callable(new) else new
            if new != value:
                out[key] = new
    # head_dim left None (derived in the model from hidden/heads): make it explicit and consistent
    if "head_dim" in d and d["head_dim"] is None and "num_attention_heads" in d:
        out["head_dim"] = HEAD_DIM
    # multi-head latent attention: rotary embeddings are sized by head_dim == qk_rope_head_dim
    if "qk_rope_head_dim" in d and d.get("head_dim") == d["qk_rope_head_dim"]:
        out["head_dim"] = out.get("qk_rope_head_dim", d["qk_rope_head_dim"])
    # bidirectional encoders with an LM head (BERT family) generate only as decoders
    if d.get("is_decoder") is False:
        out["is_decoder"] = True
    # key/value heads: keep multi-query (1) and plain multi-head (== heads) as they are
    for kv_key, h_key in [("num_key_value_heads", "num_attention_heads"),
                          ("num_kv_heads", "num_attention_heads"),
                          ("n_kv_heads", "n_heads"), ("multi_query_group_num", "num_attention_heads")]:
        kv, heads = d.get(kv_key), d.get(h_key)
        if isinstance(kv, int) and not isinstance(kv, bool):
            out[kv_key] = 1 if kv == 1 else (HEADS if kv == heads else KV_HEADS)
        elif kv is None and kv_key in d and isinstance(heads, int):
            out[kv_key] = KV_HEADS
    # per-layer lists: keep the same chosen layers in all of them
    depth = next((d[k] for k in _DEPTH_KEYS if isinstance(d.get(k), int)), None)
    if isinstance(depth, int) and depth > LAYERS:
        keep = _kept_layers(d, depth)
        for key, value in d.items():
            if isinstance(value, list) and len(value) == depth and key not in ("architectures",):
                value = [value[i] for i in keep]
                if key in _FIXED and all(isinstance(v, int) for v in value):  # per-layer widths
                    new = _FIXED[key]
                    value = [new(v) if callable(new) else new for v in value]
                out[key] = value
        # heterogeneous layers ({"05": {"head_dim": 512}}): keep the kept layers' entries, with
        # their sizes scaled like the global ones (so a layer twice as wide stays twice as wide)
        per_layer = d.get("per_layer_config")
        if isinstance(per_layer, dict) and per_layer:
            new_per_layer = {}
            for new_idx, old_idx in enumerate(keep):
                entry = per_layer.get(f"{old_idx:02d}", per_layer.get(str(old_idx)))
                if not entry:
                    continue
                scaled = {}
                for k, v in entry.items():
                    base, base_new = d.get(k), out.get(k, d.get(k))
                    if isinstance(v, int) and isinstance(base, int) and isinstance(base_new, int) and base:
                        scaled[k] = max(1, round(base_new * v / base))
                    else:
                        scaled[k] = v
                new_per_layer[str(new_idx)] = scaled
            out["per_layer_config"] = new_per_layer
    # special tokens beyond the new vocabulary: map them onto distinct ids at its top
    vocab = out.get("vocab_size", d.get("vocab_size"))
    if isinstance(vocab, int):
        nxt = [vocab - 1]

        def remap(v, key):
            if not isinstance(v, int) or isinstance(v, bool) or v < vocab:
                return v
            if key in ("pad_token_id",):
                return 0
            if key in ("bos_token_id",):
                return 1
            if key in ("eos_token_id", "eod_token_id", "forced_eos_token_id"):
                return 2
            nxt[0] -= 1
            return nxt[0] + 1

        for key, value in d.items():
            if key.endswith(_SPECIAL_TOKEN_SUFFIXES):
                new = ([remap(v, key) for v in value] if isinstance(value, list)
                       else remap(value, key))
                if new != value:
                    out[key] = new
    # nested sub-configs (text_config, vision_config, ...): shrink them the same way, keeping
    # what the composite config sets differently from the sub-config class's own defaults
    for key, value in d.items():
        if isinstance(value, dict) and isinstance(value.get("model_type"), str) \
                and value["model_type"] in CONFIG_MAPPING:
            try:
                plain = CONFIG_MAPPING[value["model_type"]]().to_dict()
            except Exception:  # a sub-config class whose defaults alone do not validate
                plain = {}
            sub = {k: v for k, v in value.items()
                   if k not in ("transformers_version", "architectures", "_name_or_path")
                   and plain.get(k, object()) != v}
            sub["model_type"] = value["model_type"]
            sub.update(generic_overrides(value))
            out[key] = sub
    return out


def special_token_ids(config):
    """Token ids with a multimodal meaning (image, audio, ...): kept out of prompts and outputs."""
    ids = set()
    for cfg in [config] + [getattr(config, k) for k in ("text_config",)
                           if getattr(config, k, None) is not None]:
        for key, value in cfg.to_dict().items():
            if key.endswith(_SPECIAL_TOKEN_SUFFIXES) and key not in _NOT_TOKENS:
                for v in value if isinstance(value, list) else [value]:
                    if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
                        ids.add(v)
    return sorted(ids)


# ---------------------------------------------------------------------------------------------
# Per-architecture fixes: model_type -> dict of overrides (applied after the generic shrink) or
# a function(overrides, defaults) -> overrides. Each says why it is needed.
# ---------------------------------------------------------------------------------------------
FIXES = {
    # the default config has no attention layer (attn_layer_indices=None), and transformers'
    # cache then refuses get_seq_length ("only LinearAttention layers"): one Mamba + one attention
    "bamba": dict(attn_layer_indices=[1]),
    # same: the default layer_types are all "linear_attention" (Mamba)
    "granitemoehybrid": dict(layer_types=["linear_attention", "attention"]),
    # attention every 8th layer from 4 and MoE every 2nd from 1 by default: layer 0 Mamba + dense
    # MLP, layer 1 attention + MoE
    "jamba": dict(attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2,
                  expert_layer_offset=1),
    # block pattern (recurrent, recurrent, attention) repeats: 2 layers would be all recurrent;
    # the LRU width and local attention window are separate size knobs
    "recurrent_gemma": dict(block_types=["recurrent", "attention"], lru_width=HIDDEN,
                            attention_window_size=SLIDING_WINDOW),
    # the default rope_parameters is {} while the model reads it per layer type
    "cohere_compass_text": dict(
        layer_types=["sliding_attention", "full_attention"],
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
    # DbrxAttention reads attn_config.rope_theta, which the default attn_config lacks; the FFN
    # sizes live in ffn_config
    # (clip_qkv=None makes it call clamp(None, None), so a clip value is set)
    "dbrx": dict(attn_config={"kv_n_heads": KV_HEADS, "rope_theta": 10000.0, "clip_qkv": 8.0},
                 ffn_config={"ffn_hidden_size": MOE_INTERMEDIATE, "moe_num_experts": EXPERTS,
                             "moe_top_k": TOP_K}),
    # num_experts_per_tok / n_group / topk_group default to None (topk(k=None) fails); one dense
    # layer first as in the real checkpoints
    "deepseek_v2": dict(num_experts_per_tok=TOP_K, n_group=1, topk_group=1, first_k_dense_replace=1),
    # the expert counts default to None
    "dots1": dict(n_routed_experts=EXPERTS, num_experts_per_tok=TOP_K, n_shared_experts=1,
                  first_k_dense_replace=1),
    # Gemma 3n shares the KV of the last layers (num_kv_shared_layers): 4 layers, sliding + full,
    # the last two reusing the first two's KV
    "gemma3n_text": dict(num_hidden_layers=4, num_kv_shared_layers=2,
                         layer_types=["sliding_attention", "full_attention"] * 2,
                         intermediate_size=[INTERMEDIATE] * 4,
                         activation_sparsity_pattern=[0.95, 0.0, 0.0, 0.0]),
    # an assistant (drafter) reuses the backbone's KV in all its layers (num_kv_shared_layers =
    # depth). Still does not build: see CPU_LIMITS
    "gemma4_assistant": lambda o, d: _sub(o, "text_config", num_kv_shared_layers=LAYERS),
    "gemma4_unified_assistant": lambda o, d: _sub(o, "text_config", num_kv_shared_layers=LAYERS),
    # the default config is all attention (full_attn_idxs = every layer): one short-conv layer
    # and one attention layer, as in the real LFM2 checkpoints
    "lfm2": dict(layer_types=["conv", "full_attention"], full_attn_idxs=[1]),
    # layer_types defaults to None but the model indexes it: one conv + one attention layer
    "lfm2_moe": dict(layer_types=["conv", "full_attention"], num_dense_layers=1),
    # zero-experts are a separate count
    "longcat_flash": dict(zero_expert_num=2),
    # Mamba-2 heads: num_heads * head_dim must equal expand * hidden_size
    "mamba2": dict(num_heads=8, head_dim=16),
    # xLSTM rounds the q/k width up to a multiple of 64 in one place and not in another:
    # hidden 128 makes both 64
    "xlstm": dict(hidden_size=128, embedding_dim=128),
    # the sliding (SWA) layers have their own MLA sizes (per_layer_config) and must satisfy
    # head_dim == qk_nope_head_dim + qk_rope_head_dim, with RoPE on a quarter of head_dim
    "dots3_note_text": lambda o, d: _dots3(o),
    # (and the vision/audio adapters read the towers' widths)
    "dots3_note": lambda o, d: _sub(_sub(_sub(o, "text_config", **_dots3({})), "vision_config",
                                         adapter_in_dim=HIDDEN, adapter_out_dim=HIDDEN),
                                    "audio_config", adapter_input_size=HIDDEN,
                                    adapter_out_dim=HIDDEN),
    # byte-level patches: the hash n-gram embedding tables are the big part; the local
    # encoder/decoder see the global width. BltModel's cache is broken in this transformers
    # (DynamicCache(config=BltConfig) reads the missing num_hidden_layers, and the local encoder,
    # global transformer and local decoder would share layer indices): run without a cache
    "blt": lambda o, d: _blt(o),
    # the QSA indexer sizes default to None; the hyper-connection rank is a separate size
    "qwen4_exp_text": dict(indexer_n_heads=HEADS, indexer_kv_heads=1, indexer_head_dim=HEAD_DIM,
                           indexer_budget=8, indexer_compress_ratio=4, hc_lowrank=16),
    "qwen4_exp": lambda o, d: _sub(o, "text_config", indexer_n_heads=HEADS, indexer_kv_heads=1,
                                   indexer_head_dim=HEAD_DIM, indexer_budget=8,
                                   indexer_compress_ratio=4, hc_lowrank=16),
    # axial position embeddings: dims sum to hidden_size, shape multiplies to the max length;
    # chunk lengths small enough for short prompts
    "reformer": dict(axial_pos_embds_dim=[16, 48], axial_pos_shape=[16, 16],
                     max_position_embeddings=256, local_attn_chunk_length=8,
                     lsh_attn_chunk_length=8, feed_forward_size=INTERMEDIATE, num_buckets=4),
    # pronunciation and shape embeddings are separate tables
    "roc_bert": dict(pronunciation_embed_dim=32, pronunciation_vocab_size=64, shape_embed_dim=32,
                     shape_vocab_size=64),
    # zamba's hybrid layers share one transformer block, which needs two hybrid layers to tie
    "zamba": dict(num_hidden_layers=3, layers_block_type=["linear_attention", "hybrid", "hybrid"]),
    # the attention sizes are derived from hidden_size (attention on concat(hidden, original))
    "zamba2": lambda o, d: {k: v for k, v in o.items()
                            if k not in ("attention_hidden_size", "attention_head_dim",
                                         "kv_channels")},
    # MusicgenForCausalLM is the decoder: it takes the decoder config, whose pad/bos id is the
    # extra embedding row at vocab_size
    "musicgen": lambda o, d: AutoConfig.for_model(
        "musicgen_decoder", **_music_decoder()),
    "musicgen_melody": lambda o, d: AutoConfig.for_model(
        "musicgen_melody_decoder", **_music_decoder()),
}


def _sub(overrides, key, **extra):
    """Adds `extra` to the sub-config overrides `overrides[key]`."""
    overrides.setdefault(key, {}).update(extra)
    return overrides


def _dots3(o):
    o.update(head_dim=32, qk_nope_head_dim=8, qk_rope_head_dim=8, index_head_dim=16,
             per_layer_config={"1": {"num_attention_heads": 2, "num_key_value_heads": 2,
                                     "kv_lora_rank": 32, "qk_nope_head_dim": 24}})
    return o


def _blt(o):
    o.update(encoder_hash_byte_group_vocab=VOCAB, encoder_hash_byte_group_size=[3, 4],
             local_attention_window_len=SLIDING_WINDOW, use_cache=False)
    for key in ("encoder_config", "decoder_config"):
        _sub(o, key, hidden_size_global=HIDDEN)
    _sub(o, "global_config", encoder_cross_output_size=None)
    return o


def _music_decoder():
    return dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                num_attention_heads=HEADS, ffn_dim=INTERMEDIATE, max_position_embeddings=POSITIONS,
                num_codebooks=2, pad_token_id=VOCAB, bos_token_id=VOCAB)


# model_type -> function(model) run on the CPU model after it is built (harness set-up only)
MODEL_SETUP = {
    # X-MOD picks its per-language adapters from a language set on the model
    "xmod": lambda model: model.set_default_language("en_XX"),
}

# model_type -> extra GenerationConfig fields
GENERATION_EXTRAS = {
    # Musicgen builds its codebook delay pattern with the decoder start id
    "musicgen": dict(decoder_start_token_id=VOCAB),
    "musicgen_melody": dict(decoder_start_token_id=VOCAB),
    # see FIXES["blt"]: no cache
    "blt": dict(use_cache=False),
}

# model_type -> number of new tokens `generate` returns for NEW_TOKENS (16) requested, where not 16
NEW_TOKENS_RETURNED = {
    # Musicgen's generate undoes the codebook delay pattern on the way out, which drops the
    # delayed columns (num_codebooks = 2 here) from the returned sequences
    "musicgen": 14,
    "musicgen_melody": 14,
}

# model_type -> keyword arguments for the default config when AutoConfig.for_model(model_type)
# alone does not validate
BASE_KWARGS = {
    # the assistant's validation wants a text config without per-layer inputs and with all
    # layers sharing KV; the default text config has per-layer inputs
    "gemma4_assistant": dict(text_config=dict(model_type="gemma4_text", hidden_size_per_layer_input=0,
                                              vocab_size_per_layer_input=0)),
}

# model_type -> why the architecture cannot run on CPU here (known limits, not config problems)
CPU_LIMITS = {
    "gemma3n": "needs timm and Pillow (its vision tower is a timm model); neither is in the "
               "pinned environment",
    "gemma4_assistant": "speculative-decoding drafter: transformers 5.23 cannot build it "
                        "(kv_sharing_modes rejects the all-layers-share-KV setting its config "
                        "forces; the default config fails the same way), and its forward needs "
                        "the backbone's shared_kv_states",
    "gemma4_unified_assistant": "speculative-decoding drafter: transformers 5.23 cannot build it "
                                "(kv_sharing_modes rejects the all-layers-share-KV setting its "
                                "config forces; the default config fails the same way), and its "
                                "forward needs the backbone's shared_kv_states",
}

# model_type -> function(config, batch, length) -> input_ids shape
INPUT_SHAPES = {
    # Musicgen decoders take one row per codebook: (batch * num_codebooks, length)
    "musicgen": lambda c, b, n: (b * c.num_codebooks, n),
    "musicgen_melody": lambda c, b, n: (b * c.num_codebooks, n),
}


def build_config(model_type):
    """The tiny config for `model_type` (a key of MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)."""
    base = copy.deepcopy(BASE_KWARGS.get(model_type, {}))
    defaults = AutoConfig.for_model(model_type, **base).to_dict()
    overrides = generic_overrides(defaults)
    for key, value in base.items():  # keep what the base set where the shrink did not touch it
        if isinstance(value, dict) and isinstance(overrides.get(key), dict):
            overrides[key] = {**value, **overrides[key]}
        else:
            overrides.setdefault(key, value)
    fix = FIXES.get(model_type)
    if callable(fix):
        overrides = fix(copy.deepcopy(overrides), defaults)
        if isinstance(overrides, PreTrainedConfig):
            return overrides
    elif fix:
        overrides.update(copy.deepcopy(fix))
    return AutoConfig.for_model(model_type, **overrides)
