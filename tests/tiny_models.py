"""Tiny causal LMs built offline from configs (random weights, fixed seed)."""
import torch
from transformers import AutoConfig, AutoModelForCausalLM

COMMON = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
              head_dim=16, tie_word_embeddings=False)

CONFIGS = {
    "llama": dict(COMMON),
    "qwen3": dict(COMMON),
    "mistral": dict(COMMON, sliding_window=None),
    "gemma3_text": dict(COMMON, sliding_window=64, query_pre_attn_scalar=16),
    "phi3": dict(COMMON, pad_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0),
    "gpt2": dict(vocab_size=128, n_embd=64, n_layer=2, n_head=4, n_positions=256,
                 resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0),
}


def build(model_type, seed=0, dtype=torch.float32, **overrides):
    config = AutoConfig.for_model(model_type, **{**CONFIGS[model_type], **overrides})
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()
