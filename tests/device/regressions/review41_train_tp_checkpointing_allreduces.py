"""With tensor parallelism and activation checkpointing, the backward recomputes each decoder
layer's forward, and with it the forward's two all-reduces of the [batch, sequence, hidden]
activations (Megatron-style TP: after attention and after the MLP): six per layer per step, not
four. train_dry_run adds 4 x layers all-reduces whatever activation_checkpointing is, so TP's
collectives (and the step) are the same with and without checkpointing."""
import transformers  # noqa: E402
import torch_neuronx  # noqa: E402,F401
from torch_neuron_sim import dry_run, train_dry_run  # noqa: E402

DEBUG = dict(hidden_size=256, intermediate_size=768, num_hidden_layers=6, num_attention_heads=16,
             num_key_value_heads=16, vocab_size=2000, head_dim=16)
plain = train_dry_run.predict_train(transformers.LlamaConfig(**DEBUG), tp=2, seq_len=128, local_batch=4)
ac = train_dry_run.predict_train(transformers.LlamaConfig(**DEBUG), tp=2, seq_len=128, local_batch=4,
                                 activation_checkpointing=True)
per = dry_run.collective_ns("allreduce", 4 * 128 * 256 * 2, 2, "trn2", 2) / 1e6
expected = 6 * 6 * per
print(f"TP collectives: no checkpointing {plain.collectives_ms:.4f} ms, checkpointing {ac.collectives_ms:.4f} ms, "
      f"expected with checkpointing (6 per layer) {expected:.4f} ms")
if abs(ac.collectives_ms - expected) > 1e-6 * max(1.0, expected):
    print("FAIL activation checkpointing's recomputed forward all-reduces are not costed")
    raise SystemExit(1)
