"""Review 12, finding 3. Pre-existing (also before 09e3ce7; the same path is now the main one): with
TORCH_DEVICE_BACKEND_AUTOLOAD=0 and no explicit `import torch_neuronx`, the first
torch.compile(..., backend="neuron") makes Dynamo load the torch_dynamo_backends entry point;
loading it imports torch_neuronx, whose register() sees torch._dynamo loaded and registers
"neuron" itself; lookup_backend() then registers the entry point's function a second time:
AssertionError("duplicate name: neuron").
Expected: the compile works (the entry point is how Dynamo is meant to find the backend).
Actual: AssertionError: duplicate name: neuron.
Exit 1 while the bug is present, 0 once fixed."""
import os
import subprocess
import sys

code = """
import torch
f = torch.compile(lambda x: x * 2, backend="neuron")
import torch_neuronx
assert f(torch.ones(3, device="neuron")).cpu().tolist() == [2.0, 2.0, 2.0]
print("ok")
"""
env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0", HF_HUB_OFFLINE="1")
out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
if out.returncode != 0 or out.stdout.split() != ["ok"]:
    print("FAIL:", (out.stderr.strip().splitlines() or ["no output"])[-1])
    sys.exit(1)
print("ok")
