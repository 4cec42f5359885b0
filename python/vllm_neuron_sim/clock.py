"""The device clock under a live vLLM service: each engine step costed on the device's timeline.

Note [A served load on the device clock]
Each step the engine runs (a batch's prefill chunks and decodes, then sampling) is the work issued
to the core between two readings of torch_neuronx.device_time(): its predicted Trainium time. The
steps run one after another, so the served load's predicted timeline is their sum (host time
between steps, the simulator's own speed, is left out: on Trainium the host keeps up, Note
[Serving under load] in dry_run.py assumes the same). A request's times on that timeline:
- it starts at the start of the first step that schedules it (time spent waiting in the
  scheduler's queue before that is not counted: it depends on the host's speed here);
- its first token comes at the end of the step that finishes its prompt (chunked prefill: the
  last chunk), each later token at the end of the step that samples it;
TTFT = first token - start, TPOT = (last - first token) / (tokens - 1), latency = last - start;
output tokens/s = all tokens sampled / the timeline's length. Rank 0 of a TP group writes the
figures (its steps include the TP collectives, costed on the device clock) to the JSON file named
by VLLM_NEURON_CLOCK_REPORT, again after each step (requests still running: their tokens so
far), and logs them
every VLLM_NEURON_CLOCK_LOG_STEPS steps (default 0: never).
Of each step's time, the part in the model's forward (its compiled programs, or its eager ops
under --enforce-eager) is reported apart ("model_ms", "model_step_ms" over the latest
RECENT_STEPS steps): it is what the dry run's compiled forward predicts for the same batch; the
rest is vLLM's own per-step work around the model (inputs, logits, sampling), eager launches here.
"""
import bisect
import collections
import json
import os
import tempfile
import warnings

import torch


RECENT = 256  # finished requests listed in the report (its summary counts them all)
RECENT_STEPS = 1024  # steps whose model time the report's percentiles are of


def _percentiles(values):  # of sorted values
    if not values:
        return {"p50": None, "p95": None}
    ordered = values

    def at(q):  # nearest rank
        return ordered[min(len(ordered) - 1, max(0, int(-(-q * len(ordered) // 1)) - 1))]
    return {"p50": at(0.5), "p95": at(0.95)}


class ServingClock:
    def __init__(self, device, rank, path=None):
        import torch_neuronx
        self.device, self.rank = device, rank
        self.read = lambda: torch_neuronx.device_time(device)
        self.path = path if path is not None else os.environ.get("VLLM_NEURON_CLOCK_REPORT")
        self.log_every = int(os.environ.get("VLLM_NEURON_CLOCK_LOG_STEPS", "0") or 0)
        self.now = 0.0  # ms on the served load's timeline
        self.steps = 0
        self.tokens = 0
        self.running = {}  # request id -> {start, first, last, tokens, prompt}
        self.done = []  # the latest RECENT finished requests' figures (the report lists them)
        self.finished = 0
        self.sorted = {"ttft_ms": [], "tpot_ms": [], "latency_ms": []}  # every finished request's, sorted
        self._began = None
        self.model_ms = 0.0  # of the timeline, in the model's forward
        self.model_steps = collections.deque(maxlen=RECENT_STEPS)  # the latest steps' forward ms
        self._step_model_ms = 0.0
        if self.path and rank == 0:
            folder = os.path.dirname(os.path.abspath(self.path))
            if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
                raise ValueError(f"VLLM_NEURON_CLOCK_REPORT={self.path}: its folder {folder} is not a writable "
                                 "folder; give a file path in one")

    def begin(self, scheduler_output):
        for request in scheduler_output.finished_req_ids:
            self._finish(request)
        if scheduler_output.total_num_scheduled_tokens == 0:
            self._began = None
            return
        for new in scheduler_output.scheduled_new_reqs:
            self.running.setdefault(new.req_id, {"start": self.now, "first": None, "last": None, "tokens": 0,
                                                 "prompt": len(new.prompt_token_ids or [])})
        for request in scheduler_output.num_scheduled_tokens:
            self.running.setdefault(request, {"start": self.now, "first": None, "last": None, "tokens": 0,
                                              "prompt": None})
        self._began = self.read()
        self._step_model_ms = 0.0

    def model_forward(self, started_ms):
        """The model's forward of this step ran from `started_ms` (a reading) to now."""
        if self._began is not None:
            self._step_model_ms += self.read() - started_ms

    def end(self, output):
        if self._began is None or output is None or not hasattr(output, "sampled_token_ids"):
            return
        self.now += self.read() - self._began
        self._began = None
        self.steps += 1
        self.model_ms += self._step_model_ms
        self.model_steps.append(self._step_model_ms)
        for request, sampled in zip(output.req_ids, output.sampled_token_ids):
            record = self.running.get(request)
            if record is None or not sampled:
                continue  # a prompt chunk before the last: no token yet
            record["first"] = self.now if record["first"] is None else record["first"]
            record["last"] = self.now
            record["tokens"] += len(sampled)
            self.tokens += len(sampled)
        self.write()
        if self.log_every and self.steps % self.log_every == 0:
            from vllm.logger import init_logger
            summary = self.summary()
            init_logger(__name__).info(
                "device clock (predicted %s): %d steps, %.1f ms, %.1f output tokens/s, TTFT P50 %s ms, TPOT P50 %s ms",
                summary["device"], self.steps, self.now, summary["tokens_per_s"] or 0.0,
                summary["ttft_ms"]["p50"], summary["tpot_ms"]["p50"])

    def _finish(self, request):
        record = self.running.pop(request, None)
        if record is None or record["first"] is None:
            return
        figures = self._figures(request, record)
        self.finished += 1
        self.done = (self.done + [figures])[-RECENT:]
        for name, values in self.sorted.items():
            if figures[name] is not None:
                bisect.insort(values, figures[name])

    @staticmethod
    def _figures(request, record):
        return {"id": request, "prompt_tokens": record["prompt"], "output_tokens": record["tokens"],
                "ttft_ms": record["first"] - record["start"],
                "tpot_ms": (record["last"] - record["first"]) / (record["tokens"] - 1) if record["tokens"] > 1 else None,
                "latency_ms": record["last"] - record["start"]}

    def in_flight(self):
        """The figures of the requests with tokens so far (the engine says a request finished at
        its next step, which the last requests of a load never see)."""
        return [self._figures(r, record) for r, record in self.running.items() if record["first"] is not None]


    def _percentiles(self, name, in_flight):
        values = list(self.sorted[name])
        for figures in in_flight:
            if figures[name] is not None:
                bisect.insort(values, figures[name])
        return _percentiles(values)

    def summary(self, in_flight=None):
        in_flight = self.in_flight() if in_flight is None else in_flight
        props = torch.neuron.get_device_properties(self.device)
        device = f"{getattr(props, 'platform', 'neuron')} LNC {getattr(props, 'logical_nc_config', '?')}"
        return {"predicted": True, "device": device, "steps": self.steps,
                "timeline_ms": self.now, "output_tokens": self.tokens,
                "tokens_per_s": self.tokens / self.now * 1000 if self.now > 0 else None,
                "requests": self.finished + len(in_flight),
                "ttft_ms": self._percentiles("ttft_ms", in_flight),
                "tpot_ms": self._percentiles("tpot_ms", in_flight),
                "latency_ms": self._percentiles("latency_ms", in_flight),
                "model_ms": self.model_ms, "model_step_ms": _percentiles(sorted(self.model_steps))}

    def write(self):
        if not self.path or self.rank != 0:
            return
        in_flight = self.in_flight()
        # the latest finished requests' figures (at most RECENT) and those in flight
        report = {"summary": self.summary(in_flight), "requests": self.done + in_flight,
                  "source": "the device clock of torch-neuron-sim, each vLLM engine step's device work "
                            "(vllm_neuron_sim/clock.py, Note [A served load on the device clock])"}
        folder = os.path.dirname(os.path.abspath(self.path))
        name = None
        try:
            with tempfile.NamedTemporaryFile("w", dir=folder, delete=False, suffix=".tmp") as handle:
                name = handle.name
                json.dump(report, handle, indent=1)
            os.replace(name, self.path)  # readers never see half a file
        except OSError as error:  # the report is not worth the service: warn once, serve on
            if name is not None and os.path.exists(name):
                os.unlink(name)
            if not getattr(self, "_warned", False):
                self._warned = True
                warnings.warn(f"VLLM_NEURON_CLOCK_REPORT={self.path}: cannot write the device clock's report "
                              f"({error}); serving goes on without it")
