"""Causal-LM architecture sweep: every causal LM of the pinned transformers, CPU versus neuron.

For each entry of `MODEL_FOR_CAUSAL_LM_MAPPING_NAMES` a tiny model is built offline on CPU
(`conformance.tiny_configs.build_config`, `torch.manual_seed(0)`, float32, eval mode), copied to
the neuron device, and checked:

* forward: logits on neuron equal CPU's within rtol = atol = 1e-4;
* generate: 16 greedy new tokens with the default (dynamic) cache identical to CPU's;
* static generate: the same with `cache_implementation="static"`, where the model declares it
  can (`_can_compile_fullgraph` and Cache support); `disable_compile=True` for these three;
* static generate, compiled: where the static generate applies, the same generate on the neuron
  copy without `disable_compile`, so transformers compiles the forward with
  `CompileConfig(backend="neuron")`, compared with the CPU static reference (eager). Dynamo is
  reset before each architecture, the program cache is a fresh temporary
  `TORCH_NEURONX_NEFF_CACHE_DIR` for the sweep, fallback execution is off, and the cell is `ok`
  only if `counters["neuron"]["compiled_graphs"]` grew ("not compiled" otherwise, with why) and
  Dynamo did not hit its recompile_limit ("recompile limit": identical tokens, but the forward
  recompiled step after step and the later steps ran eagerly).

A failure on the CPU side is a config or harness problem; CPU running but neuron differing or
raising is a backend bug and is recorded, never worked around.

    python -m conformance.arch_sweep [--only SUBSTR ...] [--output COMPAT.md] [--cpu-only]
                                     [--no-compiled] [--timeout S] [--json FILE]

The architectures run in a worker process; if it dies (a crash in native code) or an
architecture exceeds `--timeout`, the architecture is recorded as such and a new worker goes on
with the rest; the eager results of an architecture are reported before its compiled check, so
a hang or crash while compiling costs only the compiled cell. Progress goes to stderr.
"""
import argparse
import copy
import gc
import json
import logging
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

PROMPT_LEN = 8
NEW_TOKENS = 16
COMPILED_TOKENS = 32  # the compiled generate: past the sliding window (16) by prompt + 24 tokens
FORWARD_SHAPE = (2, 12)
RTOL = ATOL = 1e-4

OK, DIFF, ERROR, CPU_FAIL, NA = "ok", "DIFF", "ERROR", "cpu-fail", "n/a"
NOT_COMPILED = "not compiled"
RECOMPILE_LIMIT = "recompile limit"
COMPILED_COLUMN = "static cache, compiled"
GRAPHS_COLUMN = f"graphs for {COMPILED_TOKENS} tokens"
MAX_GRAPHS = 2  # a prefill and a decode program (tests/compile/test_compile_sliding_window.py keeps it)


def all_model_types():
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    return list(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def _short(exc, limit=300):
    text = f"{type(exc).__name__}: {exc}".strip().replace("\n", " ").replace("|", "/")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _where(exc):
    """file:line of the innermost frame of `exc` (where it was raised)."""
    tb = traceback.extract_tb(exc.__traceback__)
    if not tb:
        return ""
    frame = tb[-1]
    path = frame.filename
    for marker in ("site-packages/", "/work/main/"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f" [at {path}:{frame.lineno}]"


def _where_ours(exc):
    """Like _where, but the innermost frame in this project's code (torch_neuron_sim, csrc
    errors surface there) along the exception's causes, if any; else the innermost frame."""
    seen, found, chain = set(), None, exc
    while chain is not None and id(chain) not in seen:
        seen.add(id(chain))
        for frame in traceback.extract_tb(chain.__traceback__):
            if "torch_neuron_sim/" in frame.filename and "/conformance/" not in frame.filename:
                found = frame
        chain = chain.__cause__ or chain.__context__
    if found is None:
        return _where(exc)
    path = found.filename
    path = "python/torch_neuron_sim/" + path.split("torch_neuron_sim/", 1)[1]
    return f" [at {path}:{found.lineno}]"


def build_model(model_type):
    """The tiny float32 model for `model_type` on CPU, in eval mode."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    from conformance.tiny_configs import MODEL_SETUP, build_config
    config = build_config(model_type)
    torch.manual_seed(0)
    if config.model_type == model_type:
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    else:  # a per-architecture fix chose the config class the causal-LM class really takes
        cls = getattr(transformers, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type])
        model = cls._from_config(config, dtype=torch.float32)
    if model_type in MODEL_SETUP:
        MODEL_SETUP[model_type](model)
    return model.eval()


def _text_vocab(model):
    emb = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if emb is not None and getattr(emb, "weight", None) is not None:
        return emb.weight.shape[0]
    config = model.config.get_text_config(decoder=True)
    return config.vocab_size


def make_inputs(model, model_type, batch, length, seed):
    """Random prompt ids (batch, length) avoiding the low special ids and multimodal token ids."""
    import torch
    from conformance.tiny_configs import INPUT_SHAPES, special_token_ids
    shape = (batch, length)
    if model_type in INPUT_SHAPES:
        shape = INPUT_SHAPES[model_type](model.config, batch, length)
    vocab = _text_vocab(model)
    banned = set(special_token_ids(model.config)) | {0, 1, 2}
    allowed = torch.tensor([t for t in range(min(vocab, 4096)) if t not in banned])
    gen = torch.Generator().manual_seed(seed)
    return allowed[torch.randint(0, len(allowed), shape, generator=gen)]


def generation_config(model, cache_implementation=None, model_type=None, compile=False, new_tokens=NEW_TOKENS):
    """Greedy decoding of exactly `new_tokens` tokens, no model-specific extras; no compilation
    unless `compile` (then transformers' automatic compilation decides, with its default
    CompileConfig: backend "neuron" on the neuron device)."""
    from transformers import GenerationConfig
    from conformance.tiny_configs import GENERATION_EXTRAS, special_token_ids
    text = model.config.get_text_config(decoder=True)
    pad = getattr(text, "pad_token_id", None)
    pad = pad if isinstance(pad, int) else 0
    suppress = special_token_ids(model.config)
    return GenerationConfig(
        max_new_tokens=new_tokens, do_sample=False, num_beams=1, num_return_sequences=1, pad_token_id=pad,
        eos_token_id=None, bos_token_id=getattr(text, "bos_token_id", None),
        suppress_tokens=suppress or None, cache_implementation=cache_implementation,
        disable_compile=not compile, **{"use_cache": True, **GENERATION_EXTRAS.get(model_type, {})})


def supports_static_cache(model):
    can = getattr(model, "_can_compile_fullgraph", False) or getattr(model, "_supports_static_cache", False)
    dyn = getattr(model, "_supports_default_dynamic_cache", None)
    return bool(can) and (dyn is None or bool(dyn()))


def _forward(model, ids):
    import torch
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids))
    logits = out.logits if hasattr(out, "logits") else out[0]
    return logits.detach().to("cpu", torch.float32)


def _generate(model, ids, cache_implementation, model_type=None, compile=False, new_tokens=NEW_TOKENS):
    import torch
    model.generation_config = generation_config(model, cache_implementation, model_type, compile, new_tokens)
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids))
    out = out.sequences if hasattr(out, "sequences") else out
    return out.detach().cpu()


def _compiled_graphs():
    from torch._dynamo.utils import counters
    return int(counters["neuron"]["compiled_graphs"])


def _differs(got, ref, label):
    same = got.shape == ref.shape
    first = ((got != ref).nonzero()[0, -1].item() - PROMPT_LEN) if same else "?"
    return (f"{label} differs from new token {first}: cpu {ref[0, PROMPT_LEN:].tolist()} "
            f"neuron {got[0, PROMPT_LEN:].tolist()}")


def _limit_summary(limit_hits):
    """'Dynamo hit config.recompile_limit (8) in f, g; last reason of f: ...' from Dynamo's warnings."""
    limit, functions, last = "recompile_limit", [], None
    for message in limit_hits:
        lines = message.splitlines()
        limit = lines[0].split("hit config.", 1)[1].strip()
        for line in lines[1:]:
            line = line.strip()
            if line.startswith("function: "):
                functions.append(line.split("'")[1] if "'" in line else line[10:])
            elif line.startswith("last reason: ") and last is None:
                last = re.sub(r"^\d+/\d+: ", "", line[len("last reason: "):]).split("  # ")[0].strip()
    text = f"Dynamo hit config.{limit} in {', '.join(functions) or '?'}"
    return text + (f" (last reason in {functions[0] if functions else '?'}: {last})" if last else "")


def _graph_breaks_since(before):
    """'; N graph breaks (kinds)' for the graph breaks Dynamo counted since `before`."""
    from torch._dynamo.utils import counters
    kinds = {}
    for key, count in counters["graph_break"].items():
        new = count - before.get(key, 0)
        if new > 0:
            kind = key.splitlines()[0].strip()
            kinds[kind] = kinds.get(kind, 0) + new
    if not kinds:
        return ""
    return f"; {sum(kinds.values())} graph breaks ({', '.join(sorted(kinds))})"


def check_compiled(res, device_model, gen_ids, ref, model_type):
    """The static-cache generate on neuron through transformers' automatic compilation (backend
    "neuron"), against the CPU static reference; sets res["compiled"] and res["compiled_graphs"]."""
    import torch
    import torch._dynamo
    torch._dynamo.reset()
    before = _compiled_graphs()
    decisions = []  # what transformers' auto-compile criteria saw, to say why nothing compiled
    criteria = device_model._valid_auto_compile_criteria

    def spy(model_kwargs, generation_config):
        result = criteria(model_kwargs, generation_config)
        cache = model_kwargs.get("past_key_values", model_kwargs.get("cache_params"))
        decisions.append((result, type(cache).__name__, getattr(cache, "is_compileable", None)))
        return result

    device_model._valid_auto_compile_criteria = spy
    limit_hits = []  # Dynamo's "hit config.recompile_limit" warnings: the frame then runs eagerly
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: limit_hits.append(record.getMessage()) \
        if "hit config." in record.getMessage() else None
    dynamo_log = logging.getLogger("torch._dynamo.convert_frame")
    dynamo_log.addHandler(handler)
    from torch._dynamo.utils import counters
    breaks_before = dict(counters["graph_break"])
    try:
        import torch_neuronx
        torch_neuronx.reset_dynamo_metrics()
    except Exception:
        torch_neuronx = None
    try:
        got = _generate(device_model, gen_ids.to("neuron"), "static", model_type, compile=True,
                        new_tokens=COMPILED_TOKENS)
        graphs = res["compiled_graphs"] = _compiled_graphs() - before
        if graphs > 0 and limit_hits and torch.equal(got, ref):
            res["compiled"] = RECOMPILE_LIMIT
            res["reason"].append(f"compiled: tokens identical, but {_limit_summary(limit_hits)} after {graphs} "
                                 f"graphs, so the later calls ran eagerly"
                                 f"{_graph_breaks_since(breaks_before)}")
        elif graphs <= 0:
            res["compiled"] = NOT_COMPILED
            if not decisions:
                why = "transformers never checked its auto-compile criteria"
            elif not any(d[0] for d in decisions):
                why = (f"transformers' auto-compile criteria were not met (cache {decisions[0][1]}, "
                       f"is_compileable={decisions[0][2]})")
            elif "llama4" in model_type:
                why = "transformers' get_compiled_call returns the eager __call__ for llama4"
            elif "_compiled_call" not in device_model.__dict__:
                why = "transformers chose compilation but made no compiled call"
            else:
                why = "the compiled forward ran but Dynamo handed no graph to the neuron backend"
            same = "identical" if torch.equal(got, ref) else "DIFFERENT"
            res["reason"].append(f"compiled: nothing compiled (compiled_graphs +0): {why}; tokens {same}")
        elif torch.equal(got, ref):
            res["compiled"] = OK
        else:
            res["compiled"] = DIFF
            res["reason"].append(f"compiled: {_differs(got, ref, 'compiled static generate')}")
    except Exception as exc:
        res["compiled"] = ERROR
        res["compiled_graphs"] = _compiled_graphs() - before
        res["reason"].append(f"neuron compiled static generate: {_short(exc)}{_where_ours(exc)}")
        res["compiled_detail"] = "".join(traceback.format_exception(exc))[-6000:]  # for --json only
    finally:
        dynamo_log.removeHandler(handler)
        try:
            del device_model._valid_auto_compile_criteria
        except AttributeError:
            pass
        for name in ("_compiled_call", "_last_compile_config"):
            if name in device_model.__dict__:
                delattr(device_model, name)
        torch._dynamo.reset()


def check_architecture(model_type, neuron=True, static=True, compiled=True, partial=None):
    """Runs the checks for one architecture; returns a dict (never raises).

    Keys: model_type, params, forward, generate, static, compiled, reason (list of strings),
    cpu_ok (CPU ran forward and default generate), neuron_ok (forward, generate and static
    identical: the compiled column is reported on its own), seconds, max_abs_diff,
    compiled_graphs. `partial(res)` is called with the eager results before the compiled check.
    """
    import torch
    from conformance.tiny_configs import NEW_TOKENS_RETURNED
    start = time.time()
    res = dict(model_type=model_type, params=None, forward=NA, generate=NA, static=NA, compiled=NA,
               reason=[], cpu_ok=False, neuron_ok=False, max_abs_diff=None, compiled_graphs=None)
    model = device_model = None
    try:
        try:
            model = build_model(model_type)
        except Exception as exc:  # config or model construction: a CPU-side problem
            res.update(forward=CPU_FAIL, generate=CPU_FAIL, static=CPU_FAIL,
                       compiled=CPU_FAIL if compiled else NA)
            res["reason"].append(f"cpu build: {_short(exc)}{_where(exc)}")
            return res
        res["params"] = sum(p.numel() for p in model.parameters())
        fwd_ids = make_inputs(model, model_type, *FORWARD_SHAPE, seed=1)
        gen_ids = make_inputs(model, model_type, 1, PROMPT_LEN, seed=2)
        expected_new = NEW_TOKENS_RETURNED.get(model_type, NEW_TOKENS)

        # CPU references
        ref = {}
        try:
            ref["forward"] = _forward(model, fwd_ids)
        except Exception as exc:
            res["forward"] = CPU_FAIL
            res["reason"].append(f"cpu forward: {_short(exc)}{_where(exc)}")
        try:
            out = _generate(model, gen_ids, None, model_type)
            if out.shape[-1] != PROMPT_LEN + expected_new:
                raise RuntimeError(f"generated {out.shape[-1] - PROMPT_LEN} tokens, not {expected_new}")
            ref["generate"] = out
        except Exception as exc:
            res["generate"] = CPU_FAIL
            res["reason"].append(f"cpu generate: {_short(exc)}{_where(exc)}")
        if static and supports_static_cache(model):
            try:
                out = _generate(model, gen_ids, "static", model_type)
                if out.shape[-1] != PROMPT_LEN + expected_new:
                    raise RuntimeError(f"generated {out.shape[-1] - PROMPT_LEN} tokens, not {expected_new}")
                if compiled:  # the compiled column's reference: COMPILED_TOKENS tokens, static cache, CPU
                    # generate remembers the longest static cache it made (_previous_max_cache_length) and
                    # makes none shorter after it: the neuron copy must start where ref["static"] started
                    before = model.__dict__.get("_previous_max_cache_length")
                    compiled_ref = _generate(model, gen_ids, "static", model_type, new_tokens=COMPILED_TOKENS)
                    if before is None:
                        model.__dict__.pop("_previous_max_cache_length", None)
                    else:
                        model._previous_max_cache_length = before
                ref["static"] = out  # with its compiled reference, or (CPU_FAIL) neither
            except Exception as exc:
                res["static"] = CPU_FAIL
                if compiled:
                    res["compiled"] = CPU_FAIL
                res["reason"].append(f"cpu static generate: {_short(exc)}{_where(exc)}")
        res["cpu_ok"] = "forward" in ref and "generate" in ref
        if not neuron:
            for key in ref:
                res[key] = OK
            if compiled and "static" in ref:  # the compiled column's CPU reference is the static one
                res["compiled"] = OK
            return res

        # the same model on neuron
        if ref:
            try:
                device_model = copy.deepcopy(model).to("neuron")
            except Exception as exc:
                for key in ref:
                    res[key] = ERROR
                if compiled and "static" in ref:
                    res["compiled"] = ERROR
                res["reason"].append(f"neuron .to(): {_short(exc)}{_where(exc)}")
                ref = {}
        if "forward" in ref:
            try:
                got = _forward(device_model, fwd_ids.to("neuron"))
                diff = (got - ref["forward"]).abs()
                res["max_abs_diff"] = float(diff[diff == diff].max()) if diff.numel() else 0.0
                torch.testing.assert_close(got, ref["forward"], rtol=RTOL, atol=ATOL, equal_nan=True)
                res["forward"] = OK
            except AssertionError as exc:
                res["forward"] = DIFF
                res["reason"].append(f"forward logits differ: max abs diff "
                                     f"{res['max_abs_diff']:.3g} ({_short(exc, 160)})")
            except Exception as exc:
                res["forward"] = ERROR
                res["reason"].append(f"neuron forward: {_short(exc)}{_where(exc)}")
        for key, impl in (("generate", None), ("static", "static")):
            if key not in ref:
                continue
            try:
                got = _generate(device_model, gen_ids.to("neuron"), impl, model_type)
                if torch.equal(got, ref[key]):
                    res[key] = OK
                else:
                    res[key] = DIFF
                    res["reason"].append(_differs(got, ref[key], f"{'static ' if impl else ''}generate"))
            except Exception as exc:
                res[key] = ERROR
                res["reason"].append(f"neuron {'static ' if impl else ''}generate: "
                                     f"{_short(exc)}{_where(exc)}")
        res["neuron_ok"] = res["cpu_ok"] and res["forward"] == OK and res["generate"] == OK \
            and res["static"] in (OK, NA, CPU_FAIL)
        if compiled and "static" in ref:
            if partial is not None:
                partial(dict(res, seconds=round(time.time() - start, 2)))
            check_compiled(res, device_model, gen_ids, compiled_ref, model_type)
        return res
    except Exception as exc:  # harness bug: recorded, the sweep goes on
        res["reason"].append(f"harness: {_short(exc)}{_where(exc)}")
        return res
    finally:
        res["seconds"] = round(time.time() - start, 2)
        del model, device_model
        gc.collect()
        try:
            import torch
            if hasattr(torch, "neuron"):
                torch.neuron.empty_cache()
        except Exception:
            pass


# ----------------------------------------------------------------------------- worker / driver

def _worker(model_types, neuron, compiled=True):
    warnings.filterwarnings("ignore")
    if compiled:  # a compile failure must raise, not run the graph eagerly
        os.environ["TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION"] = "1"
    import torch  # noqa: F401
    if neuron:
        import torch_neuronx  # noqa: F401
    import transformers
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    for mt in model_types:
        print("START " + mt, flush=True)
        if neuron and compiled:
            import torch._dynamo
            torch._dynamo.reset()
            try:
                torch_neuronx.reset_dynamo_metrics()
            except Exception:
                pass
        res = check_architecture(mt, neuron=neuron, compiled=compiled,
                                 partial=lambda r: print("PARTIAL " + json.dumps(r), flush=True))
        print("RESULT " + json.dumps(res), flush=True)


def _pump(stream, q, tag):
    for line in iter(stream.readline, ""):
        q.put((tag, line))
    q.put((tag, None))


def _lost(current, partial, why, seconds, compiled):
    """The result of an architecture whose worker timed out or died: the eager results if they
    were reported (the compiled check was under way), else ERROR everywhere."""
    if partial is not None and partial.get("model_type") == current:
        res = dict(partial, compiled=ERROR, seconds=seconds)
        res["reason"] = list(partial["reason"]) + [f"neuron compiled static generate: {why}"]
        return res
    return dict(model_type=current, params=None, forward=ERROR, generate=ERROR, static=ERROR,
                compiled=ERROR if compiled else NA, cpu_ok=False, neuron_ok=False, reason=[why],
                seconds=seconds)


def run_sweep(model_types, neuron=True, timeout=600, log=sys.stderr, compiled=True):
    """Runs the architectures in worker processes; returns the list of result dicts.

    With `compiled` (and `neuron`), the workers share a fresh temporary program cache
    (TORCH_NEURONX_NEFF_CACHE_DIR), removed at the end."""
    results, remaining = [], list(model_types)
    total = len(model_types)
    env = dict(os.environ)
    cache_dir = None
    if neuron and compiled:
        cache_dir = tempfile.mkdtemp(prefix="arch_sweep_neff_cache_")
        env["TORCH_NEURONX_NEFF_CACHE_DIR"] = cache_dir
        print(f"compiled checks: program cache {cache_dir}", file=log, flush=True)
    try:
        return _run_workers(model_types, remaining, results, total, neuron, timeout, log, compiled, env)
    finally:
        if cache_dir:
            shutil.rmtree(cache_dir, ignore_errors=True)


def _run_workers(model_types, remaining, results, total, neuron, timeout, log, compiled, env):
    while remaining:
        cmd = [sys.executable, "-m", "conformance.arch_sweep", "--worker"]
        cmd += [] if neuron else ["--cpu-only"]
        cmd += [] if compiled else ["--no-compiled"]
        proc = subprocess.Popen(cmd + remaining, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                text=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        q = queue.Queue()
        for stream, tag in ((proc.stdout, "out"), (proc.stderr, "err")):
            threading.Thread(target=_pump, args=(stream, q, tag), daemon=True).start()
        current, started, tail, open_streams, partial = None, None, [], 2, None
        while open_streams:
            try:
                tag, line = q.get(timeout=5)
            except queue.Empty:
                if current and time.time() - started > timeout:
                    proc.kill()  # only the worker this driver started
                    res = _lost(current, partial, f"timeout after {timeout} s", timeout, compiled)
                    results.append(res)
                    remaining.remove(current)
                    print(f"    TIMEOUT after {timeout} s"
                          + (" (in the compiled check)" if partial and partial["model_type"] == current else ""),
                          file=log, flush=True)
                    current = None
                continue
            if line is None:
                open_streams -= 1
                continue
            if tag == "err":
                tail = (tail + [line.rstrip()])[-15:]
                continue
            if line.startswith("START "):
                current, started, tail, partial = line[6:].strip(), time.time(), [], None
                print(f"[{len(results) + 1}/{total}] {current} ...", file=log, flush=True)
            elif line.startswith("PARTIAL "):
                partial = json.loads(line[8:])
            elif line.startswith("RESULT "):
                res = json.loads(line[7:])
                results.append(res)
                remaining.remove(res["model_type"])
                current = None
                verdict = "PASS" if res["neuron_ok"] else ("CPU-FAIL" if not res["cpu_ok"] else "NEURON-FAIL")
                if not neuron:
                    verdict = "CPU-OK" if res["cpu_ok"] else "CPU-FAIL"
                print(f"    {verdict} fwd={res['forward']} gen={res['generate']} "
                      f"static={res['static']} compiled={res.get('compiled', NA)}"
                      f"{'' if res.get('compiled_graphs') is None else ' (%d graphs)' % res['compiled_graphs']} "
                      f"{res['seconds']}s "
                      f"{'; '.join(res['reason'])[:400]}", file=log, flush=True)
        proc.wait()
        if current:  # the worker died inside an architecture
            last = " / ".join(x for x in tail if x.strip())[-600:]
            results.append(_lost(current, partial, f"worker died (exit code {proc.returncode}): {last}",
                                 None, compiled))
            remaining.remove(current)
            print(f"    CRASH exit code {proc.returncode}: {last}", file=log, flush=True)
        elif remaining and proc.returncode != 0:
            last = " / ".join(tail)[-600:]
            print(f"worker failed before starting an architecture: {last}", file=log, flush=True)
            for mt in remaining:
                results.append(dict(model_type=mt, params=None, forward=ERROR, generate=ERROR,
                                    static=ERROR, compiled=ERROR if compiled else NA, cpu_ok=False,
                                    neuron_ok=False, seconds=None, reason=[f"worker failed to start: {last}"]))
            remaining = []
    order = {mt: i for i, mt in enumerate(model_types)}
    return sorted(results, key=lambda r: order[r["model_type"]])


# ----------------------------------------------------------------------------- report

def _params(n):
    if n is None:
        return "-"
    return f"{n / 1e6:.2f}M" if n >= 1e5 else f"{n / 1e3:.1f}K"


def _cpu_cause(res):
    """A short label for why an architecture does not run on CPU."""
    from conformance.tiny_configs import CPU_LIMITS
    known = CPU_LIMITS.get(res["model_type"])
    if known:
        return known.split(":")[0].split(" (")[0].split(";")[0]
    text = " ".join(res["reason"])
    for needle, label in (("worker died", "crash"), ("timeout", "timeout"),
                          ("cpu build", "model/config construction"),
                          ("cpu forward", "CPU forward"), ("cpu generate", "CPU generate")):
        if needle in text:
            return label
    return "other"


def _compact(reasons):
    """Joins reasons, merging steps that failed with the same message ("a, b: msg")."""
    merged = {}
    for reason in reasons:
        step, sep, msg = reason.partition(": ")
        if not sep or not (step.startswith("cpu") or step.startswith("neuron")):
            step, msg = "", reason
        merged.setdefault(msg, []).append(step)
    return "; ".join(f"{', '.join(s for s in steps if s)}: {msg}" if any(steps) else msg
                     for msg, steps in merged.items())


def _is_compiled_reason(reason):
    return reason.startswith("compiled: ") or reason.startswith("neuron compiled ")


def _neuron_cause(res):
    """The first neuron-side error of `res` (eager checks), without its location (to group failures)."""
    for reason in res["reason"]:
        if reason.startswith("cpu") or _is_compiled_reason(reason):
            continue
        text = reason.split(": ", 1)[1] if reason.startswith("neuron") else reason
        text = text.split(" [at ")[0]
        if text.startswith("forward logits differ"):
            return "forward logits differ"
        if "generate differs" in text:
            return "generate differs"
        return text[:160]
    return "unknown"


def _compiled_cause(res):
    """The compiled check's failure of `res`, without its location (to group failures)."""
    for reason in res["reason"]:
        if not _is_compiled_reason(reason):
            continue
        text = reason.split(": ", 1)[1].split(" [at ")[0]
        if "differs from new token" in text:
            return "compiled static generate differs"
        if text.startswith("nothing compiled"):
            return text.split("; tokens ")[0]
        if "Dynamo hit config." in text:
            text = text.split("tokens identical, but ", 1)[-1].split(" after ")[0]
            text = re.sub(r"== -?\d+", "== N", re.sub(r"layers\[\d+\]", "layers[i]", text))
            text = re.sub(r"expected \d+, actual \d+", "expected M, actual N", text)
            return text
        return text[:200]
    return "unknown"


def summarize_compiled(results):
    """(architectures whose eager static generate is identical on neuron, those of them also
    identical compiled, the architectures whose compiled cell is not ok though it applies)."""
    eager = [r for r in results if r["cpu_ok"] and r["static"] == OK]
    same = [r for r in eager if r.get("compiled") == OK]
    failing = [r for r in results if r.get("compiled", NA) not in (OK, NA, CPU_FAIL)]
    return eager, same, failing


def summarize(results):
    runs = [r for r in results if r["cpu_ok"]]
    same = [r for r in runs if r["neuron_ok"]]
    not_cpu = [r for r in results if not r["cpu_ok"]]
    return runs, same, not_cpu


def write_compat(results, path, seconds=None, neuron=True, compiled=True):
    import torch
    import transformers
    from conformance.tiny_configs import SLIDING_WINDOW
    runs, same, not_cpu = summarize(results)
    compiled = compiled and any("compiled" in r for r in results)
    causes = {}
    for r in not_cpu:
        causes.setdefault(_cpu_cause(r), []).append(r["model_type"])
    lines = [
        "# Causal-LM architecture compatibility",
        "",
        f"Every entry of `MODEL_FOR_CAUSAL_LM_MAPPING_NAMES` of transformers "
        f"{transformers.__version__} (torch {torch.__version__}), as a tiny random float32 model "
        f"(`conformance/tiny_configs.py`, seed 0) on CPU and a copy on the `neuron` device: "
        f"forward logits within rtol = atol = {RTOL:g}, and {NEW_TOKENS} greedy new tokens "
        f"identical to CPU with the default cache and, where the model supports it, "
        f"`cache_implementation=\"static\"` (`disable_compile=True`). "
        + (f"The column \"{COMPILED_COLUMN}\" runs that static-cache generate again on neuron "
           f"without `disable_compile`, so transformers compiles the forward with "
           f"`torch.compile(backend=\"neuron\")` (its default `CompileConfig` on the neuron device; "
           f"Dynamo reset per architecture, a fresh program cache for the sweep, fallback execution off), "
           f"for {COMPILED_TOKENS} new tokens (past the sliding window of {SLIDING_WINDOW} tokens) and compares its "
           f"tokens with the CPU static reference of as many; it is `ok` only if "
           f"`counters[\"neuron\"][\"compiled_graphs\"]` grew, and the column \"{GRAPHS_COLUMN}\" says by how much "
           f"(at most {MAX_GRAPHS}: a prefill and a decode program; Note [Sliding-window static caches compile once]). "
           if compiled else "")
        + f"Made by `python -m conformance.arch_sweep --output {os.path.basename(path)}`"
        + (f" in {seconds / 60:.1f} minutes." if seconds else "."),
        "",
        (f"**Summary: {len(same)} of {len(runs)} architectures that run on CPU run identically "
         f"on neuron.** " if neuron else
         f"**CPU only (`--cpu-only`): {len(runs)} architectures run on CPU; neuron not checked.** ")
        + f"{len(not_cpu)} of {len(results)} did not run on CPU (forward and default "
        f"generate)" + (": " + "; ".join(f"{k}: {len(v)} ({', '.join(v)})"
                                        for k, v in sorted(causes.items())) if causes else "") + ".",
        "",
        "`ok` identical, `DIFF` neuron differs from CPU, `ERROR` neuron raised, `cpu-fail` the CPU "
        "reference itself failed (a config or harness limit, not the backend), `n/a` not applicable "
        "(the model does not declare static-cache support)"
        + (", `not compiled` the compiled generate ran but nothing was compiled (the reason says why), "
           "`recompile limit` identical tokens and programs were compiled, but Dynamo recompiled the forward "
           "(one program per decode step) until its `recompile_limit` and ran the later steps eagerly. "
           "The sliding-window caches did that until the layer's length moved into its tensor on neuron (Note "
           "[Sliding-window static caches compile once], python/torch_neuron_sim/compile/transformers_patches.py): "
           "transformers keeps it in a Python int `cumulative_length_int` that Dynamo guards on, and compiles with "
           "`dynamic=False`; CPU Inductor with the same `CompileConfig(dynamic=False, mode=\"default\")` still hits "
           "the limit there (mistral, checked by hand)."
           if compiled else "."),
        "",
    ]
    if compiled and neuron:
        eager, same_c, failing = summarize_compiled(results)
        lines[6:6] = [
            f"**Static cache, compiled: {len(same_c)} of {len(eager)} architectures that run with the static "
            f"cache eagerly also run compiled, identical.** " + ", ".join(
                f"{sum(r.get('compiled') == v for r in results)} {v}"
                for v in (OK, DIFF, ERROR, RECOMPILE_LIMIT, NOT_COMPILED, CPU_FAIL, NA)) + ".",
            "",
        ]
    groups = {}
    for r in runs:
        if not r["neuron_ok"]:
            groups.setdefault(_neuron_cause(r), []).append(r["model_type"])
    if groups:
        lines += ["Failures on neuron, grouped by the first error:", ""]
        for cause, names in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            lines.append(f"- {len(names)}: `{cause}`: {', '.join(names)}")
        lines.append("")
    if compiled and neuron:
        cgroups = {}
        for r in failing:
            cgroups.setdefault(_compiled_cause(r), []).append(f"{r['model_type']} ({r['compiled']})")
        if cgroups:
            lines += [f"Failures of \"{COMPILED_COLUMN}\", grouped by the error:", ""]
            for cause, names in sorted(cgroups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
                lines.append(f"- {len(names)}: `{cause.replace('`', chr(39))}`: {', '.join(names)}")
            lines.append("")
    ccol = f" {COMPILED_COLUMN} | {GRAPHS_COLUMN} |" if compiled else ""
    lines += [
        "| model_type | params | forward | generate | static generate |" + ccol + " seconds | reason on failure |",
        "|---|---|---|---|---|" + ("---|---|" if compiled else "") + "---|---|",
    ]
    from conformance.tiny_configs import CPU_LIMITS
    for r in results:
        reason = _compact(r["reason"])
        if not r["cpu_ok"] and r["model_type"] in CPU_LIMITS:
            reason = f"{CPU_LIMITS[r['model_type']]}. ({reason})"
        reason = reason.replace("|", "/").replace("\n", " ")
        secs = "-" if r.get("seconds") is None else f"{r['seconds']:.1f}"
        graphs = r.get("compiled_graphs")
        ccell = f" {r.get('compiled', NA)} | {'-' if graphs is None else graphs} |" if compiled else ""
        lines.append(f"| {r['model_type']} | {_params(r['params'])} | {r['forward']} | "
                     f"{r['generate']} | {r['static']} |{ccell} {secs} | {reason} |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", action="append", default=[], metavar="SUBSTR",
                        help="only model types containing SUBSTR (repeatable)")
    parser.add_argument("--output", default="COMPAT.md")
    parser.add_argument("--cpu-only", action="store_true", help="check only the CPU side (configs)")
    parser.add_argument("--no-compiled", action="store_true",
                        help=f"skip the '{COMPILED_COLUMN}' check (torch.compile(backend='neuron'))")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per architecture")
    parser.add_argument("--json", help="also write the raw results here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("model_types", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args.model_types, neuron=not args.cpu_only, compiled=not args.no_compiled)
        return 0
    types = all_model_types()
    if args.only:
        types = [t for t in types if any(s in t for s in args.only)]
    start = time.time()
    results = run_sweep(types, neuron=not args.cpu_only, timeout=args.timeout, compiled=not args.no_compiled)
    elapsed = time.time() - start
    runs, same, not_cpu = summarize(results)
    print(f"{len(same)} of {len(runs)} architectures that run on CPU run identically on neuron; "
          f"{len(not_cpu)} of {len(results)} did not run on CPU; {elapsed:.0f} s", file=sys.stderr)
    if not args.no_compiled and not args.cpu_only:
        eager, same_c, _ = summarize_compiled(results)
        print(f"{len(same_c)} of {len(eager)} architectures that run with the static cache eagerly also run "
              f"compiled, identical", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if args.output:
        write_compat(results, args.output, seconds=elapsed, neuron=not args.cpu_only,
                     compiled=not args.no_compiled)
    return 0


if __name__ == "__main__":
    sys.exit(main())
