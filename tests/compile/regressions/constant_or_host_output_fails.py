"""Review 8, finding 6. Graphs that return a constant (folded) tensor or a host (CPU) tensor compile, then fail
on every call with "output value N is not backed by an input or an output".

lowering.py:280-295 (_outputs) turns only ARENA roots into OUTPUT; a returned CONSTANT root
(fold_constants made it one) or DYNAMIC root (a CPU tensor made in the graph, lowering.py:89-90)
stays as it is, and bind_call rejects it (csrc/compile/Executor.cpp:331-338). By default
(fallback off) each call raises NEFFExecutionError; eager runs these functions fine."""
import os
import sys

os.environ["TORCH_NEURONX_DISABLE_NEFF_CACHE"] = "1"
import torch
import torch_neuronx  # noqa: F401

N = torch.device("neuron")
cases = {
    "returns a folded constant": lambda x: (x + 1, torch.arange(4.0, device=x.device)),
    "returns x.cpu()": lambda x: (x * 2).cpu(),
    "returns a CPU factory tensor": lambda x: (x * 2, torch.ones(2)),
}
failures = 0
for name, f in cases.items():
    torch._dynamo.reset()
    x = torch.arange(4.0, device=N)
    try:
        torch.compile(f, backend="neuron")(x)
        print(f"{name}: ok")
    except Exception as error:  # noqa: BLE001
        failures += 1
        print(f"{name}: {type(error).__name__}: {str(error).splitlines()[0][:160]}")
print("OK" if not failures else f"BUG: {failures} of {len(cases)} valid functions fail at every call")
sys.exit(1 if failures else 0)
