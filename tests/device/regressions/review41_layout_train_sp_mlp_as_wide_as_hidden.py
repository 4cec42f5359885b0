"""Training with sequence_parallel=True: _StepCosting and _saved_bytes split (cost at 1/TP, keep
1/TP of) every op / saved value whose shape is the residual stream's [micro, seq, hidden].
When a rank's MLP is as wide as the hidden size (intermediate_size / tp == hidden_size, here
128 / 2 == 64), the MLP's own activations have that shape too: its SiLU, the gate x up product
and their backward are costed at 1/TP and their saved values kept at 1/TP, though sequence
parallelism never splits the MLP (Note [A training step, dry]: "outside attention and the
MLP"). The inference dry run guards exactly this case (_compiled_forward_ns: `split = ... and
intermediate_size != hidden_size`); the training step does not. Here the SP step's activation
memory drops to 72% of plain TP's (83% at intermediate 136, where the shapes differ)."""
import collections
import sys

import transformers
import torch_neuronx  # noqa: F401
from torch_neuron_sim import train_dry_run

split = collections.Counter()
original = train_dry_run._on_the_stream


def spy(name, args, result, shape):
    on = original(name, args, result, shape)
    if on:
        split[name] += 1
    return on


train_dry_run._on_the_stream = spy
config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                  num_key_value_heads=4, vocab_size=100, head_dim=16)
train_dry_run.predict_train(config, tp=2, seq_len=32, local_batch=2, sequence_parallel=True)
mlp = {name: n for name, n in split.items() if name in ("aten::silu", "aten::sigmoid")}
print("MLP activation ops costed at 1/TP:", mlp)
if mlp:
    print("FAIL the MLP (intermediate / tp == hidden) is split as if it were the residual stream")
    sys.exit(1)
