"""Review 12, finding 2. torch.compile(m, backend=torch_neuronx.neuron_dynamo_backend.create_neuron_backend()) (the
callable, as AWS's API hands it out) before anything looked "neuron" up by name: since 09e3ce7
the function is not in Dynamo's registry (_COMPILER_FNS) until lookup_backend("neuron") loads
the entry point, so Dynamo's _is_registered_backend() says False, treats it as a user's custom
backend and leaves the compile context's weak references on the parameters
(convert_frame.clear_compile_context_weakrefs). Anything that swaps a compiled module's
parameters then fails: module.to() / load_state_dict() with
torch.__future__.set_swap_module_params_on_conversion(True), and DTensor/FSDP2 parameters,
which always swap.
Expected (as before 09e3ce7): m.to(torch.float64) and load_state_dict(assign=True) work.
Actual: RuntimeError "_apply(): Couldn't swap Linear.weight" / "While swapping the parameter
named "weight" ..." (swap_tensors: "Cannot swap t1 because it has weakref associated with it").
Exit 1 while the bug is present, 0 once fixed."""
import os
import sys
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch  # noqa: E402
import torch_neuronx  # noqa: E402,F401
from torch_neuronx.neuron_dynamo_backend import create_neuron_backend  # noqa: E402

warnings.simplefilter("ignore")
m = torch.nn.Linear(4, 4).to("neuron")
compiled = torch.compile(m, backend=create_neuron_backend())
compiled(torch.randn(2, 4, device="neuron"))

torch.__future__.set_swap_module_params_on_conversion(True)
problems = []
try:
    m.to(torch.float64)
except RuntimeError as error:
    problems.append(f"m.to(torch.float64): {str(error).splitlines()[0]}")
try:
    m.load_state_dict({k: v.clone() for k, v in m.state_dict().items()}, assign=True)
except RuntimeError as error:
    problems.append(f"load_state_dict(assign=True): {' '.join(str(error).split())[:160]}")
if problems:
    print("FAIL:", "; ".join(problems))
    sys.exit(1)
print("ok")
