"""Any import order registers the device: a script may import torch_neuronx (or our package)
before torch, and torch's import then loads our entry point while our module is half-loaded."""
import os
import subprocess
import sys

import pytest

SCRIPT = """
import {first}
import torch, torch_neuronx
assert (torch.ones(2, device="neuron") + 1).cpu().tolist() == [2.0, 2.0]
assert torch_neuronx.is_simulated() and torch.neuron.device_count() >= 1
print("ok", os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD"))
"""


@pytest.mark.parametrize("first,autoload", [("torch_neuronx", None), ("torch_neuron_sim", None),
                                            ("torch_neuron_sim.distributed", "1"), ("torch_neuronx", "0"),
                                            ("torch", None)])
def test_import_order(first, autoload):
    env = dict(os.environ)
    env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    if autoload is not None:
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = autoload
    out = subprocess.run([sys.executable, "-c", "import os\n" + SCRIPT.format(first=first)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    # the setting the user gave is what the script sees afterwards
    assert out.stdout.split() == ["ok", str(autoload)]


def test_import_leaves_dynamo_unloaded_until_compile_and_finds_the_backend_then():
    # The compile backend loads Dynamo, AOTAutograd and Inductor's output code (~1.8 s): not
    # at `import torch`, which loads this package through the device entry point.
    code = """
import sys, torch, torch_neuronx
assert "torch._dynamo" not in sys.modules, "import torch loaded Dynamo"
assert "torch_neuron_sim.compile.backend" not in sys.modules
f = torch.compile(lambda x: x * 2 + 1, backend="neuron", fullgraph=True)
x = torch.arange(4.0, device="neuron")
assert f(x).cpu().tolist() == [1.0, 3.0, 5.0, 7.0]
assert torch_neuronx.get_dynamo_metrics(), "the graph did not go through the neuron backend"
assert "neuron" in torch._dynamo.list_backends()
from torch_neuronx.neuron_dynamo_backend import NEFFCompilationError, neuron_backend
from torch._dynamo.backends.registry import lookup_backend
assert lookup_backend("neuron") is neuron_backend
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.split() == ["ok"], out.stderr[-2000:]
