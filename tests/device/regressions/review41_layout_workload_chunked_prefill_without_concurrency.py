"""for_workload passes the workload's `[predict] chunked_prefill` (documented: "served under load:
a step's token budget") to predict() whether or not the run serves under load, and predict()
refuses chunked_prefill without concurrency. So once a workload sets it, `neuron-migrate predict
WORKLOAD` without --concurrency (the plain batch-1 table) fails with "--chunked-prefill: expected
... with --concurrency" though the user gave no such option; runner.py's dry run of an eager
workload (concurrency None) fails the same way. The workload's default should only apply when
serving under load. (The field is set on the loaded Workload directly: the loader refuses it
today, review41_layout_workload_chunked_prefill_field_type.py.)"""
import os
import sys
import tempfile

import transformers
import torch_neuronx  # noqa: F401
from neuron_migrate import predict, workload

with tempfile.TemporaryDirectory() as folder:
    model = os.path.join(folder, "tiny")
    transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, vocab_size=256, head_dim=16).save_pretrained(model)
    path = os.path.join(folder, "w.toml")
    with open(path, "w") as handle:
        handle.write(f"""[workload]
name = "chunked"
[model]
path = "{model}"
random_init = true
[inputs]
prompt_lengths = [6, 10]
max_new_tokens = 3
[predict]
tp = [1]
""")
    w = workload.load(path)
    w.predict.chunked_prefill = 8
    try:
        result = predict.for_workload(w)
    except predict.PredictError as error:
        print(f"FAIL the plain prediction of a workload with [predict] chunked_prefill is refused: {error}")
        sys.exit(1)
print("rows", len(result["rows"]), "chunked_prefill", result["chunked_prefill"])
