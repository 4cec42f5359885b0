"""torch-neuron-sim: registers the simulated Neuron device as PyTorch's "neuron" device."""
import atexit
import os
import sys

# Imported before torch: torch's import loads the backends' entry points, and ours (torch_neuronx)
# imports this package, which would be half-loaded then. Load torch without them and run them
# once this package is complete (end of this file).
_AUTOLOAD_SETTING = os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD")
_AUTOLOAD_AFTER = "torch" not in sys.modules and _AUTOLOAD_SETTING in (None, "1")
if _AUTOLOAD_AFTER:
    os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    try:
        import torch
    finally:
        if _AUTOLOAD_SETTING is None:
            del os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"]
        else:
            os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = _AUTOLOAD_SETTING
import torch  # noqa: E402

from . import _C  # noqa: F401  (loads the bridge: allocator, guard, hooks, kernels)
from . import neuron as _neuron_module
from . import op_set as _op_set
from .op_set import FILE as _OP_SET_FILE, read as _read_op_set  # noqa: F401  (tests/test_op_tracking.py reads with them)

_C._set_torchneuron_op_set(*_op_set.sections())
# Note [Device clock]: the platforms' constants, each with its source; NEURON_SIM_DEVICE_CLOCK=0 turns it off.
_C._start_device_clock(os.path.join(os.path.dirname(__file__), "data", "platforms.toml"))

from . import compile as _compile  # noqa: E402

_compile.register()

if torch._C._get_privateuse1_backend_name() != "neuron":
    torch.utils.rename_privateuse1_backend("neuron")
    torch._register_device_module("neuron", _neuron_module)
    sys.modules["torch.neuron.memory"] = _neuron_module.memory
    torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=True)

from . import distributed as _distributed  # noqa: E402

_distributed.register()

from . import _interop  # noqa: E402

_interop.register()  # DLPack and torch.multiprocessing for the renamed device

# Before the interpreter finalizes: a Python object dropped later on another thread (autograd's
# device thread, a collective's release) retakes the GIL inside a destructor, which then ends
# that thread: std::terminate (Note [The autograd device thread at exit] in csrc/ExitQuiesce.cpp)
atexit.register(_C._quiesce_for_exit)


def get_executed_ops():
    """Unique names of the ops TorchNeuron 2.13 would run on the device, seen since start-up
    or the last clear_op_tracking() (e.g. ["aten::mul.Tensor", ...])."""
    return _C.executed_op_names()


def get_fallback_ops():
    """Unique names of the ops TorchNeuron 2.13 would run on the CPU, seen since start-up or
    the last clear_op_tracking()."""
    return _C.fallback_op_names()


def clear_op_tracking():
    _C.clear_op_tracking()


def get_op_counts():
    """Ours, not AWS's: every op seen since the last clear, with how many times it ran, how
    the simulator computed it ("hot": a kernel of ours; "generic": the zero-copy path) and
    where TorchNeuron would run it ("device" or "cpu")."""
    return {name: {"count": count, "kernel": kernel, "torchneuron": "device" if on_device else "cpu"}
            for name, count, kernel, on_device in _C.op_counts()}


def is_simulated():
    return True


if _AUTOLOAD_AFTER:
    torch._import_device_backends()
