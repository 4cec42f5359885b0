"""torch.compile(backend="neuron"): Dynamo -> AOTAutograd -> our FX passes -> a program
(Note [Programs]) -> the C++ executor (Note [Executing programs]).

What TorchNeuron documents, and we follow: mode other than "default" warns once and runs as
default; dynamic=True (symbolic shapes) is rejected with its documented message, and shapes
that vary recompile per shape (automatic dynamic shapes are turned off once the backend is
used); options={"model_name": ...} names the graphs; a compile failure raises unless
TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0 or options={"fallback_execution": True}, which
run the graph eagerly with a warning naming why. Programs are cached in memory and on disk
(cache.py); every compiled graph leaves a record for get_dynamo_metrics()."""
import functools
import json
import itertools
import logging
import os
import time
import warnings

import torch
from torch._dynamo.backends.common import aot_autograd
from torch._dynamo.utils import counters
from torch._functorch.aot_autograd import make_boxed_func

from .. import _C
from .. import dynamo_metrics
from . import cache, debug, passes
from .lowering import lower

log = logging.getLogger("torch_neuronx")

_DEFAULT_MODEL_NAME = "model_default"
_model_name = _DEFAULT_MODEL_NAME
_graph_ids = itertools.count()
_nth = {}
_warned = set()
_KNOWN_OPTIONS = {"model_name", "fallback_execution", "dynamic"}
RECOMPILE_WARNING_THRESHOLD = 4


class NEFFCompilationError(RuntimeError):
    """A graph could not be compiled for the neuron device."""


class NEFFExecutionError(RuntimeError):
    """A compiled graph failed while it ran."""


def set_model_name(name):
    global _model_name
    _model_name = str(name)


def get_model_name():
    return _model_name


def _warn_once(key, message):
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, stacklevel=3)


def _truthy(text):
    return str(text).strip().lower() in ("1", "true", "yes", "on")


def _fallback_enabled(options):
    if "fallback_execution" in options:
        return bool(options["fallback_execution"])
    setting = os.environ.get("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION")
    return setting is not None and not _truthy(setting)


def _dynamic_dimensions(gm, example_inputs):
    found = []
    for index, value in enumerate(example_inputs):
        if isinstance(value, torch.SymInt):
            found.append(f"input {index} is a symbolic integer ({value})")
        elif isinstance(value, torch.Tensor):
            for dim, size in enumerate(value.shape):
                if isinstance(size, torch.SymInt) and not size.node.is_nested_int() and size.node.expr.free_symbols:
                    found.append(f"input {index} dimension {dim} ({size})")
    return found


def _check_static(gm, example_inputs):
    found = _dynamic_dimensions(gm, example_inputs)
    if found:
        raise RuntimeError(
            f"Dynamic shapes detected in the model, but torch-neuronx requires static shapes. Found "
            f"{len(found)} dynamic dimension(s): {'; '.join(found)}. To fix this issue: 1. Ensure all input "
            f"tensors have fixed, known shapes 2. Avoid operations that create dynamic shapes "
            f"3. Compile with dynamic=False (shapes that vary then recompile, one program per shape)")


def _device_of(example_inputs):
    for value in example_inputs:
        if isinstance(value, torch.Tensor) and value.device.type == "neuron":
            return value.device.index or 0
    return None


def _recompile_reason():
    try:
        context = torch._dynamo.utils.get_metrics_context()
        return getattr(context, "_metrics", {}).get("recompile_reason")
    except Exception:  # noqa: BLE001
        return None


def _note_recompile(reason):
    """Keeps why a function recompiled; warns once it has recompiled more than a few times."""
    compile_id = torch._guards.CompileContext.current_compile_id()
    if not reason or compile_id is None:
        return reason
    count = compile_id.frame_compile_id or 0
    if count == RECOMPILE_WARNING_THRESHOLD:  # once per function: when it crosses the threshold
        warnings.warn(f"torch.compile(backend='neuron') recompiled one function {count} times; the latest reason: "
                      f"{reason}. One program is compiled per input shape: pad the varying dimension to a few "
                      f"fixed sizes (buckets) to bound the number of programs.", stacklevel=3)
    return reason


class _Compiled:
    """A compiled graph: runs its program on the inputs (boxed calling convention)."""
    _boxed_call = True

    def __init__(self, program, layout, name, fallback_gm):
        self.program = program
        self.layout = layout
        self.name = name
        self.fallback_gm = fallback_gm

    def __call__(self, *given):
        # Boxed (one list, which is cleared) as AOTAutograd calls it, or unboxed: the lazily
        # compiled backward is called through a torch._dynamo.disable wrapper that hides
        # _boxed_call and passes the arguments one by one.
        boxed = len(given) == 1 and isinstance(given[0], list)
        args = given[0] if boxed else list(given)
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        try:
            results = self.program.run(tensors)
        except RuntimeError as error:
            if self.fallback_gm is None:
                raise NEFFExecutionError(f"compiled graph {self.name} failed: {error}") from error
            _warn_once(("execution", self.name), f"compiled graph {self.name} failed ({error}); running it eagerly "
                                                  f"(fallback execution is on)")
            return self.fallback_gm(*args)
        if boxed:
            args.clear()
        return [results[position] if kind == "value" else position for kind, position in self.layout]


def _compile_graph(gm, example_inputs, *, context, graph_type):
    if graph_type != "backward":
        return _compile_graph_now(gm, example_inputs, context=context, graph_type=graph_type)
    # The backward graph compiles lazily, at the first .backward(), outside neuron_backend's
    # handler: its failures get the same treatment here.
    try:
        return _compile_graph_now(gm, example_inputs, context=context, graph_type=graph_type)
    except Exception as error:  # noqa: BLE001
        if not context["fallback"]:
            raise NEFFCompilationError(
                f"torch.compile(backend='neuron') could not compile the backward graph: {type(error).__name__}: "
                f"{error}. Set TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0 (or options={{'fallback_execution': "
                f"True}}) to run such graphs eagerly") from error
        _warn_once(("eager", "backward", context["aot_id"]),
                   f"torch.compile(backend='neuron'): the backward graph could not be compiled "
                   f"({type(error).__name__}: {error}); running it eagerly")
        return make_boxed_func(gm)


def _compile_graph_now(gm, example_inputs, *, context, graph_type):
    name = f"{context['model_name']}_{context['aot_id']}_{graph_type}_{_nth_of(context, graph_type)}"
    started = time.perf_counter_ns()
    device = context["device"]
    key = cache.key_for(gm, example_inputs, graph_type)
    found = cache.lookup(key)
    fx_passes_us = lower_us = 0
    if found is not None:
        payload, layout, stats = found
    else:
        stats = passes.run_passes(gm, on_device_ops=context["on_device_ops"])
        passed = time.perf_counter_ns()
        fx_passes_us = (passed - started) // 1000
        program, layout = lower(gm, name, metadata={"model_name": context["model_name"], "graph_type": graph_type,
                                                    "nodes": stats["nodes"]})
        try:
            program["metadata"]["layout"] = json.dumps(layout)
        except TypeError:  # an output that is not plain data: this program is not cached
            program["metadata"]["layout"] = ""
        payload = _C.encode_program(program)
        lower_us = (time.perf_counter_ns() - passed) // 1000
        if program["metadata"]["layout"]:
            cache.store(key, payload, layout, stats)
        _C.metrics_increment("CompilationCache.TotalCompilations", 1)
    loaded = time.perf_counter_ns()
    program = _C.Program(payload, device)
    compile_us = (time.perf_counter_ns() - loaded) // 1000
    _C.metrics_record("CompilationCache.CompilationTime", (time.perf_counter_ns() - started) / 1e9)
    _C.metrics_record("CompilationCache.NeffSize", float(len(payload)))
    counters["neuron"]["compiled_graphs"] += 1
    dynamo_metrics.record(dynamo_metrics.NeuronCompilationMetrics(
        graph_id=key, graph_name=name, model_name=context["model_name"], has_collectives=False,
        graph_node_count=int(stats.get("nodes", 0)), timestamp=context["timestamp"],
        torch_neuronx_fx_passes_us=int(fx_passes_us), torch_neuronx_lower_us=int(lower_us),
        torch_neuronx_compile_us=int(compile_us), recompile_reason=context.get("recompile_reason"),
        cache_hit=found is not None))
    debug.preserve(name, gm, payload)
    log.info("[NEFF_CACHE] Cache %s for key: %s (%s)", "HIT" if found is not None else "MISS", key, name)
    return _Compiled(program, layout, name, gm if context["fallback"] else None)


def _nth_of(context, graph_type):
    key = (context["model_name"], context["aot_id"], graph_type)
    _nth[key] = _nth.get(key, -1) + 1
    return _nth[key]


def _decompositions():
    from .decompositions import decomposition_table
    return decomposition_table()


def neuron_backend(gm, example_inputs, *, options=None, mode=None):
    """The Dynamo backend "neuron"."""
    options = dict(options or {})
    if mode not in (None, "default"):
        _warn_once(("mode", mode), f"torch.compile(backend='neuron'): mode={mode!r} has no effect on neuron; "
                                   f"only 'default' applies (compiling as default)")
    unknown = set(options) - _KNOWN_OPTIONS
    if unknown:
        _warn_once(("options", tuple(sorted(unknown))),
                   f"torch.compile(backend='neuron'): options {sorted(unknown)} are not read by the neuron backend "
                   f"(it reads {sorted(_KNOWN_OPTIONS)})")
    _check_static(gm, example_inputs)
    # One program per shape, as TorchNeuron: varying shapes recompile instead of turning symbolic.
    torch._dynamo.config.automatic_dynamic_shapes = False
    fallback = _fallback_enabled(options)
    device = _device_of(example_inputs)
    from .. import _OP_SET_FILE, _read_op_set
    on_device_ops = set(_read_op_set(_OP_SET_FILE)[0]) - set(_read_op_set(_OP_SET_FILE)[1])
    context = {
        "model_name": str(options.get("model_name") or get_model_name()),
        "aot_id": next(_graph_ids),
        "device": 0 if device is None else device,
        "fallback": fallback,
        "timestamp": f"{time.time():.6f}",
        "on_device_ops": on_device_ops,
        "recompile_reason": _note_recompile(_recompile_reason()),
    }
    if device is None:
        return _eager_with_warning(gm, "no input of the graph is on the neuron device; it runs as traced")
    try:
        compiler = aot_autograd(
            fw_compiler=functools.partial(_compile_graph, context=context, graph_type="forward"),
            bw_compiler=functools.partial(_compile_graph, context=context, graph_type="backward"),
            inference_compiler=functools.partial(_compile_graph, context=context, graph_type="inference"),
            decompositions=_decompositions(),
            keep_inference_input_mutations=True,
        )
        return compiler(gm, example_inputs)
    except Exception as error:  # noqa: BLE001
        if isinstance(error, RuntimeError) and str(error).startswith("Dynamic shapes detected"):
            raise
        if os.environ.get("NEURON_SIM_COMPILE_TRACEBACK") == "1":
            import traceback
            traceback.print_exc()
        if not fallback:
            raise NEFFCompilationError(
                f"torch.compile(backend='neuron') could not compile the graph: {type(error).__name__}: {error}. "
                f"Set TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0 (or options={{'fallback_execution': True}}) to "
                f"run such graphs eagerly") from error
        return _eager_with_warning(gm, f"compilation failed ({type(error).__name__}: {error})", context["aot_id"])


def _eager_with_warning(gm, why, graph=None):
    _warn_once(("eager", why, graph), f"torch.compile(backend='neuron'): {why}; running the graph eagerly")
    return gm.forward
