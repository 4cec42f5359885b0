"""Review 8, finding 7. A CPU tensor input (here a 0-dim CPU scalar, which eager neuron code accepts, e.g. an
optimizer's step/lr tensor) compiles, then every call fails.

lowering.py:82-83,218 marks such an input on_host and the executor has host-value paths,
but check_input (csrc/compile/Executor.cpp:85-87) requires every input on neuron:<device>.
TorchNeuron copies CPU inputs to the device instead (TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY
turns that off; torchneuron-facts.md section 1, "Execution-failure fallback")."""
import os
import sys

os.environ["TORCH_NEURONX_DISABLE_NEFF_CACHE"] = "1"
import torch
import torch_neuronx  # noqa: F401

N = torch.device("neuron")


def f(x, scale):
    return x * scale


x = torch.arange(4.0, device=N)
scale = torch.tensor(2.0)            # CPU, 0-dim
expected = f(x, scale).cpu()         # eager: fine
try:
    got = torch.compile(f, backend="neuron")(x, scale).cpu()
    ok = torch.equal(got, expected)
    print("compiled", got, "expected", expected)
except Exception as error:  # noqa: BLE001
    ok = False
    print(f"{type(error).__name__}: {str(error).splitlines()[0][:200]}")
print("OK" if ok else "BUG: a CPU scalar input makes every call fail")
sys.exit(0 if ok else 1)
