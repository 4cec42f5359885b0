"""torch.compile(backend="neuron"): Dynamo -> AOTAutograd -> our FX passes -> a program
(Note [Programs]) -> the C++ executor (Note [Executing programs]).

What TorchNeuron documents, and we follow: mode other than "default" warns once and runs as
default; dynamic=True (symbolic shapes) is rejected with its documented message, and shapes
that vary recompile per shape (automatic dynamic shapes are turned off once the backend is
used); options={"model_name": ...} names the graphs; a compile failure raises unless
TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0 or options={"fallback_execution": True}, which
run the graph eagerly with a warning naming why. Programs are cached in memory and on disk
(cache.py); every compiled graph leaves a record for get_dynamo_metrics()."""
import contextlib
import copy
import dataclasses
import functools
import json
import itertools
import logging
import os
import threading
import time
import warnings
from typing import Any

import torch
from torch._dynamo.backends.common import aot_autograd
from torch._dynamo.utils import counters
from torch._functorch._aot_autograd.autograd_cache import BypassAOTAutogradCache
from torch._functorch._aot_autograd.schemas import SerializableAOTDispatchCompiler
from torch._functorch.aot_autograd import make_boxed_func
from torch._inductor.output_code import OutputCode

from .. import _C, dynamo_metrics, op_set
from . import cache, debug, passes, segments, torch_patches
from .lowering import lower

log = logging.getLogger("torch_neuronx")

# Note [Caching past AOTAutograd]
# A warm start (a new process whose program cache is filled) skips AOTAutograd as well as our
# passes (without this, AOTAutograd is about a third of the small decode benchmark's warm first
# call): AOTAutograd keeps its own cache of what it made of a Dynamo graph (runtime wrappers,
# input mutations, output aliasing, the forward/backward split) when the compilers return an
# OutputCode that it can store. Ours, NeuronProgramCode, stores the program's key and output
# layout; the program stays in our checked program cache and is loaded in post_compile. If it
# is gone or damaged there, the entry is bypassed and the graph compiles again. Two departures
# from AOTAutograd's defaults, both only while our backend compiles:
# - the key is cache.dynamo_graph_key, not AOTAutograd's own key function (patch 3 of Note
#   [Patches of torch internals], torch_patches.py): that one imports all of Inductor's code
#   generators and hashes torch's sources (about 1.5 s per process, more than the warm start
#   saves). Ours covers what AOTAutograd's covers for such a graph (graph and subgraph code,
#   input metadata, which inputs share storage, constants, grad mode, autocast, deterministic
#   algorithms, AOTAutograd's config) plus our compiler's identity; AOTAutograd's
#   check_cacheable still rejects graphs that call Python functions.
# - the backward graph compiles together with the forward one
#   (force_non_lazy_backward_lowering), so that the entry is saved with both.
# The entries live in AOTAutograd's folder (TORCHINDUCTOR_CACHE_DIR, key prefix "aneuron").
# Not cached there: graphs compiled with fallback execution (they keep an eager fallback) and
# everything when TORCH_NEURONX_DISABLE_NEFF_CACHE=1. What remains of a warm start is Dynamo's
# own tracing and guards, which only Dynamo's precompile could skip.

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


def _output(results, entry):
    """One graph output from the program's results and its layout entry: ("value", position[, bits])
    or ("constant", value). bits: the conj / neg bits the output gets back as views
    (passes._outputs_through_bit_views)."""
    if entry[0] != "value":
        return entry[1]
    result = results[entry[1]]
    for bit in entry[2] if len(entry) > 2 else ():
        result = torch._conj(result) if bit == "conj" else torch._neg_view(result)
    return result


@dataclasses.dataclass
class NeuronProgramCode(OutputCode):
    """A compiled graph: runs its program on the inputs (boxed calling convention).

    It is an OutputCode so that AOTAutograd's own cache can keep it (Note [Caching past
    AOTAutograd]): what that cache stores is the program's key and output layout, never the
    program itself, which stays in our program cache with its checks."""
    key: str = ""
    name: str = ""
    graph_type: str = ""
    layout: list = dataclasses.field(default_factory=list)
    device: int = 0
    nodes: int = 0
    program: Any = dataclasses.field(default=None, repr=False, compare=False)
    fallback_gm: Any = dataclasses.field(default=None, repr=False, compare=False)
    within_graph: bool = False  # a later segment of a graph cut at its collectives (one launch per graph)
    has_collectives: bool = False  # Note [Collectives in programs]: its record says so, also from the cache
    # Note [Boxed calls through torch._dynamo.disable]: AOTAutograd calls a compiled graph with one
    # list of arguments, which the graph may clear to free them early, when the callable it holds
    # has _boxed_call; otherwise it warns ("... doesn't take boxed arguments") and passes them one
    # by one. The backward graph reaches AOTAutograd wrapped in torch._dynamo.disable, whose
    # functools.wraps copies the instance's __dict__ onto the wrapper but no class attribute: so
    # _boxed_call is set on the instance, as Inductor's output code does.

    def __post_init__(self):
        self._boxed_call = True

    def __call__(self, *given):
        # Boxed (one list, which is cleared) as AOTAutograd calls it; unboxed (the tensors one by
        # one) as a plain function.
        boxed = len(given) == 1 and isinstance(given[0], list)
        args = given[0] if boxed else list(given)
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        try:
            results = self.program.run(tensors, self.within_graph)
        except RuntimeError as error:
            if self.fallback_gm is None:
                raise NEFFExecutionError(f"compiled graph {self.name} failed: {error}") from error
            _warn_once(("execution", self.name), f"compiled graph {self.name} failed ({error}); running it eagerly "
                                                  f"(fallback execution is on)")
            eager = self.__dict__.get("_eager_gm")
            if eager is None:  # made at the first failure (two threads may both make it: the same graph)
                eager = self._eager_gm = passes.eager_runnable(self.fallback_gm)
            return eager(*args)
        if boxed:
            args.clear()
        return [_output(results, entry) for entry in self.layout]

    def __getstate__(self):
        state = dict(self.__dict__)
        state["program"] = None  # a loaded program belongs to this process
        state["fallback_gm"] = state["_eager_gm"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._boxed_call = True  # also for entries saved before it was an instance attribute

    def prepare_for_serialization(self):
        if self.fallback_gm is not None:
            raise BypassAOTAutogradCache("a graph compiled with fallback execution is not cached")
        try:
            json.dumps(self.layout)
        except TypeError as error:
            raise BypassAOTAutogradCache(f"graph {self.name} has an output that is not plain data") from error
        self.program = None

    def post_compile(self, example_inputs, constants, graph_kwargs):
        """Loads the program after AOTAutograd's cache gave this entry back (a warm start)."""
        if self.program is not None:
            return
        started = time.perf_counter_ns()
        found = cache.load(self.key, self.device)
        if found is None:  # AOTAutograd's cache then compiles the graph again
            raise BypassAOTAutogradCache(f"program {self.key} of graph {self.name} is not in the program cache "
                                         f"({cache.directory()})")
        self.program, payload_bytes = found
        context = _active.context
        if context is not None:
            self.name = _graph_name(context, self.graph_type)
        _record_compiled(self, context, payload_bytes, started, fx_passes_us=0, lower_us=0, cache_hit=True,
                         compile_us=(time.perf_counter_ns() - started) // 1000, has_collectives=self.has_collectives)

    def set_triton_bundle(self, triton_bundle):
        pass


def _aot_cache_key(mod, example_inputs, aot_config, compiler_config_extra=None):
    """AOTAutograd's cache key function while our backend compiles (Note [Caching past AOTAutograd])."""
    gm = mod.gm if isinstance(mod, torch._dynamo.utils.GmWrapper) else mod
    return cache.dynamo_graph_key(gm, example_inputs, aot_config), []


@dataclasses.dataclass
class CollectiveGraphCode(OutputCode):
    """A graph with collectives (tensor parallelism's all-reduces, DTensor's redistributions), cut
    at them (Note [Graphs with collectives], segments.py): its segments run as programs, its
    collectives through the dispatcher (TorchNeuron records such graphs has_collectives). Not kept
    in AOTAutograd's cache (its segments' programs are in the program cache)."""
    gm: Any = None
    name: str = ""

    def __post_init__(self):
        self._boxed_call = True  # on the instance: Note [Boxed calls through torch._dynamo.disable]

    def __call__(self, *given):
        boxed = len(given) == 1 and isinstance(given[0], list)
        return self.gm.forward(given[0] if boxed else list(given))

    def prepare_for_serialization(self):
        raise BypassAOTAutogradCache(f"graph {self.name} has collectives: it is cut at them and not cached")

    def post_compile(self, example_inputs, constants, graph_kwargs):
        pass

    def set_triton_bundle(self, triton_bundle):
        pass


def _collective_graph(gm, context, graph_type, every=False):
    from torch.fx.graph import _BoxedCodeGen
    started = time.perf_counter_ns()
    name = _graph_name(context, graph_type)

    def compile_segment(segment, example_inputs, index):
        try:
            code = _compile_program(copy.deepcopy(segment), example_inputs, context=context, graph_type=graph_type,
                                    name=f"{name}_segment_{index}", segment=True)
        except Exception as error:  # noqa: BLE001
            # Runs op by op, as the whole graph did before graphs were cut (the passes ran on a
            # copy: the segment is as traced).
            log.info("graph %s: segment %d cannot be compiled (%s: %s); it runs op by op", name, index,
                     type(error).__name__, error)
            return None
        # The device runs the graph as one program (TorchNeuron's NEFF holds its collectives):
        # one launch per call, the first segment's, in the device clock.
        code.within_graph = index > 0
        return code

    nodes, has_collectives = len(gm.graph.nodes), bool(segments.collectives(gm, every=True))
    cut = segments.split_at_collectives(gm, compile_segment, every, codegen=_BoxedCodeGen())
    code = CollectiveGraphCode(gm=cut, name=name)
    _record_graph(name, "", context, nodes, has_collectives=has_collectives, fx_passes_us=0, lower_us=0,
                  compile_us=(time.perf_counter_ns() - started) // 1000, cache_hit=False)
    log.info("graph %s has collectives or opaque ops: cut at them into programs", name)
    return code


class _Active(threading.local):
    context = None


_active = _Active()


@contextlib.contextmanager
def _compiling(context):
    previous, _active.context = _active.context, context
    try:
        yield
    finally:
        _active.context = previous


def _graph_name(context, graph_type):
    return f"{context['model_name']}_{context['aot_id']}_{graph_type}_{_nth_of(context, graph_type)}"


def _record_graph(name, key, context, nodes, *, has_collectives, fx_passes_us, lower_us, compile_us, cache_hit):
    """Counts a compiled graph and leaves its record for get_dynamo_metrics(); `context` is
    None when AOTAutograd's cache gave the graph back outside our backend."""
    counters["neuron"]["compiled_graphs"] += 1
    dynamo_metrics.record(dynamo_metrics.NeuronCompilationMetrics(
        graph_id=key, graph_name=name,
        model_name=context["model_name"] if context else get_model_name(), has_collectives=has_collectives,
        graph_node_count=int(nodes), timestamp=context["timestamp"] if context else f"{time.time():.6f}",
        torch_neuronx_fx_passes_us=int(fx_passes_us), torch_neuronx_lower_us=int(lower_us),
        torch_neuronx_compile_us=int(compile_us),
        recompile_reason=context.get("recompile_reason") if context else None, cache_hit=cache_hit))


def _record_compiled(code, context, payload_bytes, started, *, fx_passes_us, lower_us, compile_us, cache_hit,
                     graph=True, has_collectives=False):
    """graph=False for a segment of a graph with collectives: that graph has the one record."""
    _C.metrics_record("CompilationCache.CompilationTime", (time.perf_counter_ns() - started) / 1e9)
    _C.metrics_record("CompilationCache.NeffSize", float(payload_bytes))
    if graph:
        _record_graph(code.name, code.key, context, code.nodes, has_collectives=has_collectives,
                      fx_passes_us=fx_passes_us,
                      lower_us=lower_us, compile_us=compile_us, cache_hit=cache_hit)
    log.info("[NEFF_CACHE] Cache %s for key: %s (%s)", "HIT" if cache_hit else "MISS", code.key, code.name)


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
        # the graph as the passes left it (they rewrite in place), made runnable op by op
        return make_boxed_func(passes.eager_runnable(gm))


def _compile_graph_now(gm, example_inputs, *, context, graph_type):
    if segments.collectives(gm) or segments.opaque(gm):
        return _collective_graph(gm, context, graph_type)
    if segments.collectives(gm, every=True):
        # One program with its collectives (Note [Collectives in programs]); a graph that cannot be
        # one (a part the compiler cannot lower) is cut at them, and that part runs op by op.
        try:
            return _compile_program(copy.deepcopy(gm), example_inputs, context=context, graph_type=graph_type,
                                    name=_graph_name(context, graph_type))
        except Exception as error:  # noqa: BLE001
            log.info("a graph with collectives cannot be one program (%s: %s); it is cut at them",
                     type(error).__name__, error)
            return _collective_graph(gm, context, graph_type, every=True)
    return _compile_program(gm, example_inputs, context=context, graph_type=graph_type,
                            name=_graph_name(context, graph_type))


def _compile_program(gm, example_inputs, *, context, graph_type, name, segment=False):
    started = time.perf_counter_ns()
    device = context["device"]
    # Note [Collectives in programs]: such a program is not re-run eagerly when it fails (its
    # collectives would run again on this rank only).
    has_collectives = bool(segments.collectives(gm, every=True))
    key = cache.key_for(gm, example_inputs, graph_type)
    found = cache.load(key, device)
    fx_passes_us = lower_us = 0
    if found is not None:  # one call: read, decoded once, built
        program, payload_bytes = found
        layout = json.loads(program.metadata["layout"])
        compile_us = (time.perf_counter_ns() - started) // 1000
    else:
        stats = passes.run_passes(gm, on_device_ops=context["on_device_ops"])
        passed = time.perf_counter_ns()
        fx_passes_us = (passed - started) // 1000
        desc, layout = lower(gm, name, metadata={"model_name": context["model_name"], "graph_type": graph_type,
                                                 "nodes": stats["nodes"]})
        for index, bits in gm.meta.get("output_bits", {}).items():
            layout[index] = (*layout[index], bits)
        try:
            desc["metadata"]["layout"] = json.dumps(layout)
        except TypeError:  # an output that is not plain data: this program is not cached
            desc["metadata"]["layout"] = ""
        lowered = time.perf_counter_ns()
        lower_us = (lowered - passed) // 1000
        # one call: checked, built, encoded and stored
        program, payload_bytes = cache.load_new(key, desc, device, keep=bool(desc["metadata"]["layout"]))
        compile_us = (time.perf_counter_ns() - lowered) // 1000
        _C.metrics_increment("CompilationCache.TotalCompilations", 1)
    code = NeuronProgramCode(key=key, name=name, graph_type=graph_type, layout=layout, device=device,
                             nodes=int(program.metadata.get("nodes", 0)), program=program,
                             fallback_gm=gm if context["fallback"] and not has_collectives else None,
                             has_collectives=has_collectives)
    _record_compiled(code, context, payload_bytes, started, fx_passes_us=fx_passes_us, lower_us=lower_us,
                     compile_us=compile_us, cache_hit=found is not None, graph=not segment,
                     has_collectives=has_collectives)
    debug.preserve(name, gm, program)
    return code


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
    passes.keep_asserts(gm)
    # One program per shape, as TorchNeuron: varying shapes recompile instead of turning symbolic.
    torch._dynamo.config.automatic_dynamic_shapes = False
    fallback = _fallback_enabled(options)
    device = _device_of(example_inputs)
    context = {
        "model_name": str(options.get("model_name") or get_model_name()),
        "aot_id": next(_graph_ids),
        "device": 0 if device is None else device,
        "fallback": fallback,
        "timestamp": f"{time.time():.6f}",
        "on_device_ops": op_set.on_device(),
        "recompile_reason": _note_recompile(_recompile_reason()),
    }
    if device is None:
        return _eager_with_warning(gm, "no input of the graph is on the neuron device; it runs as traced")
    compilers = {graph_type: functools.partial(_compile_graph, context=context, graph_type=graph_type)
                 for graph_type in ("forward", "backward", "inference")}
    # Note [Caching past AOTAutograd]: unless programs are not cached or a failure may run a graph
    # eagerly, the compilers return a NeuronProgramCode that AOTAutograd's bundled cache keeps.
    cached = not fallback and not cache.disabled()
    if cached:
        compilers = {graph_type: SerializableAOTDispatchCompiler(NeuronProgramCode, compiler)
                     for graph_type, compiler in compilers.items()}
    try:
        compiler = aot_autograd(
            fw_compiler=compilers["forward"],
            bw_compiler=compilers["backward"],
            inference_compiler=compilers["inference"],
            decompositions=_decompositions(),
            keep_inference_input_mutations=True,
        )
        with contextlib.ExitStack() as stack:
            stack.enter_context(_compiling(context))
            if cached:
                # The backward graph compiles with the forward one, under this context, so that
                # AOTAutograd's cache keeps both (a lazily compiled backward is never saved).
                stack.enter_context(torch._functorch.config.patch(bundled_autograd_cache=True,
                                                                  force_non_lazy_backward_lowering=True))
                stack.enter_context(torch_patches.aot_autograd_cache_key(_aot_cache_key))
            else:
                stack.enter_context(torch._functorch.config.patch(enable_autograd_cache=False))
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
