"""Note [Patches of torch internals]
The backend needs five things torch has no public hook for. Each is patched here and only
here, each relies on named internals of torch, and each has tests that fail when a torch
release moves those internals (tests/compile/test_compile_torch_patches.py checks the internals
themselves; the end-to-end tests named below check what the patch is for). Upgrading torch:
run those tests first.

1. register_as_dynamo_loads(register): a `sys.meta_path` finder that runs `register(registry)`
   right after Dynamo's backend registry module (torch._dynamo.backends.registry) has run,
   before anyone can look a backend up; or registers at once when Dynamo is loaded already.
   Why: leaving the backend "neuron" to the torch_dynamo_backends entry point alone races:
   two threads whose first torch.compile runs at once both load the entry point, and the
   second registration raises "duplicate name". While Dynamo itself is loading our entry
   point (lookup_backend on this thread's stack: TORCH_DEVICE_BACKEND_AUTOLOAD=0), nothing
   is registered here: Dynamo registers what the entry point returns, and a registration of
   ours would make that one raise "duplicate name".
   Relies on: the module's name; its register_backend, lookup_backend and _COMPILER_FNS; its
   loader having exec_module.
   Tests: test_compile_torch_patches.py::test_the_backend_registers_as_dynamos_registry_loads;
   tests/device/regressions/concurrent_first_compile_duplicate_name.py and
   autoload_off_compile_by_name_duplicate.py (run by test_device_regressions.py);
   tests/compile/test_compile.py::test_backend_is_registered_and_found_through_the_entry_point.

2. select_neuron_for_neuron_tensors(backend): wraps torch._TorchCompileInductorWrapper.__call__
   (what torch.compile(model) without a backend calls) so that a graph whose inputs are on the
   neuron device, or that makes neuron tensors (a graph resumed after a graph break may take no
   tensor and build one, `torch.arange(n, device=neuron) + k`: Inductor then failed with
   "KeyError: 'neuron'"), compiles with `backend` (warning once); any other graph goes to
   Inductor unchanged.
   Why: TorchNeuron selects its backend on a Neuron device, so a script ported from CUDA that
   calls torch.compile(model) works; Inductor does not target neuron.
   Relies on: the class's name, __call__(self, model_, inputs_, *, config_patches=None), and
   its `config` (Inductor options or a mode: empty for the default mode).
   Tests: test_compile_torch_patches.py::test_torch_compile_without_a_backend_goes_through_the_wrapped_call;
   tests/compile/test_compile.py::test_compile_without_backend_auto_selects_neuron_on_neuron_tensors.

3. aot_autograd_cache_key(key_function): a context manager that replaces
   torch._functorch._aot_autograd.autograd_cache.autograd_cache_key (unittest.mock) while our
   backend compiles.
   Why: Note [Caching past AOTAutograd] (compile/backend.py): AOTAutograd's own key function
   loads all of Inductor's code generators and hashes torch's sources (about 1.5 s per
   process); ours, cache.dynamo_graph_key, covers what it covers for our graphs.
   Relies on: AOTAutogradCache.try_load calling the module's autograd_cache_key(mod, args,
   aot_config, compiler_config_extra) through its global name and taking (key, debug lines).
   Tests: test_compile_torch_patches.py::test_aotautograds_cache_asks_the_patched_key_function;
   tests/compile/test_compile.py::test_a_warm_start_takes_inference_and_training_graphs_from_aotautograds_cache
   (its entries are named by our key: "aneuron...").

4. accept_neuron_in_flex_attention(): wraps torch.nn.attention.flex_attention._validate_device
   so that query/key/value on the neuron device pass it (forward and backward); any other
   device gets torch's own check unchanged.
   Why: PyTorch 2.13's flex_attention refuses every device outside a hard-coded list ("cuda",
   "cpu", "xpu", "hpu", "mps"; its docstring: "TODO: Remove once non cuda/cpu devices support
   is added"), though what runs it is device-agnostic (Note [FlexAttention on neuron],
   compile/flex_attention.py); PyTorch's reviewers agreed PrivateUse1 should pass
   (pytorch/pytorch#148656). Eager calls and Dynamo's tracing of flex_attention both look the
   function up through the module's globals at call time, so both see the wrapper.
   Relies on: the module's _validate_device(query, key, value), called by flex_attention
   through its global name.
   Tests: test_compile_torch_patches.py::test_flex_attention_validates_the_device_through_the_patched_function;
   tests/compile/test_flex_attention.py (eager and compiled on neuron).

5. leave_neuron_regions_to_aot_eager(module): wraps torch.fx.passes.regional_inductor's
   _compile_submod(gm, prefix) so that a region marked compile_with_inductor whose tensors are on
   the neuron device is left in the graph as a submodule that runs as the rest of an aot_eager
   graph runs (op by op on the device; flex_attention by its HOPs' kernels for neuron), with a
   warning once; regions on other devices go to Inductor unchanged.
   Why: regional_inductor (what torchtitan wraps `--compile.backend aot_eager` in for a model
   with FlexAttention) hands the flex region to Inductor's standalone_compile, and Inductor does
   not generate code for neuron: it failed deep in its flex lowering ("'_DeviceProperties' object
   has no attribute 'multi_processor_count'", after "No interface for device neuron" before
   Dynamo's device interface for neuron was registered). aot_eager runs everything else eagerly,
   so running the region eagerly too gives aot_eager's numbers; `--compile.backend inductor`
   (which compiles with backend "neuron", patch 2) is the road that compiles it.
   Relies on: the module's _compile_submod(gm, prefix), called by _RegionCompiler.compile_region
   through its global name; the region's call_module nodes named with `prefix`, and the
   meta["val"] of their inputs, of themselves and of their submodules' nodes.
   Tests: test_compile_torch_patches.py::test_regional_inductor_compiles_regions_through_the_patched_function;
   tests/compile/test_flex_attention.py::test_regional_inductor_region_on_neuron_runs_as_aot_eager;
   tests/distributed/test_torchtitan.py::test_compile_backends_other_than_inductor_with_flex_attention.

Import cost: this module is loaded with the package at `import torch` (the device entry
point), so it imports nothing of Dynamo, AOTAutograd or Inductor at module level."""
import importlib.abc
import importlib.util
import sys
import warnings

import torch

DYNAMO_REGISTRY = "torch._dynamo.backends.registry"


# ---- 1. registering as Dynamo's backend registry loads ---------------------------------------

class _RunAfterLoad(importlib.abc.MetaPathFinder):
    """Runs `register(module)` right after the module named `module_name` has run."""

    def __init__(self, register, module_name=DYNAMO_REGISTRY):
        self.register = register
        self.module_name = module_name

    def find_spec(self, name, path, target=None):
        if name != self.module_name:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            self.register(module)
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


def register_as_dynamo_loads(register):
    """Patch 1 of Note [Patches of torch internals]: `register(registry module)` runs once
    Dynamo's backend registry exists (now, or right after it loads), unless Dynamo is loading
    our entry point on this thread right now (it registers what it loads). Call once."""
    if DYNAMO_REGISTRY in sys.modules:  # Dynamo is loaded already
        registry = sys.modules[DYNAMO_REGISTRY]
        if not _inside(registry.lookup_backend):
            register(registry)
    else:
        sys.meta_path.insert(0, _RunAfterLoad(register))


def run_after_load(module_name, register):
    """`register(module)` once the module `module_name` has run: now if it is loaded, else right
    after it loads (as patch 1, without its entry-point rule): for registrations with a module
    of Dynamo (its device interfaces) that must not load Dynamo at `import torch`."""
    if module_name in sys.modules:
        register(sys.modules[module_name])
    else:
        sys.meta_path.insert(0, _RunAfterLoad(register, module_name))


# ---- 2. torch.compile(model) without a backend on neuron tensors ---------------------------

def _makes_neuron_tensors(gm):
    """Whether a graph without neuron inputs makes neuron tensors (factory calls with device="neuron",
    as a graph resumed after a graph break may hold: `torch.arange(n, device=...) + k`)."""
    for node in getattr(getattr(gm, "graph", None), "nodes", ()):
        value = node.meta.get("example_value", node.meta.get("val"))
        values = value if isinstance(value, (list, tuple)) else (value,)
        if any(isinstance(v, torch.Tensor) and v.device.type == "neuron" for v in values):
            return True
        device = node.kwargs.get("device") if node.op == "call_function" else None
        if device is not None and torch.device(device).type == "neuron":
            return True
    return False


def select_neuron_for_neuron_tensors(backend):
    """Patch 2 of Note [Patches of torch internals]: torch.compile's default (Inductor) call
    compiles a graph whose inputs are on the neuron device, or which makes neuron tensors, with
    `backend(gm, inputs, mode=...)`.
    Idempotent."""
    inductor_call = torch._TorchCompileInductorWrapper.__call__
    if getattr(inductor_call, "_neuron_auto_select", False):
        return

    def call(self, model_, inputs_, *, config_patches=None):
        if any(isinstance(t, torch.Tensor) and t.device.type == "neuron" for t in inputs_) or _makes_neuron_tensors(model_):
            if not getattr(call, "_warned", False):
                call._warned = True
                warnings.warn("torch.compile: the graph's tensors are on the neuron device, so TorchNeuron's backend "
                              "'neuron' compiles it (Inductor does not target neuron); pass backend='neuron' to "
                              "choose it explicitly", stacklevel=2)
            mode = "max-autotune" if self.config else None  # Inductor options or a mode: they have no effect here
            return backend(model_, inputs_, mode=mode)
        return inductor_call(self, model_, inputs_, config_patches=config_patches)

    call._neuron_auto_select = True
    call._wrapped_inductor_call = inductor_call
    torch._TorchCompileInductorWrapper.__call__ = call


# ---- 3. AOTAutograd's cache key ----------------------------------------------------------------

def aot_autograd_cache_key(key_function):
    """Patch 3 of Note [Patches of torch internals]: a context manager under which AOTAutograd's
    cache computes its keys with `key_function(mod, example_inputs, aot_config,
    compiler_config_extra=None) -> (key, debug lines)`."""
    import unittest.mock
    from torch._functorch._aot_autograd import autograd_cache
    return unittest.mock.patch.object(autograd_cache, "autograd_cache_key", key_function)


# ---- 4. FlexAttention's device list -------------------------------------------------------------

def accept_neuron_in_flex_attention(device_type="neuron"):
    """Patch 4 of Note [Patches of torch internals]: flex_attention accepts tensors on
    `device_type`. Idempotent. Imports torch.nn.attention.flex_attention (a few ms, no Dynamo)."""
    from torch.nn.attention import flex_attention as module
    validate = module._validate_device
    if getattr(validate, "_neuron_accepts", False):
        return

    def _validate_device(query, key, value):
        if query.device.type == device_type:
            return  # q, k and v are on one device (checked before); forward and backward run here
        return validate(query, key, value)

    _validate_device._neuron_accepts = True
    _validate_device._wrapped = validate
    module._validate_device = _validate_device


# ---- 5. regional_inductor's regions on neuron ---------------------------------------------------

REGIONAL_INDUCTOR = "torch.fx.passes.regional_inductor"


def _region_devices(gm, prefix):
    """{region name: the device types of its tensors} for the regions `prefix` names in `gm`:
    its inputs', its outputs' and those of the values made inside it (a region may make its
    tensors from sizes, or move CPU inputs to the device)."""
    from torch.utils._pytree import tree_leaves
    devices = {}
    for node in gm.graph.nodes:
        if node.op == "call_module" and str(node.target).startswith(prefix):
            nodes = [*node.all_input_nodes, node]
            submodule = getattr(gm, str(node.target), None)
            if isinstance(submodule, torch.fx.GraphModule):
                nodes += list(submodule.graph.nodes)
            devices[node.target] = {t.device.type for n in nodes for t in tree_leaves(getattr(n, "meta", {}).get("val"))
                                    if isinstance(t, torch.Tensor)}
    return devices


def leave_neuron_regions_to_aot_eager(module, device_type="neuron"):
    """Patch 5 of Note [Patches of torch internals]: regional_inductor leaves a region on
    `device_type` uncompiled (it runs eagerly, as aot_eager runs the rest). Idempotent."""
    compile_submod = module._compile_submod
    if getattr(compile_submod, "_neuron_leaves", False):
        return

    def _compile_submod(gm, prefix):
        devices = _region_devices(gm, prefix)
        on_device = sorted(name for name, types in devices.items() if device_type in types)
        if not on_device:
            return compile_submod(gm, prefix)
        if len(on_device) != len(devices):
            others = sorted(set(devices) - set(on_device))
            raise NotImplementedError(
                f"regional_inductor: regions {on_device} are on the {device_type} device and {others} are not; "
                f"Inductor does not generate code for {device_type}, so the graph's regions would run two ways. "
                f"Compile with backend='inductor' or 'neuron' (a graph on {device_type} compiles with 'neuron').")
        if not getattr(_compile_submod, "_warned", False):
            _compile_submod._warned = True
            warnings.warn(f"regional_inductor: Inductor does not generate code for the {device_type} device, so the "
                          f"region marked compile_with_inductor ({', '.join(on_device)}) runs as the rest of this "
                          f"aot_eager graph (op by op on {device_type}); compile with backend='inductor' (which "
                          f"selects 'neuron' for {device_type} tensors) to compile it", stacklevel=2)
        return gm

    _compile_submod._neuron_leaves = True
    _compile_submod._wrapped = compile_submod
    module._compile_submod = _compile_submod
