"""The speed of the service the team runs: `[serve] engine = "vllm"` serves the workload's requests
with vLLM instead of transformers' generate (Note [Serving engines]).

Note [Serving engines]
engine = "generate" (the default) serves each request with model.generate(), several threads at
once (speed.py). engine = "vllm" starts vLLM's engine on the run's device, in a child process per
concurrency level (`python -m neuron_migrate.vllm_serve LEVEL.json`), with the Python that runs
neuron-migrate (vLLM must be importable there: `make vllm-venv`, then build/vllm-venv/bin/python -m
neuron_migrate ...): on `neuron`, vLLM on the simulated device through this project's platform plugin
(python/vllm_neuron_sim); on `cuda`, real vLLM on the GPU; on `cpu`, vLLM's CPU build. The level
is a closed loop as speed.py's: `concurrency` requests in flight (max_num_seqs), the next one added
when one finishes, `serve.requests` in all, each row of the workload's requests one vLLM request
(its token ids, greedy, exactly max_new_tokens tokens). Every distinct prompt length is served once
first (warmup_s), then the level's first 2 x concurrency requests at its concurrency (the token
buckets of batched steps), neither timed. A request vLLM refuses is an error of the level, the
others go on. Measured: wall-clock latency, TTFT and throughput from the
engine's outputs. On neuron also predicted: the served load on the device clock (vLLM Neuron's
ServingClock report, Note [A served load on the device clock]), the timed requests only. The
level's fields are speed.py's, so gates, cost and `compare` read them as they read generate's.
vLLM needs the model as a folder (model.path): a model.factory workload cannot use it;
model.random_init serves random weights (vLLM's load_format "dummy"). On the CPU and the simulated
device the KV cache is sized for the level (_kv_cache_bytes), on a GPU vLLM sizes it."""
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy

from . import devices, stopping


class EngineError(RuntimeError):
    """vLLM could not serve the workload here (the message says why and what to do)."""


def check(workload):
    """Raises EngineError when engine = "vllm" cannot run in this Python or for this model."""
    import importlib.util
    if workload.model.path is None:
        raise EngineError("serve.engine = \"vllm\" needs model.path (a model folder vLLM loads); a model.factory "
                          "model can only be served with engine = \"generate\"")
    if importlib.util.find_spec("vllm") is None:
        raise EngineError(f"serve.engine = \"vllm\": vLLM is not installed for {sys.executable}; run `make vllm-venv` "
                          "and then build/vllm-venv/bin/python -m neuron_migrate run ... (or install vLLM here)")


def _percentiles(values):
    if not values:
        return {"p50": None, "p95": None, "p99": None}
    p50, p95, p99 = numpy.percentile(numpy.array(values, dtype=float), [50, 95, 99])
    return {"p50": float(p50), "p95": float(p95), "p99": float(p99)}


def _prompts(requests):
    """Each row of each request: one vLLM request (its label, its token ids)."""
    rows = []
    for request in requests:
        for i, row in enumerate(request.input_ids.tolist()):
            rows.append((request.label if request.input_ids.shape[0] == 1 else f"{request.label}/{i}", row))
    return rows


def _kv_cache_bytes(workload, concurrency):
    """KV cache for `concurrency` requests of max_seq_len tokens, twice over (at least 64 MiB): on the CPU
    and the simulated device the cache is host memory, and vLLM's default (most of the memory there)
    takes longer to allocate and touch than the level takes to serve. None (vLLM's default) on a GPU,
    and where the config does not name its attention shape in transformers' usual fields."""
    from transformers import AutoConfig
    try:
        config = AutoConfig.from_pretrained(workload.resolve(workload.model.path))
        config = getattr(config, "text_config", None) or config
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        layers = config.num_hidden_layers
    except (AttributeError, TypeError, ValueError, OSError):
        return None  # a config without the usual names (or none transformers reads): vLLM sizes the cache
    itemsize = 4 if workload.model.dtype == "float32" else 2
    per_token = 2 * layers * kv_heads * head_dim * itemsize
    return max(64 << 20, 2 * per_token * workload.inputs.max_seq_len * concurrency)


def _level_spec(workload, device, requests, concurrency):
    import torch
    kind = torch.device(device).type
    rows = _prompts(requests)
    return {"model": workload.resolve(workload.model.path), "dummy": bool(workload.model.random_init),
            "dtype": workload.model.dtype, "max_model_len": workload.inputs.max_seq_len, "seed": workload.seed,
            "enforce_eager": not workload.compile.enabled, "device": kind, "concurrency": concurrency,
            "max_new_tokens": workload.inputs.max_new_tokens, "requests": workload.serve.requests,
            "timeout_s": workload.serve.timeout_s, "prompts": rows,
            "kv_cache_bytes": _kv_cache_bytes(workload, concurrency) if kind in ("cpu", "neuron") else None}


def serve(workload, device, requests):
    """speed.serve's result for the vLLM engine: {warmup_s, levels, timing, engine, ...}."""
    check(workload)
    levels, warmup, predicted = [], {}, False
    for concurrency in workload.serve.concurrency:
        stopping.check()
        spec = _level_spec(workload, device, requests, concurrency)
        result = _run_level(spec, workload.serve.timeout_s * workload.serve.requests + 600)
        warmup.update(result.pop("warmup_s"))
        predicted = predicted or "predicted" in result
        levels.append(result)
    out = {"engine": "vllm", "warmup_s": warmup, "levels": levels, "timing": devices.timing_note(device),
           "loop": "vLLM's engine (continuous batching, paged KV cache): concurrency = max_num_seqs, a closed loop"}
    if predicted:
        from .speed import _predicted_label
        platform, lnc = devices.platform(device)
        out.update(predicted_label=_predicted_label(), platform=platform, lnc=lnc,
                   predicted_note="the vLLM service's device clock (vllm_neuron_sim ServingClock): each engine "
                                  "step's device work; the timed requests only")
    return out


def _run_level(spec, timeout_s):
    with tempfile.TemporaryDirectory(prefix="neuron-migrate-vllm-") as folder:
        path = os.path.join(folder, "level.json")
        with open(path, "w") as handle:
            json.dump(spec, handle)
        env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0", TOKENIZERS_PARALLELISM="false")
        env.pop("VLLM_TARGET_DEVICE", None)
        if spec["device"] == "cpu":
            env["VLLM_TARGET_DEVICE"] = "cpu"
        if spec["device"] == "neuron":
            env["VLLM_NEURON_CLOCK_REPORT"] = os.path.join(folder, "clock.json")
        try:
            done = subprocess.run([sys.executable, "-m", "neuron_migrate.vllm_serve", path], env=env,
                                  capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as error:
            raise EngineError(f"vLLM serving at concurrency {spec['concurrency']} on {spec['device']} did not finish "
                              f"in {timeout_s:.0f} s") from error
        if done.returncode != 0:
            raise EngineError(f"vLLM serving at concurrency {spec['concurrency']} on {spec['device']} failed "
                              f"(exit {done.returncode}): {done.stderr.strip()[-3000:]}")
        with open(os.path.join(folder, "result.json")) as handle:
            return json.load(handle)


# ---- the child process -----------------------------------------------------------------------

def _clock(path):
    if not path or not os.path.exists(path):
        return None
    with open(path) as handle:
        return json.load(handle)


def _predicted(before, after, timed_ids):
    """The timed requests' figures on the device clock: the report after the warm-up and at the end.
    The span and tokens cover every timed request (the report's summary counts them all); the
    per-request percentiles the latest the report lists (vllm_neuron_sim.clock.RECENT), which
    `requests_counted` says when it is fewer than were timed."""
    span = after["summary"]["timeline_ms"] - (before["summary"]["timeline_ms"] if before else 0.0)
    tokens = after["summary"]["output_tokens"] - (before["summary"]["output_tokens"] if before else 0)
    mine = [r for r in after["requests"] if any(r["id"].startswith(i) for i in timed_ids)]
    return {"latency_ms": _percentiles([r["latency_ms"] for r in mine]),
            "ttft_ms": _percentiles([r["ttft_ms"] for r in mine]),
            "per_token_ms": _percentiles([r["tpot_ms"] for r in mine if r["tpot_ms"] is not None]),
            "device_span_ms": span, "tokens_per_s": tokens / span * 1000 if span > 0 else None,
            "latencies_ms": [r["latency_ms"] for r in mine],
            "requests": [{"label": r["id"], "latency_ms": r["latency_ms"], "ttft_ms": r["ttft_ms"],
                          "per_token_ms": r["tpot_ms"]} for r in mine],
            "requests_counted": len(mine), "requests_timed": len(timed_ids),
            "model_ms": after["summary"].get("model_ms", 0.0) - (before["summary"].get("model_ms", 0.0) if before
                                                                 else 0.0)}


def _closed_loop(engine, params, queue, concurrency, prefix):
    """Serves `queue` [(label, token ids)] with at most `concurrency` in flight: {id: times}. A request
    vLLM refuses (too long a prompt, ...) ends at once with its error; the others are served."""
    pending, times, index = list(queue), {}, 0
    while pending or engine.has_unfinished_requests():
        while pending and sum(1 for t in times.values() if "end" not in t) < concurrency:
            label, ids = pending.pop(0)
            request_id = f"{prefix}{index}-"
            index += 1
            times[request_id] = {"label": label, "start": time.perf_counter(), "tokens": 0}
            try:
                engine.add_request(request_id, {"prompt_token_ids": ids}, params)
            except (ValueError, TypeError, RuntimeError) as error:  # vLLM refuses this request: the rest go on
                times[request_id].update(end=time.perf_counter(), error=f"{type(error).__name__}: {error}")
        for output in engine.step():
            record = next((t for i, t in times.items() if output.request_id.startswith(i)), None)
            if record is None:
                continue
            now = time.perf_counter()
            record["tokens"] = len(output.outputs[0].token_ids)
            if record["tokens"] and "first" not in record:
                record["first"] = now
            if output.finished:
                record["end"] = now
    return times


def main(path):
    with open(path) as handle:
        spec = json.load(handle)
    folder = os.path.dirname(path)
    from vllm import LLM, SamplingParams
    options = dict(model=spec["model"], dtype=spec["dtype"], max_model_len=spec["max_model_len"], seed=spec["seed"],
                   enforce_eager=spec["enforce_eager"], max_num_seqs=spec["concurrency"])
    if spec["dummy"]:
        options["load_format"] = "dummy"
    if spec.get("kv_cache_bytes"):
        options["kv_cache_memory_bytes"] = spec["kv_cache_bytes"]
    engine = LLM(**options).llm_engine
    params = SamplingParams(temperature=0, max_tokens=spec["max_new_tokens"], ignore_eos=True)
    rows = [(label, ids) for label, ids in spec["prompts"]]
    warmup = {}
    for label, ids in {len(ids): (label, ids) for label, ids in rows}.values():  # every prompt length once
        started = time.perf_counter()
        _closed_loop(engine, params, [(label, ids)], 1, "warmup-")
        warmup[label] = time.perf_counter() - started
    queue = [rows[i % len(rows)] for i in range(spec["requests"])]
    # and the level's own mix once (its first 2 x concurrency requests at its concurrency): the steps
    # of several requests at once hit token buckets one request alone does not, whose programs
    # would otherwise compile in the timed loop
    _closed_loop(engine, params, queue[:2 * spec["concurrency"]], spec["concurrency"], "warmup-level-")
    report = os.environ.get("VLLM_NEURON_CLOCK_REPORT")
    before = _clock(report)
    started = time.perf_counter()
    times = _closed_loop(engine, params, queue, spec["concurrency"], "timed-")
    wall = time.perf_counter() - started
    done = [t for t in times.values() if "end" in t and "error" not in t]
    refused = [t for t in times.values() if "error" in t]
    late = [t for t in done if t["end"] - t["start"] > spec["timeout_s"]]
    tokens = sum(t["tokens"] for t in done if t not in late)
    result = {"concurrency": spec["concurrency"], "requests": len(times), "wall_s": wall, "tokens": tokens,
              "tokens_per_s": tokens / wall, "requests_per_s": (len(done) - len(late)) / wall,
              "latency_ms": _percentiles([(t["end"] - t["start"]) * 1000 for t in done]),
              "ttft_ms": _percentiles([(t["first"] - t["start"]) * 1000 for t in done if "first" in t]),
              "latencies_ms": [(t["end"] - t["start"]) * 1000 for t in done],
              "error_rate": (len(times) - len(done) + len(late)) / len(times), "timeouts": len(late),
              "errors": ([{"label": t["label"], "error": t["error"]} for t in refused[:3]]
                         + [{"label": t["label"], "error": f"timeout: {t['end'] - t['start']:.1f} s > "
                                                          f"{spec['timeout_s']} s"} for t in late[:3]]),
              "engine": "vllm", "warmup_s": warmup}
    after = _clock(report)
    if after is not None:
        result["predicted"] = _predicted(before, after, list(times))
    with open(os.path.join(folder, "result.json"), "w") as handle:
        json.dump(result, handle)


if __name__ == "__main__":
    main(sys.argv[1])
