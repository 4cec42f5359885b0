"""Review 11 (the recurrent layers), finding 3. Root cause of compiled_lstm_no_h0_backward.py: a constant folded at compile time (passes.py fold_constants computes it
on the CPU and registers a CPU buffer) is treated as a *host* value when the graph returns it
(lowering.py _on_host: t.device.type == "cpu"), so a compiled function returning
torch.zeros(..., device="neuron") hands back a CPU tensor, and a folded constant saved for
backward reaches the backward graph on the CPU. Eager returns neuron tensors. Exit 0 = fixed."""
import os, sys, tempfile
os.environ.setdefault("TORCH_NEURONX_NEFF_CACHE_DIR", tempfile.mkdtemp())
import torch, torch_neuronx  # noqa: F401

D = "neuron"
fail = False

def f(x):
    return x * 2, torch.zeros(1, 4, 7, device=x.device)

x = torch.randn(4, 7, device=D)
devs = [t.device.type for t in torch.compile(f, backend="neuron")(x)]
print("compiled outputs on:", devs, "(eager:", [t.device.type for t in f(x)], ")")
fail |= devs != ["neuron", "neuron"]

xr = x.clone().requires_grad_()
g = torch.compile(lambda x: (x * torch.zeros(4, 7, device=x.device).exp()).sum(), backend="neuron")
try:
    g(xr).backward()
    print("backward through a saved folded constant: ok")
except Exception as e:
    print("backward through a saved folded constant FAILED:", str(e).strip().splitlines()[-1][:160])
    fail = True
sys.exit(1 if fail else 0)
