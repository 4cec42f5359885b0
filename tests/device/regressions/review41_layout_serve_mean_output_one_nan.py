"""dry_run._serve with `lengths` costs the batch-1 decode step with predict() at the requests'
mean lengths, the output mean floor-divided: lengths=[(8, 1), (8, 2)] gives output_tokens
3 // 2 = 1, and predict() answers per_token_ms = NaN for a 1-token output (no decode step). That
NaN becomes decode_step_ms[1], though the second request decodes a token: at concurrency 1 its
TPOT, latency and the level's tokens/s are all NaN."""
import math
import sys

import transformers
import torch_neuronx  # noqa: F401
from torch_neuron_sim import dry_run

config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                  num_key_value_heads=2, vocab_size=256, head_dim=16)
level, = dry_run.serve(config, "trn2", concurrency=(1,), requests_per_client=2, lengths=[(8, 1), (8, 2)])
print("decode_step_ms", level.decode_step_ms, "tokens/s", level.tokens_per_s, "TPOT", level.tpot_ms)
figures = [level.tokens_per_s, *level.decode_step_ms.values(), *level.tpot_ms.values(), *level.latency_ms.values()]
if any(math.isnan(x) for x in figures):
    print("FAIL a served level with a decoding request has NaN figures")
    sys.exit(1)
