"""Review 8, finding 5. Random factory ops in a compiled graph draw from the CPU generator, not the neuron one.

aten.rand / randn / rand_like / randint / randperm (.default overloads) have no Generator
argument, and the executor turns their device=neuron argument into device=cpu
(csrc/compile/Executor.cpp:114, kDevice -> CPU); the CPU kernel then draws from the CPU
default generator. Executor.cpp:378-380 fills only explicit `Generator?` arguments with the
neuron engine. So the compiled result ignores torch.neuron.manual_seed, does not advance the
neuron generator, and advances the CPU one: eager and compiled disagree (blocking mode)."""
import os
import sys

os.environ["TORCH_NEURONX_DISABLE_NEFF_CACHE"] = "1"
import torch
import torch_neuronx  # noqa: F401

N = torch.device("neuron")


def f(x):
    return x + torch.rand(4, device=x.device)


g = torch.compile(f, backend="neuron")
z = torch.zeros(4, device=N)
g(z)  # compile

torch.manual_seed(0)
torch.neuron.manual_seed(123)
eager = f(z).cpu()
eager_next = torch.rand(4, device=N).cpu()

torch.manual_seed(0)
torch.neuron.manual_seed(123)
compiled = g(z).cpu()
compiled_next = torch.rand(4, device=N).cpu()

print("eager   ", eager, "next neuron draw", eager_next)
print("compiled", compiled, "next neuron draw", compiled_next)
ok = torch.equal(eager, compiled) and torch.equal(eager_next, compiled_next)
print("OK" if ok else "BUG: compiled random op does not follow the neuron generator")
sys.exit(0 if ok else 1)
