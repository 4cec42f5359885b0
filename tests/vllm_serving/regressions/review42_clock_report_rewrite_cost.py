"""review42: the clock rewrites every request ever served after every step: a long-running server slows down.

Bug: with VLLM_NEURON_CLOCK_REPORT set, ServingClock.end() calls write() after every engine step, and
write() serializes (json, indent=1) the whole report: the summary (which sorts every request's
TTFT/TPOT/latency) plus one record per request served so far (`self.done` grows without bound). A
step's host time therefore grows linearly with the number of requests the server has finished:
measured here ~0.2 s per step after 20,000 requests (a 2.6 MB file rewritten each step), on the
stepping thread, before the next step can be scheduled. On a server that has been up for a day the
report write, not the model, sets the step rate (and the memory grows with every request).

Expected: the per-step cost of the report does not grow with the number of requests served: here
20 decode steps after 20,000 finished requests take under 1 s in all (a step without the report
takes a few ms).

Fix: write the file at most every N steps / T seconds (and at shutdown), keep bounded state for
the percentiles (a fixed-size reservoir or streaming quantiles, running sums for the means), and
keep per-request records only for the running ones (or a bounded recent window).
"""
import os
import sys
import tempfile
import time
import types

import torch
import torch_neuronx  # noqa: F401  (registers the neuron device)

from vllm_neuron_sim.clock import ServingClock

DEV = torch.device("neuron", 0)
S = types.SimpleNamespace
FINISHED, STEPS = 20000, 20


def step(clock, new=(), scheduled=(), finished=()):
    clock.begin(S(finished_req_ids=set(finished), total_num_scheduled_tokens=len(scheduled),
                  scheduled_new_reqs=[S(req_id=r, prompt_token_ids=[1, 2]) for r in new],
                  num_scheduled_tokens={r: 1 for r in scheduled}))
    torch.ones(4, device=DEV).sum().item()
    clock.end(S(req_ids=list(scheduled), sampled_token_ids=[[1] for _ in scheduled]))


def main():
    folder = tempfile.mkdtemp()
    clock = ServingClock(DEV, 0, path=os.path.join(folder, "clock.json"))
    batch = 64  # serve FINISHED requests, 64 at a time, 2 tokens each (the report off meanwhile)
    clock.path = None
    for start in range(0, FINISHED, batch):
        ids = [str(i) for i in range(start, min(start + batch, FINISHED))]
        step(clock, new=ids, scheduled=ids)
        step(clock, scheduled=ids)
        step(clock, finished=ids)  # a step that finishes them (no tokens)
    clock.path = os.path.join(folder, "clock.json")
    running = [f"r{i}" for i in range(8)]
    step(clock, new=running, scheduled=running)
    began = time.perf_counter()
    for _ in range(STEPS):
        step(clock, scheduled=running)
    took = time.perf_counter() - began
    print(f"{STEPS} decode steps after {len(clock.done)} finished requests: {took:.2f} s "
          f"({os.path.getsize(clock.path) / 1e6:.1f} MB report rewritten each step)")
    if took > 1.0:
        print("FAIL: the report's per-step cost grows with the number of requests served")
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
