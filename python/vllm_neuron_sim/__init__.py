"""vLLM on the `neuron` device: a vLLM platform plugin (entry point `vllm.platform_plugins`).

vLLM finds out-of-tree platforms through that entry point group and asks each plugin whether its
device is here; this one answers for the `neuron` device of torch-neuron-sim (the simulated
Trainium device, or any backend that registers `torch.neuron`). It sits above the device as
neuron_migrate does (../DESIGN.md): it reaches the device through `torch.neuron`, the `neuron`
c10d backend and `torch.compile(backend="neuron")`, and vLLM through its public plugin classes.

`VLLM_TARGET_DEVICE=cpu` keeps vLLM on its own CPU platform (vLLM reads it before any plugin),
the baseline the tests compare tokens with.
"""
import os


def register():
    """The platform's class when the `neuron` device is here, else None (vLLM's plugin contract)."""
    if os.environ.get("VLLM_NEURON_BACKEND", "neuron_native") not in ("neuron_native", "neuron"):
        return None  # vLLM Neuron's XLA route: not this device
    try:
        import torch
        import torch_neuronx  # noqa: F401  (registers the device)
    except ImportError:
        return None
    if not hasattr(torch, "neuron") or not torch.neuron.is_available():
        return None
    return "vllm_neuron_sim.neuron_platform.NeuronPlatform"
