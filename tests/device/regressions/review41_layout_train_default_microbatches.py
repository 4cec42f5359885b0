"""predict_train's default `microbatches` (docstring and --microbatches help: "2 x pp, at most
local_batch") is min(2 * pp, local_batch), which need not divide local_batch; the very next
check then refuses the default the user never gave: pp=2, local_batch=5 -> "local_batch 5 does
not split into 4 microbatches of equal size" (also pp=4, local_batch=10 -> 8). The default should
be a divisor of local_batch (e.g. the largest one <= 2 x pp)."""
import sys

import transformers
import torch_neuronx  # noqa: F401
from torch_neuron_sim import train_dry_run

config = transformers.LlamaConfig(hidden_size=64, intermediate_size=192, num_hidden_layers=4, num_attention_heads=4,
                                  num_key_value_heads=4, vocab_size=100, head_dim=16)
try:
    p = train_dry_run.predict_train(config, pp=2, seq_len=16, local_batch=5)
except ValueError as error:
    print(f"FAIL pp=2, local_batch=5 with the default microbatches is refused: {error}")
    sys.exit(1)
print("microbatches", p.microbatches)
assert 5 % p.microbatches == 0
