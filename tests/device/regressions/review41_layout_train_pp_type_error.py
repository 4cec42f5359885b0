"""predict_train computes the default microbatches (`2 * pp ... if pp > 1`) before it validates
`pp`: pp=None or pp="2" crash with "TypeError: '>' not supported between instances of
'NoneType' and 'int'" instead of the clear "pp None: give a whole number, 1 or more" ValueError
every other argument gets (and neuron-migrate catches only ValueError/RuntimeError per row)."""
import sys

import transformers
import torch_neuronx  # noqa: F401
from torch_neuron_sim import train_dry_run

config = transformers.LlamaConfig(hidden_size=64, intermediate_size=192, num_hidden_layers=4, num_attention_heads=4,
                                  num_key_value_heads=4, vocab_size=100, head_dim=16)
failed = False
for pp in (None, "2"):
    try:
        train_dry_run.predict_train(config, pp=pp, seq_len=16)
    except ValueError as error:
        print(f"pp={pp!r}: ValueError {error}")
    except Exception as error:  # noqa: BLE001
        print(f"FAIL pp={pp!r}: {type(error).__name__}: {error}")
        failed = True
sys.exit(1 if failed else 0)
