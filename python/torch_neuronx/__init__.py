"""torch_neuronx: the import name and API of AWS's TorchNeuron package, served by the
simulated Neuron device of torch-neuron-sim. `import torch_neuronx` registers the
"neuron" device (also loaded automatically through the torch.backends entry point)."""
import torch_neuron_sim as _sim
from torch_neuron_sim import get_executed_ops, get_fallback_ops, is_simulated, reset_op_counts

__version__ = "2.13.0+sim"
__all__ = ["get_executed_ops", "get_fallback_ops", "is_simulated", "reset_op_counts"]


def _autoload():
    """Entry point of `torch.backends`: importing this module did the registration."""
    return _sim
