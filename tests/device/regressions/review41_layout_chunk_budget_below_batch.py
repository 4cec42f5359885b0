"""Chunked prefill with a step budget below the batch (chunk_tokens < concurrency / max_num_seqs):
_serve_requests only prefills while `chunk_tokens - len(running) > 0`, so the batch silently never
grows past the budget: serve(concurrency=(8,), chunked_prefill=4) reports a level labelled
concurrency 8 whose decode steps never run more than 4 sequences (buckets 1, 2, 4 only), its
figures those of concurrency 4 with longer queueing. vLLM refuses this configuration
(SchedulerConfig: "max_num_batched_tokens (4) must be greater than or equal to max_num_seqs (8)");
the dry run should refuse it too (ValueError) rather than answer for another batch."""
import sys

import torch_neuronx  # noqa: F401
from torch_neuron_sim import dry_run

used = set()


class Steps(dict):
    def __getitem__(self, bucket):
        used.add(bucket)
        return dict.__getitem__(self, bucket)


try:
    level = dry_run.simulate(None, Steps({b: 1.0 for b in dry_run.batch_buckets(8)}), None, 8, 2,
                             lengths=[(16, 20)], chunk_tokens=4, chunk_ms=lambda tokens: 0.1 * tokens)
except ValueError as error:
    print("refused:", error)
    sys.exit(0)
print(f"level concurrency {level.concurrency}, decode step buckets used {sorted(used)}")
print("FAIL a chunk budget below the batch is accepted and caps the batch at the budget")
sys.exit(1)
