"""workload.Predict gained `chunked_prefill: int = None` ([predict] chunked_prefill, documented in
the commit and used by for_workload), but workload._section types a field whose default is None
from _FIELD_TYPES, falling back to str, and ("predict", "chunked_prefill") is not in it: a workload
with `chunked_prefill = 8` is refused at load ("predict.chunked_prefill: expected a string, got
8"), and a string one ("8") passes the type check and then crashes in _positive ("8" > 0).
The workload field cannot be used at all."""
import os
import sys
import tempfile

import torch_neuronx  # noqa: F401
from neuron_migrate import workload

TEXT = """[workload]
name = "chunked"
[model]
path = "tiny"
random_init = true
[inputs]
prompt_lengths = [6, 10]
max_new_tokens = 3
[predict]
tp = [1]
chunked_prefill = {value}
"""
with tempfile.TemporaryDirectory() as folder:
    os.makedirs(os.path.join(folder, "tiny"))
    path = os.path.join(folder, "w.toml")
    with open(path, "w") as handle:
        handle.write(TEXT.format(value=8))
    try:
        loaded = workload.load(path)
    except workload.WorkloadError as error:
        print(f"FAIL [predict] chunked_prefill = 8 refused: {error}")
        sys.exit(1)
    assert loaded.predict.chunked_prefill == 8, loaded.predict
    with open(path, "w") as handle:
        handle.write(TEXT.format(value='"8"'))
    try:
        workload.load(path)
    except workload.WorkloadError as error:
        print("a string is refused with:", error)
    else:
        print('FAIL [predict] chunked_prefill = "8" accepted')
        sys.exit(1)
print("ok")
