"""How many compiles? torch.compile with the workload's backend over the workload's shape
distribution, static shapes (dynamic=False, as TorchNeuron requires): graphs compiled, each
recompile with Dynamo's reason, warm-up time cold and after a reset (disk cache warm), the
compile cache's disk use, and padding-bucket plans that would cut the count.

Public surfaces where torch has them: torch.compile, torch.compiler.reset(),
torch._logging.set_logs(recompiles=True) (the documented switch), torch_neuronx.get_dynamo_metrics().
Dynamo internals with no public equivalent, read only: the backend registry's lookup_backend (to
wrap the named backend and count its graphs), torch._dynamo.utils.counters (graph breaks) and
torch._dynamo.config.recompile_limit."""
import logging
import os
import time
import traceback

import torch
import torch._dynamo

from . import buckets, devices, stopping
from .loading import causal_lm_loss, forward_logits

RECOMPILE_LOGGER = "torch._dynamo.guards.__recompiles"


def cache_dir():
    """Where the backend keeps compiled programs: TORCH_NEURONX_NEFF_CACHE_DIR, else the installed
    torch_neuronx's own default when it names one (the simulator's is per user), else TorchNeuron
    2.13's /tmp/neff_cache."""
    setting = os.environ.get("TORCH_NEURONX_NEFF_CACHE_DIR")
    if setting is not None:
        return setting
    try:
        return str(devices.neuronx().neff_cache_dir())
    except (devices.DeviceUnavailable, AttributeError):
        return "/tmp/neff_cache"


def disk_usage(path):
    """(bytes, files) under `path`, or (None, None) when it does not exist."""
    if not os.path.isdir(path):
        return None, None
    total = files = 0
    for root, _, names in os.walk(path):
        for name in names:
            try:
                total += os.path.getsize(os.path.join(root, name))
                files += 1
            except OSError:
                pass
    return total, files


class _RecompileLog(logging.Handler):
    """Collects Dynamo's recompile messages, tagged with the pass and request running."""

    def __init__(self, current):
        super().__init__()
        self.current, self.messages = current, []

    def emit(self, record):
        self.messages.append({"pass": self.current["pass"], "request": self.current["label"],
                              "reason": record.getMessage()})


def backend_available(name):
    from torch._dynamo.backends.registry import lookup_backend
    try:
        return lookup_backend(name), None
    except Exception as error:
        return None, f"{type(error).__name__}: {error}"


def _with_mode(inner, backend_name, mode):
    """The backend called as torch.compile(mode=...) would call it: Inductor with the mode's
    options, TorchNeuron's backend with mode=; None when the backend takes no mode."""
    if not mode:
        return inner, None
    if backend_name == "inductor":
        import torch._inductor
        options = torch._inductor.list_mode_options(mode)
        return (lambda gm, example_inputs, **kwargs: inner(gm, example_inputs, config_patches=options)), None
    import inspect
    try:
        takes_mode = "mode" in inspect.signature(inner).parameters
    except (TypeError, ValueError):
        takes_mode = False
    if not takes_mode:
        return None, f"backend {backend_name!r} takes no mode (compile.mode = {mode!r})"
    return (lambda gm, example_inputs, **kwargs: inner(gm, example_inputs, mode=mode)), None


def measure(loaded, device, requests, backend_name, training=False, mode=None):
    """The compile section (a finding instead of numbers when the backend is missing). With
    `training`, each call is a training step's forward and backward (forward and backward
    graphs), else an inference forward. `mode` is torch.compile's mode for the backend."""
    inner, problem = backend_available(backend_name)
    if inner is not None:
        inner, problem = _with_mode(inner, backend_name, mode)
    shapes = [tuple(r.input_ids.shape) for r in requests]
    plan = buckets.plans(shapes)
    if inner is None:
        return {"backend": backend_name, "mode": mode, "available": False, "problem": problem,
                "finding": f"torch.compile backend {backend_name!r} is not available here; "
                           "graph counts and compile times were not measured (set [compile] backend per device, "
                           "e.g. backend = { cuda = \"inductor\", neuron = \"neuron\" })",
                "buckets": plan}
    from torch._dynamo.utils import counters
    graphs = []
    run_start = time.perf_counter()
    current = {"label": None, "pass": None}

    def counting_backend(gm, example_inputs, **kwargs):
        start = time.perf_counter()
        compiled = inner(gm, example_inputs, **kwargs)
        graphs.append({"index": len(graphs), "request": current["label"], "pass": current["pass"],
                       "nodes": len(gm.graph.nodes), "backend_seconds": time.perf_counter() - start,
                       "at_s": time.perf_counter() - run_start,
                       "inputs": [list(t.shape) for t in example_inputs if isinstance(t, torch.Tensor)][:4]})
        return compiled

    handler = _RecompileLog(current)
    logger = logging.getLogger(RECOMPILE_LOGGER)
    torch._logging.set_logs(recompiles=True)
    logger.addHandler(handler)
    logger.propagate = False
    torch.compiler.reset()
    counters.clear()
    cache_before = disk_usage(cache_dir())
    metrics_before = len(devices.dynamo_metrics(device))  # records of earlier compiles in this process
    passes, errors = {}, []
    original_forward = loaded.model.forward
    try:
        loaded.model.forward = torch.compile(original_forward, backend=counting_backend, dynamic=False)
        for name in ("cold", "warm", "steady"):
            if name == "warm":
                torch.compiler.reset()  # in-memory caches dropped; a disk cache stays
            current["pass"] = name
            per_request = {}
            for request in {r.shape: r for r in requests}.values():  # a graph per shape
                stopping.check()
                current["label"] = request.label
                start = time.perf_counter()
                try:
                    if training:
                        causal_lm_loss(loaded, request.input_ids.to(device)).backward()
                        loaded.model.zero_grad(set_to_none=True)
                    else:
                        with torch.no_grad():
                            forward_logits(loaded, request.input_ids.to(device)).cpu()
                except Exception as error:
                    errors.append({"request": request.label, "pass": name, "error": f"{type(error).__name__}: {error}",
                                   "traceback": traceback.format_exc()})
                per_request[request.label] = time.perf_counter() - start
            passes[name] = {"seconds": sum(per_request.values()), "per_request_s": per_request}
    finally:
        loaded.model.forward = original_forward
        logger.removeHandler(handler)
        logger.propagate = True
        torch._logging.set_logs()
    cold = [g for g in graphs if g["pass"] == "cold"]
    reasons = handler.messages
    result = {
        "backend": backend_name, "mode": mode, "available": True, "dynamic": False,
        "compiled": "training step (forward and backward)" if training else "inference forward",
        "graphs_compiled": len(cold), "recompiles": sum(1 for m in reasons if m["pass"] == "cold"),
        "graphs_all_passes": len(graphs), "graph_breaks": sum(counters["graph_break"].values()),
        "unique_graphs_counter": counters["stats"].get("unique_graphs"),
        "recompile_reasons": reasons, "graphs": graphs, "passes": passes, "errors": errors,
        "requests_failed": sorted({e["request"] for e in errors if e["pass"] == "cold"}),
        "warmup_cold_s": passes.get("cold", {}).get("seconds"),
        "warmup_warm_s": passes.get("warm", {}).get("seconds"),
        "steady_s": passes.get("steady", {}).get("seconds"),
        "recompile_limit": getattr(torch._dynamo.config, "recompile_limit", None),
        "cache_dir": cache_dir(), "cache_bytes_before": cache_before[0], "cache_files_before": cache_before[1],
        "neuron_dynamo_metrics": devices.dynamo_metrics(device)[metrics_before:], "buckets": plan,
        "timing": devices.timing_note(device),
    }
    after = disk_usage(cache_dir())
    result["cache_bytes_after"], result["cache_files_after"] = after
    if any("recompile_limit" in m["reason"] or "cache_size_limit" in m["reason"] for m in reasons):
        result["finding"] = "Dynamo's recompile limit was reached: later shapes ran without compiling"
    return result
