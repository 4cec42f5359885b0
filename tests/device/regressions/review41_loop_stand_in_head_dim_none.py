"""The stand-in config copies the model's config and sets _STAND_IN's sizes only where the config
has a value: a config that states head_dim as None (transformers' HunYuan-MoE-V1 default; the
model reads getattr(config, "head_dim", hidden // heads), which is None) keeps it None, and
building the stand-in raises "TypeError: unsupported operand type(s) for ** or pow(): 'NoneType'
and 'float'". loop='forward' predicts the same config (shard_config fills head_dim in), so
loop='generate' fails where the forward works, with a bare TypeError from the model's __init__."""
import transformers  # noqa: E402
import torch_neuronx  # noqa: E402,F401
from torch_neuron_sim import dry_run  # noqa: E402

config = transformers.AutoConfig.for_model("hunyuan_v1_moe")
print("head_dim:", config.head_dim)
forward = dry_run.predict(config, "trn2", tp=1, input_tokens=2, output_tokens=2, mode="eager")
print("loop='forward':", forward.ttft_ms, forward.per_token_ms)
try:
    p = dry_run.predict(config, "trn2", tp=1, input_tokens=2, output_tokens=2, mode="eager", loop="generate")
except Exception as e:  # noqa: BLE001
    raise SystemExit(f"FAIL: loop='generate' of a config loop='forward' predicts: {type(e).__name__}: {e}")
print("loop='generate':", p.ttft_ms, p.per_token_ms)
