"""How fast? Requests served at each concurrency level (closed loop: N workers, each taking
the next request when done): latency per request, time to first token, steady throughput,
error rate. Every shape is served once first (warm-up, not timed), so compile and first-call
costs stay out of the steady numbers."""
import concurrent.futures
import time
import traceback

import numpy

from . import devices, stopping
from .loading import generate


class _FirstToken:
    """A generate() streamer that notes when the first new token is on the host."""

    def __init__(self, device):
        self.device, self.calls, self.first_token_at = device, 0, None

    def put(self, value):
        self.calls += 1
        if self.calls == 2 and self.first_token_at is None:  # call 1 is the prompt
            devices.synchronize(self.device)
            self.first_token_at = time.perf_counter()

    def end(self):
        pass


def _serve_one(loaded, device, request, max_new_tokens, timeout_s):
    if stopping.requested():
        return {"label": request.label, "stopped": True}
    start = time.perf_counter()
    streamer = _FirstToken(device)
    try:
        tokens = generate(loaded, request.input_ids.to(device), max_new_tokens, streamer=streamer).cpu()
    except Exception as error:
        return {"label": request.label, "error": f"{type(error).__name__}: {error}",
                "traceback": traceback.format_exc(), "latency_s": time.perf_counter() - start}
    latency = time.perf_counter() - start
    result = {"label": request.label, "latency_s": latency, "tokens": int(tokens.numel()),
              "ttft_s": (streamer.first_token_at - start) if streamer.first_token_at else None}
    if latency > timeout_s:
        result["error"] = f"timeout: {latency:.1f} s > {timeout_s} s"
        result["timed_out"] = True
    return result


def _percentiles(values):
    if not values:
        return {"p50": None, "p95": None, "p99": None}
    p50, p95, p99 = numpy.percentile(numpy.array(values) * 1000, [50, 95, 99])
    return {"p50": float(p50), "p95": float(p95), "p99": float(p99)}


def serve(loaded, device, requests, serve_config, max_new_tokens):
    """{warmup, levels: [{concurrency, latency_ms, ttft_ms, tokens_per_s, ...}]}."""
    warmup = {}
    for request in {r.shape: r for r in requests}.values():  # every shape once
        stopping.check()
        result = _serve_one(loaded, device, request, max_new_tokens, serve_config.timeout_s)
        warmup[request.label] = result["latency_s"]
    queue = [requests[i % len(requests)] for i in range(serve_config.requests)]
    levels = []
    for concurrency in serve_config.concurrency:
        start = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
            results = list(pool.map(lambda r: _serve_one(loaded, device, r, max_new_tokens,
                                                         serve_config.timeout_s), queue))
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
    return {"warmup_s": warmup, "levels": levels, "timing": devices.timing_note(device)}
