"""Review 8, finding 8. Ops that return Tensor[] (the _foreach_* family, unsafe_split, ...) cannot be lowered:
lowering.py:256 zips the schema's returns (one `Tensor[]`) with the list of results, so only
element 0 gets a value and `operator.getitem(result, 1)` raises IndexError (lowering.py:238).
The executor also skips list returns (csrc/compile/Executor.cpp:391, `!stack[r].isTensor()`),
so element 0 is only right by accident (LendOutputs lends its slot to the first allocation).
Consequence: torch.compile(optimizer.step, backend="neuron") fails for AdamW's default
foreach implementation."""
import os
import sys

os.environ["TORCH_NEURONX_DISABLE_NEFF_CACHE"] = "1"
import torch
import torch_neuronx  # noqa: F401

N = torch.device("neuron")


def f(a, b):
    r = torch._foreach_add([a, b], 1.0)
    return r[0] * 2 + r[1]


a = torch.ones(4, device=N)
b = torch.full((4,), 3.0, device=N)
try:
    got = torch.compile(f, backend="neuron")(a, b).cpu()
    ok = torch.equal(got, f(a, b).cpu())
    print("compiled", got)
except Exception as error:  # noqa: BLE001
    ok = False
    print(f"{type(error).__name__}: {' '.join(str(error).split())[:220]}")
print("OK" if ok else "BUG: an op returning Tensor[] cannot be compiled")
sys.exit(0 if ok else 1)
