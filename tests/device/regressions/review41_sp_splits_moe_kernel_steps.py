"""_sequence_parallel_ns splits (costs at 1/TP) every step that *touches* a [L, hidden] value,
inputs included. In a MoE layer the experts kernel's buffer `hidden_states.new_zeros(experts,
rows, hidden)` only takes the residual stream as a template; its output is the experts' work
buffer, not the stream, and its cost does not shrink with sequence parallelism (the Note: outside
attention and the MLP only). Same for the kernel's combine (hidden_states + experts' result).
No step of the experts kernel may be split."""
import os  # noqa: E402
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
CONFIGS = os.path.join(HERE, "configs")
import math
import torch_neuronx  # noqa
from torch_neuron_sim import dry_run as d
from torch_neuron_sim.compile.lowering import A_VALUE, A_VALUES
split = []
orig = d._sequence_parallel_ns
def spy(desc, steps, hidden, tokens, tp):
    values = desc["values"]
    for node, (op, ns) in zip(desc["nodes"], steps):
        alone = dict(desc, nodes=[node])
        if orig(alone, [(op, ns)], hidden, tokens, tp) > 0:
            split.append((op, [values[i]["sizes"] for i in node["outputs"]]))
    return orig(desc, steps, hidden, tokens, tp)
d._sequence_parallel_ns = spy
cfg = d._load_config(os.path.join(ROOT, "demo/configs/gpt-oss-20b"))
d._compiled_forward_ns(cfg, 4, "trn2", 2, 256, 264, layers=1, gqa_attention=True, sequence_parallel=True)
moe = [(op, out) for op, out in split if op == "aten::new_zeros"]
print("split steps:", len(split), "of them the experts kernel's buffer:", moe)
assert not moe, "the MoE kernel's expert buffer is costed at 1/TP as if it were the residual stream"
