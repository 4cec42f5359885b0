"""train_dry_run's MFU takes the model FLOPs as 6 x (all parameters) x tokens. For a
mixture-of-experts model a token runs only num_experts_per_tok of the experts, so the FLOPs of the
step are 6 x active parameters x tokens; counting every expert overstates MFU by up to
experts / top_k (gpt-oss-20b: 21B parameters, ~3.6B active). The dry run's own step time is the
same either way: MFU should follow the active parameters."""
import torch  # noqa: E402
import transformers  # noqa: E402
import torch_neuronx  # noqa: E402,F401
from torch_neuron_sim import dry_run, train_dry_run  # noqa: E402

E, K = 32, 1
kw = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
          head_dim=32, vocab_size=512, num_local_experts=E, num_experts_per_tok=K)
config = transformers.AutoConfig.for_model("mixtral", **kw)
p = train_dry_run.predict_train(config, dp=2, seq_len=64, local_batch=2)
with torch.device("meta"):
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model("mixtral", **kw))
total = sum(x.numel() for x in model.parameters())
experts = sum(x.numel() for n, x in model.named_parameters() if ".experts." in n)
active = total - experts + experts * K // E
flops_total = 6 * total * p.tokens_per_step
flops_active = 6 * active * p.tokens_per_step
attention = 6 * 2 * 4 * 32 * 64 * p.tokens_per_step
ratio = (flops_total + attention) / (flops_active + attention)
print(f"parameters {total}, active {active}; MFU reported {p.mfu:.3e}; the active-parameter MFU would be "
      f"{p.mfu / ratio:.3e} ({ratio:.1f}x lower)")
peak, _ = dry_run._C._peak_rates("trn2", p.logical_nc_config)
expected = (flops_active + attention) / (p.step_ms * 1e-3) / (peak * p.dp * p.tp)
print(f"MFU of the active parameters over the predicted step: {expected:.3e}")
if p.mfu > 1.5 * expected:
    print(f"FAIL MFU counts all {E} experts' parameters per token (top-{K}): {p.mfu / expected:.1f}x the active MFU")
    raise SystemExit(1)
