"""torch-neuron-sim: registers the simulated Neuron device as PyTorch's "neuron" device."""
import torch

from . import _C  # noqa: F401  (loads the bridge: allocator, guard, hooks, kernels)
from . import neuron as _neuron_module

if torch._C._get_privateuse1_backend_name() != "neuron":
    torch.utils.rename_privateuse1_backend("neuron")
    torch._register_device_module("neuron", _neuron_module)
    torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)


def get_executed_ops():
    """Ops that ran with a native neuron kernel since the last reset: {name: count}."""
    return dict(_C.executed_ops())


def get_fallback_ops():
    """Ops that ran through the generic zero-copy path since the last reset: {name: count}."""
    return dict(_C.fallback_ops())


def reset_op_counts():
    _C.reset_op_counts()


def is_simulated():
    return True
