"""A speculative verify step (step_tokens > 1 at position input_tokens) through a serving
stack's attention is costed as a prefill from position 0: its keys are sliced to
causal_keys_visited(step_tokens) positions, so the step never reads the KV cache it attends to.
Its attention cost must grow with the cache, as a 1-token step's does."""
import os  # noqa: E402
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
CONFIGS = os.path.join(HERE, "configs")
import torch_neuronx  # noqa
from torch_neuron_sim import dry_run as d
cfg = d._load_config(os.path.join(ROOT, "demo/configs/llama-3.1-8b"))
def step(tokens, cache):
    return d._compiled_forward_ns(cfg, 4, "trn2", 2, 192, cache, layers=1, gqa_attention=True, step_tokens=tokens)[1]
one = step(1, 8192) - step(1, 512)
four = step(4, 8192) - step(4, 512)
print(f"decode step, cache 512 -> 8192: +{one:.0f} ns; 4-token verify step: +{four:.0f} ns")
assert four >= one, "the verify step's attention does not read the cache (keys sliced to the step's tokens)"
