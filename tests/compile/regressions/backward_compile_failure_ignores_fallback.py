"""Review 8, finding 9. Fallback execution does not cover backward graphs: AOTAutograd compiles the backward
lazily, at the first .backward(), outside the try of neuron_backend (backend.py:236-256), so
a backward graph that fails to compile raises its raw internal error (here IndexError from
lowering.py:238) even with TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0, and without it the
error is not the NEFFCompilationError the forward path gives."""
import os
import sys

os.environ["TORCH_NEURONX_DISABLE_NEFF_CACHE"] = "1"
os.environ["TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION"] = "0"    # fallback on
import torch
import torch_neuronx  # noqa: F401

N = torch.device("neuron")


class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        return a * 2 + b * 3

    @staticmethod
    def backward(ctx, grad):
        ga, gb = torch._foreach_mul([grad, grad], [2.0, 3.0])   # a graph the lowering refuses
        return ga, gb


def f(a, b):
    return Scale.apply(a, b).sum()


a = torch.ones(4, device=N, requires_grad=True)
b = torch.ones(4, device=N, requires_grad=True)
loss = torch.compile(f, backend="neuron")(a, b)
print("forward:", float(loss))
try:
    loss.backward()
    ok = torch.equal(a.grad.cpu(), torch.full((4,), 2.0)) and torch.equal(b.grad.cpu(), torch.full((4,), 3.0))
    print("backward:", a.grad.cpu(), b.grad.cpu())
except Exception as error:  # noqa: BLE001
    ok = False
    print(f"backward raised {type(error).__name__}: {error}")
print("OK" if ok else "BUG: the backward graph's compile failure bypassed fallback execution")
sys.exit(0 if ok else 1)
