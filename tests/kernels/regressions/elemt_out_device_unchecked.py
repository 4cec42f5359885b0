"""Review 11 (the recurrent layers), finding 7. batch_norm_elemt(..., out=) with `out` on the CPU or on another NeuronCore. CUDA (and every
generic neuron op, e.g. torch.add(..., out=cpu_tensor)) raises "Expected all tensors to be on
the same device"; AcceleratorOnly.cpp:113-116 computes on neuron:0 and copy_()s the result
into `out` wherever it lives, silently. (README: "a non-scalar CPU tensor or another core's
tensor mixed into an op" gives CUDA's error.) Exit 0 = fixed."""
import sys
import torch, torch_neuronx  # noqa: F401

x = torch.randn(4, 3, 5, device="neuron")
mean, invstd = torch.batch_norm_stats(x, 1e-5)
accepted = []
for where in ("cpu", "neuron:1"):
    out = torch.empty(0, device=where)
    try:
        torch.batch_norm_elemt(x, None, None, mean, invstd, 1e-5, out=out)
        accepted.append(where)
        print(f"out on {where}: accepted, written ({tuple(out.shape)})")
    except RuntimeError as e:
        print(f"out on {where}: {str(e).splitlines()[0][:100]}")
try:
    torch.add(x, x, out=torch.empty(0))
except RuntimeError as e:
    print("for comparison, torch.add(out=cpu):", str(e).splitlines()[0][:90])
sys.exit(1 if accepted else 0)
