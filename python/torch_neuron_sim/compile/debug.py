"""Compilation artifacts, as TorchNeuron keeps them: with
TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS=1, each compiled graph leaves, under
TORCH_NEURONX_DEBUG_DIR (default /tmp/neuron_backend), fx_graphs/proc_{rank}/{name}.fx.txt
(the graph after our passes), neff/proc_{rank}/{name}.neff (the sealed program) and
program/proc_{rank}/{name}.json (its summary: ops, values, arena size)."""
import json
import os

from .. import _C


def _rank():
    import torch.distributed as dist
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def preserve(name, gm, program):
    """Leaves the artifacts of `program` (a loaded _C.Program) compiled from `gm`, when asked to."""
    if os.environ.get("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS", "0").strip().lower() not in ("1", "true", "yes"):
        return
    root = os.environ.get("TORCH_NEURONX_DEBUG_DIR", "/tmp/neuron_backend")
    rank = f"proc_{_rank()}"
    for folder in ("fx_graphs", "neff", "program"):
        os.makedirs(os.path.join(root, folder, rank), exist_ok=True)
    with open(os.path.join(root, "fx_graphs", rank, f"{name}.fx.txt"), "w") as f:
        f.write(gm.print_readable(print_output=False))
    with open(os.path.join(root, "neff", rank, f"{name}.neff"), "wb") as f:
        f.write(_C.seal_program(name, program.payload()))
    with open(os.path.join(root, "program", rank, f"{name}.json"), "w") as f:
        json.dump(program.describe(), f, indent=1)
