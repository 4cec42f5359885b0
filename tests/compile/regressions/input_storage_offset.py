"""Review 8, finding 1. A compiled graph that views an input reads the wrong memory when the input's storage
offset differs from the one it was compiled with (silent wrong result).

Lowering (python/torch_neuron_sim/compile/lowering.py:95-98, 242-251) records an in-graph
view of an input with the absolute storage offset its fake tensor had at compile time;
bind_call (csrc/compile/Executor.cpp:323) rebuilds it as view_of(input's host view,
spec) over the *runtime* input's storage with that compile-time offset, ignoring the input's
own storage_offset(). check_input (Executor.cpp:82-98) does not check the offset and Dynamo
does not guard on it, so no recompile happens.
Typical trigger: chunked prefill / sliding windows (input_ids[:, i:i+k]), x[1:] inputs."""
import os
import sys

os.environ["TORCH_NEURONX_DISABLE_NEFF_CACHE"] = "1"
import torch
import torch_neuronx  # noqa: F401

N = torch.device("neuron")


def f(x):
    return x.view(-1) * 2          # any in-graph view of the input


g = torch.compile(f, backend="neuron")
big = torch.arange(12.0, device=N).reshape(4, 3)
first = g(big[0:2])                # storage offset 0: compiled here
second = g(big[2:4])               # same shape/strides, storage offset 6: no recompile
expected = f(big[2:4])
print("first   ", first.cpu())
print("second  ", second.cpu())
print("expected", expected.cpu())



# The same in a usual loop: mini-batches from X.split() through a model with nn.Flatten.
torch._dynamo.reset()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 3)).to(N).eval()
compiled = torch.compile(model, backend="neuron")
X = torch.randn(16, 3, 4, device=N)
with torch.no_grad():
    batches_ok = [torch.allclose(compiled(xb).cpu(), model(xb).cpu(), atol=1e-5) for xb in X.split(4)]
print("mini-batches equal to eager:", batches_ok)

ok = torch.equal(second.cpu(), expected.cpu()) and all(batches_ok)
print("OK" if ok else "BUG: views of an input ignore the input's storage offset")
sys.exit(0 if ok else 1)
