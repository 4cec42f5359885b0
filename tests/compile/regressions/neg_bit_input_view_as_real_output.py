"""Review of the complex-values fix (issue 26 item 5), finding 3. A complex graph input with the negative bit (torch._neg_view) returned through view_as_real: eager
returns a float32 view (with the neg bit); compiled fails at the call: Executor.cpp output_view does
base.as_strided(...).view(dtype), and Tensor.view(dtype) refuses tensors with the negative bit."""
import os, sys
os.environ["TORCH_NEURONX_DISABLE_NEFF_CACHE"] = "1"
import torch
import torch_neuronx  # noqa: F401

torch.manual_seed(0)
c = torch.randn(4, dtype=torch.complex64)
fn = lambda a: torch.view_as_real(a)  # noqa: E731
want = fn(torch._neg_view(c)).resolve_neg()
neuron_eager = fn(torch._neg_view(c.to("neuron"))).resolve_neg().cpu()
print("neuron eager equals cpu:", torch.equal(neuron_eager, want))
try:
    got = torch.compile(fn, backend="neuron", fullgraph=True)(torch._neg_view(c.to("neuron"))).resolve_neg().cpu()
    ok = torch.equal(got, want)
    print("compiled:", "equal" if ok else f"DIFFERENT {got} vs {want}")
except Exception as error:  # noqa: BLE001
    ok = False
    print(f"compiled raised {type(error).__name__}: {str(error).splitlines()[0][-250:]}")
sys.exit(0 if ok else 1)
