"""Issue 26 item 5: torchtitan's compiled training drifted 3-4e-3 from eager over 10 steps. Its
llama3 applies rotary embeddings with complex numbers (torchtitan/models/common/rope.py, ComplexRoPE:
view_as_complex(q) * cache, then view_as_real). Two defects of programs with complex values:

1. Silent wrong gradients: the backward of a complex product is grad * other.conj(), and conj (like
   _neg_view) only sets a bit on the tensor, which ATen's kernels resolve. A program's values are
   memory layouts without that bit, so the program multiplied by the unconjugated value: the query
   and key weights' gradients were wrong (here off by hundreds), and the model still trained.
   Now passes.materialize_lazy_views lowers them as conj_physical / neg.
2. A graph whose output is a view of another dtype than its base (view_as_real of a complex result,
   Tensor.view(dtype)) failed at its first call ("setStorage: ... itemsize 8 ... out of bounds"):
   the executor made the output with as_strided on the base, which keeps the base's dtype. Now
   Executor.cpp's output_view takes the view in its own dtype."""
import os
import sys

os.environ["TORCH_NEURONX_DISABLE_NEFF_CACHE"] = "1"
import torch
import torch_neuronx  # noqa: F401

torch.manual_seed(0)
B, S, H, D = 2, 8, 4, 16
cache = torch.polar(torch.ones(S, D // 2), torch.randn(S, D // 2))


def rope(x, w, cache):
    q = (x @ w).view(B, S, H, D)
    c = cache[:S].view(1, S, 1, D // 2)
    q_ = torch.view_as_complex(q.float().reshape(B, S, H, -1, 2))
    return torch.view_as_real(q_ * c).flatten(3).transpose(1, 2)  # a float32 view of a complex64 result


x, w = torch.randn(B, S, 32), torch.randn(32, H * D)
failures = []


def run(device, fn):
    xs = x.clone().to(device).requires_grad_()
    ws = w.clone().to(device).requires_grad_()
    out = fn(xs, ws, cache.to(device))
    out.square().sum().backward()
    return out.detach().cpu(), xs.grad.cpu(), ws.grad.cpu()


reference = run("cpu", rope)
compiled = run("neuron", torch.compile(rope, backend="neuron", fullgraph=True))
for name, got, want in zip(("output", "x.grad", "w.grad"), compiled, reference):
    error = (got - want).abs().max().item()
    print(f"{name}: largest difference from the CPU {error:.3g}")
    if not torch.allclose(got, want, rtol=1e-5, atol=1e-4):
        failures.append(name)

# conj and _neg_view in a forward graph, and outputs of another dtype than their base
a = torch.randn(2, S, D // 2, 2)
cases = {
    "a * c.conj()": lambda a, c: torch.view_as_real(torch.view_as_complex(a) * c.conj()),
    "a * _neg_view(c)": lambda a, c: torch.view_as_real(torch.view_as_complex(a) * torch._neg_view(c)),
    "view_as_real output": lambda a, c: torch.view_as_real(torch.view_as_complex(a) * c)[..., 0],
    "view(int32) output": lambda a, c: (a * 2).view(torch.int32),
    "conj of a real tensor": lambda a, c: a.conj() * 2,
}
for name, fn in cases.items():
    want = fn(a, cache)
    got = torch.compile(fn, backend="neuron", fullgraph=True)(a.to("neuron"), cache.to("neuron")).cpu()
    same = got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)
    print(f"{name}: {'equal' if same else 'DIFFERENT'} ({got.dtype} {tuple(got.shape)})")
    if not same:
        failures.append(name)
    torch._dynamo.reset()

sys.exit(1 if failures else 0)
