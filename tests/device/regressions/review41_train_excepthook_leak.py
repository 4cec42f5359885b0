"""predict_train creates and destroys a fake default process group per call; torch's
init_process_group replaces sys.excepthook with one that prefixes "[rank0]: " to every line of an
uncaught traceback, and destroy_process_group does not restore it. Every dry run (each row of
`neuron-migrate predict --train --tp 1,2,4`) stacks one more wrapper: the process's later
tracebacks come out as "[rank0]: [rank0]: [rank0]: ...". The dry run should leave the hook as it was."""
import sys  # noqa: E402
import transformers  # noqa: E402
import torch_neuronx  # noqa: E402,F401
from torch_neuron_sim import train_dry_run  # noqa: E402

config = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=4,
              vocab_size=100, head_dim=16)
hook = sys.excepthook
for dp in (1, 2):
    train_dry_run.predict_train(transformers.LlamaConfig(**config), dp=dp, seq_len=4)
print("excepthook kept:", sys.excepthook is hook, sys.excepthook)
if sys.excepthook is not hook:
    sys.excepthook = hook
    print("FAIL the training dry run left sys.excepthook replaced by torch.distributed's rank-prefixing hook")
    sys.exit(1)
