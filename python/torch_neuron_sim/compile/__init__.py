"""torch.compile(backend="neuron") (Note [Programs], Note [Executing programs])."""
import warnings

import torch

from .backend import (NEFFCompilationError, NEFFExecutionError, get_model_name, neuron_backend,  # noqa: F401
                      set_model_name)

_registered = False


def register():
    """Registers the Dynamo backend "neuron", and selects it for graphs on the neuron device
    compiled with the default backend (torch.compile(model) in a script ported from CUDA):
    TorchNeuron auto-selects its backend on a Neuron device."""
    global _registered
    if _registered:
        return
    _registered = True
    from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend
    if "neuron" not in _COMPILER_FNS:
        register_backend(neuron_backend, name="neuron")
    inductor_call = torch._TorchCompileInductorWrapper.__call__
    if getattr(inductor_call, "_neuron_auto_select", False):
        return

    def call(self, model_, inputs_, *, config_patches=None):
        if any(isinstance(t, torch.Tensor) and t.device.type == "neuron" for t in inputs_):
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
