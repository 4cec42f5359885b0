"""How fast? Requests served at each concurrency level (closed loop: N workers, each taking
the next request when done): latency per request, time to first token, steady throughput,
error rate. Every shape is served once first (warm-up, not timed), so compile and first-call
costs stay out of the steady numbers.

On the simulated device each request also gets its predicted Trainium time: the differences of
torch_neuronx.device_time() read when the request starts, when its first token is issued and when
it ends (device work only: the host's gaps between launches are not in it). Requests served at
once share the device's timeline, so their predicted latencies include each other's work."""
import concurrent.futures
import time
import traceback

import numpy

from . import devices, stopping
from .loading import generate


class _FirstToken:
    """A generate() streamer that notes when the first new token is on the host."""

    def __init__(self, device, clock):
        self.device, self.clock, self.calls = device, clock, 0
        self.first_token_at = self.first_token_device_ms = None

    def put(self, value):
        self.calls += 1
        if self.calls == 2 and self.first_token_at is None:  # call 1 is the prompt
            if self.clock:
                self.first_token_device_ms = self.clock()
            devices.synchronize(self.device)
            self.first_token_at = time.perf_counter()

    def end(self):
        pass


def _serve_one(loaded, device, request, max_new_tokens, timeout_s, clock=None):
    if stopping.requested():
        return {"label": request.label, "stopped": True}
    start_device = clock() if clock else None
    start = time.perf_counter()
    streamer = _FirstToken(device, clock)
    try:
        tokens = generate(loaded, request.input_ids.to(device), max_new_tokens, streamer=streamer).cpu()
    except Exception as error:
        return {"label": request.label, "error": f"{type(error).__name__}: {error}",
                "traceback": traceback.format_exc(), "latency_s": time.perf_counter() - start}
    latency = time.perf_counter() - start
    result = {"label": request.label, "latency_s": latency, "tokens": int(tokens.numel()),
              "ttft_s": (streamer.first_token_at - start) if streamer.first_token_at else None}
    if clock:
        result["device_start_ms"], result["device_end_ms"] = start_device, clock()
        result["device_first_token_ms"] = streamer.first_token_device_ms
    if latency > timeout_s:
        result["error"] = f"timeout: {latency:.1f} s > {timeout_s} s"
        result["timed_out"] = True
    return result


def _percentiles(values, to_ms=1000):
    if not values:
        return {"p50": None, "p95": None, "p99": None}
    p50, p95, p99 = numpy.percentile(numpy.array(values) * to_ms, [50, 95, 99])
    return {"p50": float(p50), "p95": float(p95), "p99": float(p99)}


def _predicted(answered, ok, device_span_ms, max_new_tokens):
    """A level's predicted Trainium figures, from the device-clock readings of its requests."""
    requests = []
    for r in answered:
        latency = r["device_end_ms"] - r["device_start_ms"]
        first = r.get("device_first_token_ms")
        ttft = first - r["device_start_ms"] if first is not None else None
        per_token = (latency - ttft) / (max_new_tokens - 1) if ttft is not None and max_new_tokens > 1 else None
        requests.append({"label": r["label"], "latency_ms": latency, "ttft_ms": ttft, "per_token_ms": per_token})
    tokens = sum(r["tokens"] for r in ok)
    return {"latency_ms": _percentiles([r["latency_ms"] for r in requests], to_ms=1),
            "ttft_ms": _percentiles([r["ttft_ms"] for r in requests if r["ttft_ms"] is not None], to_ms=1),
            "per_token_ms": _percentiles([r["per_token_ms"] for r in requests if r["per_token_ms"] is not None],
                                         to_ms=1),
            "device_span_ms": device_span_ms,
            "tokens_per_s": tokens / device_span_ms * 1000 if device_span_ms > 0 else None,
            "latencies_ms": [r["latency_ms"] for r in requests], "requests": requests}


def _predicted_label():
    from .predict import PredictError, current_label
    try:
        return current_label()
    except PredictError:
        return "predicted (cost model unknown, calibration error unknown)"


def serve(loaded, device, requests, serve_config, max_new_tokens):
    """{warmup, levels: [{concurrency, latency_ms, ttft_ms, tokens_per_s, ...}]}."""
    warmup = {}
    for request in {r.shape: r for r in requests}.values():  # every shape once
        stopping.check()
        result = _serve_one(loaded, device, request, max_new_tokens, serve_config.timeout_s)
        warmup[request.label] = result["latency_s"]
    queue = [requests[i % len(requests)] for i in range(serve_config.requests)]
    clock, counters = devices.device_clock(device), devices.work_counters(device)
    levels = []
    for concurrency in serve_config.concurrency:
        start = time.perf_counter()
        start_work = counters() if counters else None
        start_device = clock() if clock else None
        with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
            results = list(pool.map(lambda r: _serve_one(loaded, device, r, max_new_tokens,
                                                         serve_config.timeout_s, clock), queue))
        stopping.check()  # a level cut short is not a measurement
        wall = time.perf_counter() - start
        ok = [r for r in results if "error" not in r]
        failed = [r for r in results if "error" in r]
        # latency covers every request that answered, late ones included (only exceptions are
        # left out): a P95 over the requests fast enough would hide the slow tail
        answered = [r for r in results if "error" not in r or r.get("timed_out")]
        levels.append({
            "concurrency": concurrency, "requests": len(results), "wall_s": wall,
            "tokens": sum(r["tokens"] for r in ok), "tokens_per_s": sum(r["tokens"] for r in ok) / wall,
            "requests_per_s": len(ok) / wall, "latency_ms": _percentiles([r["latency_s"] for r in answered]),
            "ttft_ms": _percentiles([r["ttft_s"] for r in answered if r.get("ttft_s") is not None]),
            "latencies_ms": [r["latency_s"] * 1000 for r in answered],
            "error_rate": len(failed) / len(results), "timeouts": sum(1 for r in failed if r.get("timed_out")),
            "errors": [{"label": r["label"], "error": r["error"], "traceback": r.get("traceback")}
                       for r in failed[:3]]})
        if clock:
            levels[-1]["predicted"] = _predicted(answered, ok, clock() - start_device, max_new_tokens)
        if clock and counters:  # the level's achieved FLOP/s and HBM bytes/s against one logical core's peaks
            work = counters() - start_work
            levels[-1]["predicted"].update(mfu=work.mfu, mbu=work.mbu)
    result = {"warmup_s": warmup, "levels": levels, "timing": devices.timing_note(device)}
    if clock:
        platform, lnc = devices.platform(device)
        result.update(predicted_label=_predicted_label(), platform=platform, lnc=lnc,
                      predicted_note="torch_neuronx.device_time() read around each request: device work only",
                      loop="transformers' generate() as this run calls it: the forward and the eager device ops "
                           "generate adds around it each token (requests served at once share the device's "
                           "timeline: one after the other)")
    return result
