"""Finding 9. Mixed devices. OpPlan.cpp accepts CPU tensors for *every* argument of any op
whose name starts with "aten::index" ("as on CUDA"). CUDA does that for aten::index and
index_put_ / index_fill_ (device_check: NoCheck in native_functions.yaml), not for
index_copy / index_add / index_reduce, whose structured CUDA wrappers check that every tensor
is on one device. So the in-place ops 0d888a8 routes to the generic path accept a CPU index,
a non-scalar CPU source and even a CPU self with neuron operands (the CPU tensor is written),
while scatter_ / scatter_add_ / scatter_reduce_ refuse the same mix with the project's
"Expected all tensors to be on the same device" message.

Run: python tests/kernels/regressions/THIS_FILE"""
import sys
import warnings

import torch
import torch_neuronx  # noqa: F401

warnings.filterwarnings("ignore")

ops = {
    "index_copy_": lambda t, i, s: t.index_copy_(0, i, s),
    "index_add_": lambda t, i, s: t.index_add_(0, i, s),
    "index_reduce_": lambda t, i, s: t.index_reduce_(0, i, s, "amax", include_self=False),
    "scatter_": lambda t, i, s: t.scatter_(0, i.view(2, 1).expand(2, 3).contiguous(), s),
    "scatter_add_": lambda t, i, s: t.scatter_add_(0, i.view(2, 1).expand(2, 3).contiguous(), s),
}
mixes = {
    "CPU index": lambda: (torch.zeros(5, 3, device="neuron"), torch.tensor([1, 2]), torch.ones(2, 3, device="neuron")),
    "CPU source (2x3)": lambda: (torch.zeros(5, 3, device="neuron"), torch.tensor([1, 2], device="neuron"),
                                 torch.ones(2, 3)),
    "CPU self": lambda: (torch.zeros(5, 3), torch.tensor([1, 2], device="neuron"), torch.ones(2, 3, device="neuron")),
}
accepted = []
for mix, make in mixes.items():
    for name, op in ops.items():
        t, i, s = make()
        try:
            op(t, i, s)
            print(f"{mix:17s} {name:14s} accepted; self on {t.device}, rows 1-2 now {t[1:3, 0].tolist()}")
            accepted.append(f"{name} with a {mix}")
        except RuntimeError as error:
            print(f"{mix:17s} {name:14s} refused: {str(error)[:90]}")
if accepted:
    print("BUG: accepted where CUDA (and this backend's scatter_ family) refuse:", "; ".join(accepted))
    sys.exit(1)
print("ok")
