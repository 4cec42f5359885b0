"""Issue 23, review 17 (lesser finding), fixed by meta kernels in csrc/kernels/Random.cpp. the first call of a compiled graph drawing binomial (also _sample_dirichlet, hence
distributions.Beta / Binomial / Dirichlet) is not reproducible under torch.neuron.manual_seed:
tracing runs the real kernel once, on the device's generator, before the call draws.

torch.binomial and torch._sample_dirichlet have no meta kernel in PyTorch, so Dynamo's
FakeTensor falls back to running the real neuron kernel (csrc/kernels/Random.cpp binomial /
sample_dirichlet) on zero-filled neuron tensors while tracing; it takes words from the
device's default generator (offset 16, not 8, after the first call). Same with
backend="eager", and it would be on CUDA: PyTorch's behaviour, but cheap to avoid here by
registering fake (meta) kernels for these ops on the device library. tests/rng_ops.py's
compiled check warms up before seeding, so it does not see it."""
import os
import sys
import warnings

os.environ["TORCH_NEURONX_DISABLE_NEFF_CACHE"] = "1"
warnings.simplefilter("ignore")
import torch
import torch_neuronx  # noqa: F401


def f(x):
    return torch.binomial(x * 20.0, torch.linspace(0, 1, 8, device=x.device))


g = torch.compile(f, backend="neuron")
x = torch.ones(8, device="neuron")
runs = []
for _ in range(2):
    torch.neuron.manual_seed(11)
    values = g(x).cpu().tolist()
    offset = int(torch.neuron.get_rng_state()[8:].view(torch.int64))
    runs.append((values, offset))
    print("after manual_seed(11):", values, "generator offset", offset)
if runs[0] != runs[1]:
    print("BUG: the first compiled call drew more (tracing ran the kernel) and is not reproducible")
    sys.exit(1)
print("OK")
sys.exit(0)
