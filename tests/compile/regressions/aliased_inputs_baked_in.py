"""Review 8, finding 2. Inputs that alias at compile time are baked into the program as views of one another:
later calls with independent tensors read input 0's memory for input 1 (silent wrong
result), in this process and, through the disk cache, in others.

lowering.py:213-220 (_value_for_input): a placeholder whose fake storage was already seen
becomes a VIEW of the first input instead of an INPUT. bind_call
(csrc/compile/Executor.cpp:319-323) then builds it from the first input's storage and never
looks at the tensor actually passed in that position. Dynamo does not guard on storage
sharing of non-mutated inputs, and cache.key_for (cache.py:49-71) does not include input
aliasing, so both the in-process call and a disk-cache hit run the aliased program."""
import os
import sys

os.environ["TORCH_NEURONX_DISABLE_NEFF_CACHE"] = "1"
import torch
import torch_neuronx  # noqa: F401

N = torch.device("neuron")


def f(a, b):
    return a + b


g = torch.compile(f, backend="neuron")
x = torch.arange(6.0, device=N).reshape(2, 3)
print("aliased call     ", g(x[0], x[1]).cpu())           # compiled with a, b in one storage
y = torch.zeros(2, 3, device=N)
z = torch.full((2, 3), 100.0, device=N)
got = g(y[0], z[1]).cpu()                                 # independent storages, same metadata
expected = f(y[0], z[1]).cpu()
print("independent call ", got, "expected", expected)
ok = torch.equal(got, expected)

# Through the disk cache: a fresh process with independent inputs loads the aliased program.
import subprocess  # noqa: E402
import tempfile  # noqa: E402
child = r"""
import sys, torch, torch_neuronx
N = torch.device("neuron")
g = torch.compile(lambda a, b: a + b, backend="neuron")
if sys.argv[1] == "aliased":
    x = torch.arange(6.0, device=N).reshape(2, 3); g(x[0], x[1])
else:
    y = torch.zeros(2, 3, device=N); z = torch.full((2, 3), 100.0, device=N)
    print(g(y[0], z[1]).cpu().tolist(), torch_neuronx.get_dynamo_metrics()[-1].cache_hit)
"""
env = dict(os.environ, TORCH_NEURONX_NEFF_CACHE_DIR=tempfile.mkdtemp())
env.pop("TORCH_NEURONX_DISABLE_NEFF_CACHE")
subprocess.run([sys.executable, "-c", child, "aliased"], env=env, check=True, capture_output=True)
second = subprocess.run([sys.executable, "-c", child, "independent"], env=env, check=True, capture_output=True,
                        text=True).stdout.strip().splitlines()[-1]
print("fresh process, independent inputs (result, cache hit):", second, "expected [100.0, 100.0, 100.0]")
ok = ok and second.startswith("[100.0")
print("OK" if ok else "BUG: input 1 was read from input 0's storage")
sys.exit(0 if ok else 1)
