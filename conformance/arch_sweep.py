"""Causal-LM architecture sweep: every causal LM of the pinned transformers, CPU versus neuron.

For each entry of `MODEL_FOR_CAUSAL_LM_MAPPING_NAMES` a tiny model is built offline on CPU
(`conformance.tiny_configs.build_config`, `torch.manual_seed(0)`, float32, eval mode), copied to
the neuron device, and checked:

* forward: logits on neuron equal CPU's within rtol = atol = 1e-4;
* generate: 16 greedy new tokens with the default (dynamic) cache identical to CPU's;
* static generate: the same with `cache_implementation="static"`, where the model declares it
  can (`_can_compile_fullgraph` and Cache support); `disable_compile=True` everywhere.

A failure on the CPU side is a config or harness problem; CPU running but neuron differing or
raising is a backend bug and is recorded, never worked around.

    python -m conformance.arch_sweep [--only SUBSTR ...] [--output COMPAT.md] [--cpu-only]

The architectures run in a worker process; if it dies (a crash in native code) or an
architecture exceeds `--timeout`, the architecture is recorded as such and a new worker goes on
with the rest. Progress goes to stderr.
"""
import argparse
import copy
import gc
import json
import os
import queue
import subprocess
import sys
import threading
import time
import traceback
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

PROMPT_LEN = 8
NEW_TOKENS = 16
FORWARD_SHAPE = (2, 12)
RTOL = ATOL = 1e-4

OK, DIFF, ERROR, CPU_FAIL, NA = "ok", "DIFF", "ERROR", "cpu-fail", "n/a"


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


def generation_config(model, cache_implementation=None, model_type=None):
    """Greedy decoding of exactly NEW_TOKENS tokens, no compilation, no model-specific extras."""
    from transformers import GenerationConfig
    from conformance.tiny_configs import GENERATION_EXTRAS, special_token_ids
    text = model.config.get_text_config(decoder=True)
    pad = getattr(text, "pad_token_id", None)
    pad = pad if isinstance(pad, int) else 0
    suppress = special_token_ids(model.config)
    return GenerationConfig(
        max_new_tokens=NEW_TOKENS, do_sample=False, num_beams=1, num_return_sequences=1, pad_token_id=pad,
        eos_token_id=None, bos_token_id=getattr(text, "bos_token_id", None),
        suppress_tokens=suppress or None, cache_implementation=cache_implementation,
        disable_compile=True, **{"use_cache": True, **GENERATION_EXTRAS.get(model_type, {})})


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


def _generate(model, ids, cache_implementation, model_type=None):
    import torch
    model.generation_config = generation_config(model, cache_implementation, model_type)
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids))
    out = out.sequences if hasattr(out, "sequences") else out
    return out.detach().cpu()


def check_architecture(model_type, neuron=True, static=True):
    """Runs the checks for one architecture; returns a dict (never raises).

    Keys: model_type, params, forward, generate, static, reason (list of strings), cpu_ok (CPU
    ran forward and default generate), neuron_ok (all applicable checks identical), seconds,
    max_abs_diff.
    """
    import torch
    from conformance.tiny_configs import NEW_TOKENS_RETURNED
    start = time.time()
    res = dict(model_type=model_type, params=None, forward=NA, generate=NA, static=NA,
               reason=[], cpu_ok=False, neuron_ok=False, max_abs_diff=None)
    model = device_model = None
    try:
        try:
            model = build_model(model_type)
        except Exception as exc:  # config or model construction: a CPU-side problem
            res.update(forward=CPU_FAIL, generate=CPU_FAIL, static=CPU_FAIL)
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
                ref["static"] = out
            except Exception as exc:
                res["static"] = CPU_FAIL
                res["reason"].append(f"cpu static generate: {_short(exc)}{_where(exc)}")
        res["cpu_ok"] = "forward" in ref and "generate" in ref
        if not neuron:
            for key in ref:
                res[key] = OK
            return res

        # the same model on neuron
        if ref:
            try:
                device_model = copy.deepcopy(model).to("neuron")
            except Exception as exc:
                for key in ref:
                    res[key] = ERROR
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
                    same = got.shape == ref[key].shape
                    first = ((got != ref[key]).nonzero()[0, -1].item() - PROMPT_LEN) if same else "?"
                    res["reason"].append(f"{'static ' if impl else ''}generate differs from "
                                         f"new token {first}: cpu {ref[key][0, PROMPT_LEN:].tolist()} "
                                         f"neuron {got[0, PROMPT_LEN:].tolist()}")
            except Exception as exc:
                res[key] = ERROR
                res["reason"].append(f"neuron {'static ' if impl else ''}generate: "
                                     f"{_short(exc)}{_where(exc)}")
        res["neuron_ok"] = res["cpu_ok"] and res["forward"] == OK and res["generate"] == OK \
            and res["static"] in (OK, NA, CPU_FAIL)
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

def _worker(model_types, neuron):
    warnings.filterwarnings("ignore")
    import torch  # noqa: F401
    if neuron:
        import torch_neuronx  # noqa: F401
    import transformers
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    for mt in model_types:
        print("START " + mt, flush=True)
        res = check_architecture(mt, neuron=neuron)
        print("RESULT " + json.dumps(res), flush=True)


def _pump(stream, q, tag):
    for line in iter(stream.readline, ""):
        q.put((tag, line))
    q.put((tag, None))


def run_sweep(model_types, neuron=True, timeout=600, log=sys.stderr):
    """Runs the architectures in worker processes; returns the list of result dicts."""
    results, remaining = [], list(model_types)
    total = len(model_types)
    while remaining:
        cmd = [sys.executable, "-m", "conformance.arch_sweep", "--worker"]
        cmd += [] if neuron else ["--cpu-only"]
        proc = subprocess.Popen(cmd + remaining, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        q = queue.Queue()
        for stream, tag in ((proc.stdout, "out"), (proc.stderr, "err")):
            threading.Thread(target=_pump, args=(stream, q, tag), daemon=True).start()
        current, started, tail, open_streams = None, None, [], 2
        while open_streams:
            try:
                tag, line = q.get(timeout=5)
            except queue.Empty:
                if current and time.time() - started > timeout:
                    proc.kill()  # only the worker this driver started
                    results.append(dict(model_type=current, params=None, forward=ERROR,
                                        generate=ERROR, static=ERROR, cpu_ok=False, neuron_ok=False,
                                        reason=[f"timeout after {timeout} s"], seconds=timeout))
                    remaining.remove(current)
                    current = None
                continue
            if line is None:
                open_streams -= 1
                continue
            if tag == "err":
                tail = (tail + [line.rstrip()])[-15:]
                continue
            if line.startswith("START "):
                current, started, tail = line[6:].strip(), time.time(), []
                print(f"[{len(results) + 1}/{total}] {current} ...", file=log, flush=True)
            elif line.startswith("RESULT "):
                res = json.loads(line[7:])
                results.append(res)
                remaining.remove(res["model_type"])
                current = None
                verdict = "PASS" if res["neuron_ok"] else ("CPU-FAIL" if not res["cpu_ok"] else "NEURON-FAIL")
                if not neuron:
                    verdict = "CPU-OK" if res["cpu_ok"] else "CPU-FAIL"
                print(f"    {verdict} fwd={res['forward']} gen={res['generate']} "
                      f"static={res['static']} {res['seconds']}s "
                      f"{'; '.join(res['reason'])[:400]}", file=log, flush=True)
        proc.wait()
        if current:  # the worker died inside an architecture
            last = " / ".join(x for x in tail if x.strip())[-600:]
            results.append(dict(model_type=current, params=None, forward=ERROR, generate=ERROR,
                                static=ERROR, cpu_ok=False, neuron_ok=False, seconds=None,
                                reason=[f"worker died (exit code {proc.returncode}): {last}"]))
            remaining.remove(current)
            print(f"    CRASH exit code {proc.returncode}: {last}", file=log, flush=True)
        elif remaining and proc.returncode != 0:
            last = " / ".join(tail)[-600:]
            print(f"worker failed before starting an architecture: {last}", file=log, flush=True)
            for mt in remaining:
                results.append(dict(model_type=mt, params=None, forward=ERROR, generate=ERROR,
                                    static=ERROR, cpu_ok=False, neuron_ok=False, seconds=None,
                                    reason=[f"worker failed to start: {last}"]))
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


def _neuron_cause(res):
    """The first neuron-side error of `res`, without its location (to group failures)."""
    for reason in res["reason"]:
        if reason.startswith("cpu"):
            continue
        text = reason.split(": ", 1)[1] if reason.startswith("neuron") else reason
        text = text.split(" [at ")[0]
        if text.startswith("forward logits differ"):
            return "forward logits differ"
        if "generate differs" in text:
            return "generate differs"
        return text[:160]
    return "unknown"


def summarize(results):
    runs = [r for r in results if r["cpu_ok"]]
    same = [r for r in runs if r["neuron_ok"]]
    not_cpu = [r for r in results if not r["cpu_ok"]]
    return runs, same, not_cpu


def write_compat(results, path, seconds=None, neuron=True):
    import torch
    import transformers
    runs, same, not_cpu = summarize(results)
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
        f"Made by `python -m conformance.arch_sweep --output {os.path.basename(path)}`"
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
        "(the model does not declare static-cache support).",
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
    lines += [
        "| model_type | params | forward | generate | static generate | seconds | reason on failure |",
        "|---|---|---|---|---|---|---|",
    ]
    from conformance.tiny_configs import CPU_LIMITS
    for r in results:
        reason = _compact(r["reason"])
        if not r["cpu_ok"] and r["model_type"] in CPU_LIMITS:
            reason = f"{CPU_LIMITS[r['model_type']]}. ({reason})"
        reason = reason.replace("|", "/").replace("\n", " ")
        secs = "-" if r.get("seconds") is None else f"{r['seconds']:.1f}"
        lines.append(f"| {r['model_type']} | {_params(r['params'])} | {r['forward']} | "
                     f"{r['generate']} | {r['static']} | {secs} | {reason} |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", action="append", default=[], metavar="SUBSTR",
                        help="only model types containing SUBSTR (repeatable)")
    parser.add_argument("--output", default="COMPAT.md")
    parser.add_argument("--cpu-only", action="store_true", help="check only the CPU side (configs)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per architecture")
    parser.add_argument("--json", help="also write the raw results here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("model_types", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args.model_types, neuron=not args.cpu_only)
        return 0
    types = all_model_types()
    if args.only:
        types = [t for t in types if any(s in t for s in args.only)]
    start = time.time()
    results = run_sweep(types, neuron=not args.cpu_only, timeout=args.timeout)
    elapsed = time.time() - start
    runs, same, not_cpu = summarize(results)
    print(f"{len(same)} of {len(runs)} architectures that run on CPU run identically on neuron; "
          f"{len(not_cpu)} of {len(results)} did not run on CPU; {elapsed:.0f} s", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if args.output:
        write_compat(results, args.output, seconds=elapsed, neuron=not args.cpu_only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
