"""neuron-migrate speed: latency percentiles, time to first token and error rate per
concurrency level, with timeouts counted as errors."""
import time

import torch

from neuron_migrate import speed
from neuron_migrate.loading import LoadedModel, Request
from neuron_migrate.workload import Serve


class SlowOnBatchTwo(torch.nn.Module):
    """Answers a batch of two only after a second."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(16, 16)

    def forward(self, input_ids):
        if input_ids.shape[0] == 2:
            time.sleep(1.0)
        return self.embed(input_ids)


def test_requests_past_the_timeout_count_as_errors_and_stay_in_the_latency():
    # no timing is asserted, only what the sleep guarantees: a batch of two takes >= 1 s > timeout_s
    loaded = LoadedModel(SlowOnBatchTwo().eval(), None, None, False)
    requests = [Request(torch.zeros(1, 4, dtype=torch.long), "b1xL4"),
                Request(torch.zeros(2, 4, dtype=torch.long), "b2xL4")]
    result = speed.serve(loaded, "cpu", requests, Serve(requests=4, concurrency=[1], timeout_s=0.5), max_new_tokens=1)
    level = result["levels"][0]
    assert level["requests"] == 4 and level["timeouts"] >= 2 and level["error_rate"] >= 0.5
    assert all("timeout" in e["error"] for e in level["errors"])
    assert len(level["latencies_ms"]) == 4  # the late answers are latencies too
    assert level["latency_ms"]["p95"] >= 1000  # was the P95 of the fast requests only
