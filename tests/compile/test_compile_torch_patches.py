"""The five patches of torch internals (Note [Patches of torch internals],
compile/torch_patches.py): each test checks the internals a patch relies on and that torch
still reaches the patched code, so a torch upgrade that moves them fails here, by name."""
import inspect
import warnings

import pytest
import torch

from conftest import run_python


@pytest.fixture(autouse=True)
def _fresh(fresh_dynamo):
    """Each test compiles afresh (conftest.fresh_dynamo)."""


REGISTRY_SCRIPT = r"""
import sys
import torch
from torch_neuron_sim.compile import torch_patches
def hooked_for(name):
    return [f for f in sys.meta_path if isinstance(f, torch_patches._RunAfterLoad) and f.module_name == name]
hooked = hooked_for(torch_patches.DYNAMO_REGISTRY)
assert torch_patches.DYNAMO_REGISTRY not in sys.modules, "import torch loaded Dynamo's backend registry"
assert len(hooked) == 1, sys.meta_path
import torch._dynamo.backends.registry as registry
assert "neuron" in registry._COMPILER_FNS, "the backend was not registered as the registry loaded"
assert not hooked_for(torch_patches.DYNAMO_REGISTRY)
for name in ("register_backend", "lookup_backend", "_COMPILER_FNS"):
    assert hasattr(registry, name), name
assert registry.lookup_backend("neuron") is registry._COMPILER_FNS["neuron"]
import torch._dynamo.device_interface as device_interface
assert not hooked_for("torch._dynamo.device_interface")
assert device_interface.get_interface_for_device("neuron").__name__ == "NeuronInterface"
print("ok")
"""


def test_the_backend_registers_as_dynamos_registry_loads():
    """Patch 1: `import torch` leaves our finder on sys.meta_path, and importing Dynamo's backend
    registry (by its name) registers "neuron" before any lookup, and removes the finder."""
    result = run_python(REGISTRY_SCRIPT)
    assert result.returncode == 0 and result.stdout.split()[-1:] == ["ok"], result.stderr[-3000:]


def test_torch_compile_without_a_backend_goes_through_the_wrapped_call(monkeypatch):
    """Patch 2: torch.compile(f) without a backend calls _TorchCompileInductorWrapper.__call__,
    whose signature is the wrapper's, and graphs on neuron tensors reach our backend: mode=None
    for the default mode, "max-autotune" when a mode or Inductor options were given."""
    call = torch._TorchCompileInductorWrapper.__call__
    assert getattr(call, "_neuron_auto_select", False)
    original = inspect.signature(call._wrapped_inductor_call).parameters
    assert list(original) == ["self", "model_", "inputs_", "config_patches"]
    assert original["config_patches"].kind is inspect.Parameter.KEYWORD_ONLY
    from torch_neuron_sim.compile import backend
    modes = []

    def spy(gm, example_inputs, *, options=None, mode=None):
        modes.append(mode)
        return gm.forward
    monkeypatch.setattr(backend, "neuron_backend", spy)
    x = torch.ones(3, device="neuron")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the selection warns once per process
        torch.testing.assert_close(torch.compile(lambda t: t * 2 + 1)(x).cpu(), torch.full((3,), 3.0))
        torch.testing.assert_close(torch.compile(lambda t: t - 1, mode="max-autotune-no-cudagraphs")(x).cpu(),
                                   torch.zeros(3))
    assert modes == [None, "max-autotune"]


def test_aotautograds_cache_asks_the_patched_key_function(monkeypatch, tmp_path):
    """Patch 3: AOTAutogradCache.try_load looks autograd_cache_key up by its global name, so
    while our backend compiles, AOTAutograd's entries are named by our key."""
    from torch._functorch._aot_autograd import autograd_cache
    assert callable(autograd_cache.autograd_cache_key)
    assert "autograd_cache_key" in autograd_cache.AOTAutogradCache.try_load.__code__.co_names
    from torch_neuron_sim.compile import backend
    original, keys = backend._aot_cache_key, []

    def spy(*args, **kwargs):
        key, debug_lines = original(*args, **kwargs)
        keys.append(key)
        return key, debug_lines
    monkeypatch.setattr(backend, "_aot_cache_key", spy)
    compiled = torch.compile(lambda t: t * 2 + 1, backend="neuron")
    torch.testing.assert_close(compiled(torch.ones(3, device="neuron")).cpu(), torch.full((3,), 3.0))
    assert len(keys) == 1 and keys[0].startswith("aneuron"), keys
    entries = tmp_path / "inductor_cache" / "aotautograd"  # conftest.fresh_dynamo's folder
    assert sorted(entry.name for entry in entries.iterdir()) == keys


def test_flex_attention_validates_the_device_through_the_patched_function():
    """Patch 4: flex_attention looks _validate_device up by its global name and finds our wrapper,
    which accepts neuron tensors; torch's own check, which the wrapper gives every other device,
    still refuses neuron (once it accepts PrivateUse1 devices, the patch can go)."""
    from torch.nn.attention import flex_attention as module
    validate = module._validate_device
    assert getattr(validate, "_neuron_accepts", False)
    assert "_validate_device" in module.flex_attention.__code__.co_names
    on_neuron = torch.ones(1, 1, 16, 16, device="neuron", requires_grad=True)
    with pytest.raises(ValueError, match="FlexAttention is only supported on"):
        validate._wrapped(on_neuron, on_neuron, on_neuron)
    validate(on_neuron, on_neuron, on_neuron)
    on_cpu = torch.ones(1, 1, 16, 16, requires_grad=True)
    with pytest.raises(NotImplementedError, match="does not support backward on CPU"):
        validate(on_cpu, on_cpu, on_cpu)



def _graph_with_a_region(device):
    """A graph calling one region named as regional_inductor names them, its input on `device`."""
    gm = torch.fx.symbolic_trace(torch.nn.Sequential(torch.nn.ReLU()))
    node = next(iter(gm.graph.find_nodes(op="call_module")))
    gm.add_submodule("__marked_inductor_submod0", gm.get_submodule(node.target))
    node.target = "__marked_inductor_submod0"
    next(iter(gm.graph.find_nodes(op="placeholder"))).meta["val"] = torch.empty(2, device=device)
    gm.recompile()
    return gm


def test_regional_inductor_compiles_regions_through_the_patched_function():
    """Patch 5: regional_inductor's region compiler looks _compile_submod up by its global name
    and finds our wrapper; a region on the CPU goes to the wrapped function (Inductor), one on
    neuron is left in place (with a warning once), a graph mixing both is refused."""
    import types
    from torch.fx.passes import regional_inductor as module
    from torch_neuron_sim.compile import torch_patches
    assert getattr(module._compile_submod, "_neuron_leaves", False)
    assert "_compile_submod" in module._RegionCompiler.compile_region.__code__.co_names

    calls = []
    fake = types.SimpleNamespace(_compile_submod=lambda gm, prefix: calls.append(prefix) or "compiled")
    torch_patches.leave_neuron_regions_to_aot_eager(fake)
    assert fake._compile_submod(_graph_with_a_region("cpu"), "__marked_inductor_submod") == "compiled"
    assert calls == ["__marked_inductor_submod"]
    on_neuron = _graph_with_a_region("neuron")
    with pytest.warns(UserWarning, match="Inductor does not generate code for the neuron device"):
        assert fake._compile_submod(on_neuron, "__marked_inductor_submod") is on_neuron
    assert calls == ["__marked_inductor_submod"]
    x = torch.tensor([-1.0, 2.0], device="neuron")
    assert on_neuron(x).cpu().tolist() == [0.0, 2.0]

    mixed = _graph_with_a_region("neuron")
    cpu_region = _graph_with_a_region("cpu")
    mixed.add_submodule("__marked_inductor_submod1", cpu_region.get_submodule("__marked_inductor_submod0"))
    with mixed.graph.inserting_after(next(iter(mixed.graph.find_nodes(op="placeholder")))):
        other = mixed.graph.placeholder("y")
        other.meta["val"] = torch.empty(2)
        mixed.graph.call_module("__marked_inductor_submod1", (other,))
    with pytest.raises(NotImplementedError, match=r"regions \['__marked_inductor_submod0'\] are on the neuron device"):
        fake._compile_submod(mixed, "__marked_inductor_submod")
