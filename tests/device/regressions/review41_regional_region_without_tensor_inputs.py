"""Patch 5 decides a region's device from its *inputs* only: a region marked compile_with_inductor
on neuron whose inputs are not tensors (it makes its tensors on neuron from sizes or scalars) is
sent to Inductor, which does not generate code for neuron. It must run as aot_eager runs the rest."""
import os  # noqa: E402
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
CONFIGS = os.path.join(HERE, "configs")
import warnings
import torch, torch_neuronx  # noqa
import torch.fx.traceback as fx_traceback
from torch._dynamo.backends.common import aot_autograd
from torch.fx.passes.regional_inductor import regional_inductor

def f(x, n: int):
    with fx_traceback.annotate({"compile_with_inductor": {"inductor_configs": {}}}):
        y = torch.arange(8, device="neuron", dtype=torch.float32) * 2.0
    return x + y

backend = aot_autograd(fw_compiler=regional_inductor, bw_compiler=regional_inductor)
x = torch.ones(8, device="neuron")
warnings.simplefilter("ignore")
try:
    out = torch.compile(f, backend=backend, fullgraph=True)(x, 3)
except Exception as e:  # noqa: BLE001
    raise SystemExit(f"FAIL: a neuron region without tensor inputs went to Inductor: {type(e).__name__}: "
                     f"{str(e).splitlines()[0][:300]}")
assert out.cpu().tolist() == (torch.ones(8) + torch.arange(8) * 2.0).tolist(), out
print("ok")
