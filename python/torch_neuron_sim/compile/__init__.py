"""torch.compile(backend="neuron") (Note [Programs], Note [Executing programs]).

Loaded lazily: the compiler imports Dynamo, AOTAutograd and Inductor's output code (about 1.8 s
on these machines), and `import torch` loads this package through the device entry point. So
at start-up only light things happen: the program cache's artifact type is registered (for
torch.compiler.load_cache_artifacts() in a fresh process), and the backend "neuron" (the light
`neuron_backend` below, which loads the compiler on its first graph) is registered with Dynamo
as Dynamo's backend registry loads, before anyone can look it up, so that it is registered
exactly once whichever threads compile first (patch 1 of Note [Patches of torch internals],
torch_patches.py); and flex_attention runs on neuron tensors (patch 4 there and the HOP's
kernel for our key, a few ms: Note [FlexAttention on neuron], flex_attention.py)."""
import threading

from . import cache  # noqa: F401  (registers the "neuron_neff" artifact type; light)
from . import torch_patches

_BACKEND_NAMES = ("NEFFCompilationError", "NEFFExecutionError", "get_model_name", "set_model_name")
_registered = False
_register_lock = threading.Lock()


def __getattr__(name):
    if name in _BACKEND_NAMES:
        from . import backend
        return getattr(backend, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def neuron_backend(gm, example_inputs, **kwargs):
    """The Dynamo backend "neuron": neuron_backend(gm, example_inputs, *, options=None,
    mode=None) (loads the compiler on first use)."""
    from .backend import neuron_backend as compile_graph
    return compile_graph(gm, example_inputs, **kwargs)


def _register_with(registry):
    with _register_lock:
        if "neuron" not in registry._COMPILER_FNS:
            registry.register_backend(neuron_backend, name="neuron")


def _register_device_interface(_module):
    from . import device_interface
    device_interface.register()


def _patch_transformers_cache(cache_utils):
    from . import transformers_patches
    transformers_patches.install(cache_utils)


def register():
    """Makes the Dynamo backend "neuron" available, and selects it for graphs on the neuron
    device compiled with the default backend (torch.compile(model) in a script ported from
    CUDA): TorchNeuron auto-selects its backend on a Neuron device. Idempotent."""
    global _registered
    if _registered:
        return
    _registered = True
    torch_patches.register_as_dynamo_loads(_register_with)
    torch_patches.select_neuron_for_neuron_tensors(neuron_backend)
    torch_patches.accept_neuron_in_flex_attention()
    # Dynamo's device interface for neuron (streams and events in compiled code), as Dynamo's
    # device-interface module loads
    torch_patches.run_after_load("torch._dynamo.device_interface", _register_device_interface)
    # regional_inductor's regions on neuron run as aot_eager runs the rest (patch 5)
    torch_patches.run_after_load(torch_patches.REGIONAL_INDUCTOR, torch_patches.leave_neuron_regions_to_aot_eager)
    # transformers' sliding-window static cache compiles once on neuron (Note [Sliding-window static
    # caches compile once], transformers_patches.py), as transformers' cache module loads
    torch_patches.run_after_load("transformers.cache_utils", _patch_transformers_cache)
    from . import flex_attention
    flex_attention.register()
