"""torch.compile(backend="neuron") (Note [Programs], Note [Executing programs]).

Loaded lazily: the compiler imports Dynamo, AOTAutograd and Inductor's output code (about 1.8 s
on these machines), and `import torch` loads this package through the device entry point. So
at start-up only two light things happen: the program cache's artifact type is registered (for
torch.compiler.load_cache_artifacts() in a fresh process), and the backend "neuron" (the light
`neuron_backend` below, which loads the compiler on its first graph) is registered with Dynamo
as Dynamo's backend registry loads, before anyone can look it up. Registering there, rather than
leaving it to the `torch_dynamo_backends` entry point, matters: two threads whose first
torch.compile runs at once would both load an entry point and the second registration would
raise "duplicate name" (review 12, finding 1)."""
import importlib.abc
import importlib.util
import sys
import threading
import warnings

import torch

from . import cache  # noqa: F401  (registers the "neuron_neff" artifact type; light)

_BACKEND_NAMES = ("NEFFCompilationError", "NEFFExecutionError", "get_model_name", "set_model_name")
_REGISTRY = "torch._dynamo.backends.registry"
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


class _RegisterAsDynamoLoads(importlib.abc.MetaPathFinder):
    """Registers the backend right after Dynamo's backend registry module has run."""

    def find_spec(self, name, path, target=None):
        if name != _REGISTRY:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _register_with(module)
        spec.loader.exec_module = exec_module
        return spec


def _inside(function):
    """Whether `function` is running on this thread's stack."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code is function.__code__:
            return True
        frame = frame.f_back
    return False


def register():
    """Makes the Dynamo backend "neuron" available, and selects it for graphs on the neuron
    device compiled with the default backend (torch.compile(model) in a script ported from
    CUDA): TorchNeuron auto-selects its backend on a Neuron device."""
    global _registered
    if _registered:
        return
    _registered = True
    if _REGISTRY in sys.modules:  # Dynamo is loaded already
        registry = sys.modules[_REGISTRY]
        if not _inside(registry.lookup_backend):
            _register_with(registry)
        # else Dynamo is loading our torch_dynamo_backends entry point (which imported this
        # package: TORCH_DEVICE_BACKEND_AUTOLOAD=0) and registers what it loads right after: a
        # registration here would make that one raise "duplicate name" (review 12, finding 3)
    else:
        sys.meta_path.insert(0, _RegisterAsDynamoLoads())
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
