"""torch.compile(backend="neuron") (Note [Programs], Note [Executing programs]).

Loaded lazily: the backend imports Dynamo, AOTAutograd and Inductor's output code (about 1.8 s
on these machines), and `import torch` loads this package through the device entry point. So
only the program cache's artifact type (for torch.compiler.load_cache_artifacts() in a fresh
process) is registered at start-up; Dynamo finds the backend "neuron" through the
`torch_dynamo_backends` entry point the first time it looks it up, and the names below import
the backend on first use."""
import sys
import warnings

import torch

from . import cache  # noqa: F401  (registers the "neuron_neff" artifact type; light)

_BACKEND_NAMES = ("NEFFCompilationError", "NEFFExecutionError", "get_model_name", "neuron_backend", "set_model_name")
_registered = False


def __getattr__(name):
    if name in _BACKEND_NAMES:
        from . import backend
        return getattr(backend, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _register_with_dynamo():
    from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend

    from .backend import neuron_backend
    if "neuron" not in _COMPILER_FNS:
        register_backend(neuron_backend, name="neuron")


def register():
    """Makes the Dynamo backend "neuron" available, and selects it for graphs on the neuron
    device compiled with the default backend (torch.compile(model) in a script ported from
    CUDA): TorchNeuron auto-selects its backend on a Neuron device."""
    global _registered
    if _registered:
        return
    _registered = True
    if "torch._dynamo" in sys.modules:  # already paid for: register now
        _register_with_dynamo()
    # else Dynamo's lookup_backend("neuron") loads it through the torch_dynamo_backends entry point
    inductor_call = torch._TorchCompileInductorWrapper.__call__
    if getattr(inductor_call, "_neuron_auto_select", False):
        return

    def call(self, model_, inputs_, *, config_patches=None):
        if any(isinstance(t, torch.Tensor) and t.device.type == "neuron" for t in inputs_):
            from .backend import neuron_backend
            if not getattr(call, "_warned", False):
                call._warned = True
                warnings.warn("torch.compile: the graph's inputs are on the neuron device, so TorchNeuron's backend "
                              "'neuron' compiles it (Inductor does not target neuron); pass backend='neuron' to "
                              "choose it explicitly", stacklevel=2)
            mode = "max-autotune" if self.config else None  # Inductor options or a mode: they have no effect here
            return neuron_backend(model_, inputs_, mode=mode)
        return inductor_call(self, model_, inputs_, config_patches=config_patches)

    call._neuron_auto_select = True
    torch._TorchCompileInductorWrapper.__call__ = call
