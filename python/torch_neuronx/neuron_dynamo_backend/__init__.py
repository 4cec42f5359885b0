"""torch_neuronx.neuron_dynamo_backend: the public helpers of AWS's compile backend.

The simulator compiles graphs to its own programs (no StableHLO, no neuronx-cc), so the
MLIR helpers of AWS's module raise an error that says so."""
import torch

from torch_neuron_sim.compile import (NEFFCompilationError, NEFFExecutionError, get_model_name,  # noqa: F401
                                      neuron_backend, set_model_name)
from torch_neuron_sim.dynamo_metrics import get_dynamo_metrics, reset_dynamo_metrics  # noqa: F401

__all__ = ["NEFFExecutionError", "create_neuron_backend", "fx_to_mlir_string", "get_dynamo_metrics",
           "get_model_name", "get_rank", "load_mlir", "neuron_backend", "reset_dynamo_metrics", "save_fx_as_mlir",
           "save_fx_graph_all_formats", "save_fx_graph_txt", "save_mlir", "set_model_name"]


def create_neuron_backend():
    """The backend callable (neuron_backend(gm, example_inputs, *, options=None, mode="default"))."""
    return neuron_backend


def get_rank():
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return torch.neuron.current_device()


def save_fx_graph_txt(gm, path):
    """Writes the graph's readable form to `path`."""
    with open(path, "w") as f:
        f.write(gm.print_readable(print_output=False))


def _no_mlir(name):
    def unavailable(*args, **kwargs):
        raise NotImplementedError(f"torch_neuronx.neuron_dynamo_backend.{name}: the simulated neuron backend compiles "
                                  f"FX graphs to its own programs, not to StableHLO/MLIR; use save_fx_graph_txt, or "
                                  f"TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS=1 for the programs it makes")
    unavailable.__name__ = name
    return unavailable


fx_to_mlir_string = _no_mlir("fx_to_mlir_string")
save_fx_as_mlir = _no_mlir("save_fx_as_mlir")
load_mlir = _no_mlir("load_mlir")
save_mlir = _no_mlir("save_mlir")
save_fx_graph_all_formats = _no_mlir("save_fx_graph_all_formats")
