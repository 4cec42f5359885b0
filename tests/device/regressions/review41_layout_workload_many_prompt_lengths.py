"""neuron-migrate predict WORKLOAD --concurrency N now serves the workload's own prompt lengths
(for_workload passes lengths=[(n, out) for each prompt]). dry_run._serve refuses more than
MAX_PREFILL_PROGRAMS (16) distinct prefill lengths with a ValueError, and predict() calls
dry_run_serving outside its try/except (and cli._predict catches only PredictError and
WorkloadError): a workload with 17 prompts of different lengths (text prompts counted by a
tokenizer easily have more) now ends `neuron-migrate predict` in a raw traceback, where before
it was served at its longest prompt. Expected: exit 0 (e.g. serve the lengths bucketed, or fall
back to the longest prompt) or at least a clear exit 2 message."""
import os
import sys
import tempfile

import transformers
import torch_neuronx  # noqa: F401
from neuron_migrate.cli import main

with tempfile.TemporaryDirectory() as folder:
    model = os.path.join(folder, "tiny")
    transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, vocab_size=256, head_dim=16).save_pretrained(model)
    path = os.path.join(folder, "w.toml")
    with open(path, "w") as handle:
        handle.write(f"""[workload]
name = "many-lengths"
[model]
path = "{model}"
random_init = true
[inputs]
prompt_lengths = {list(range(4, 21))}
max_new_tokens = 3
[predict]
tp = [1]
""")
    try:
        status = main(["predict", path, "--concurrency", "2", "--json"])
    except Exception as error:  # noqa: BLE001
        print(f"FAIL neuron-migrate predict raised {type(error).__name__}: {error}")
        sys.exit(1)
print("exit status", status)
assert status in (0, 2), status
