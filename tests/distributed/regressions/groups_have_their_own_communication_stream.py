"""Review 10, finding 2 (fixed: groups get their own streams, apart from the pool). ProcessGroupNeuron::comm_stream took one of the device's 8 pool streams
(next_pool_stream, round robin, shared with every other pool user: Future callbacks,
torch.neuron.Stream(), other groups). With 9 groups, groups 0 and 8 share a communication stream, so
a future of one group is ordered behind a pending collective of the other: a legal program (one
order per group) deadlocks until the timeout. ProcessGroupNCCL makes a dedicated stream per group.
Rank 0: all_reduce(x, gA, async); all_reduce(y, gB, async).get_future().wait(); read the result;
        barrier(gB); wait gA.
Rank 1: all_reduce(y, gB, async).get_future().wait(); read; barrier(gB); all_reduce(x, gA).
Expected: done in < 1 s. Bug: rank 0's read waits for gA (same stream), which rank 1 issues only
after barrier(gB): hang until the 8 s timeout, then errors (exit 1)."""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _two_ranks_spawned import run


def body(rank):
    import datetime, os, time
    import torch, torch.distributed as dist
    groups = [dist.new_group([0, 1], timeout=datetime.timedelta(seconds=8)) for _ in range(9)]
    t = torch.ones(1, device="neuron")
    for g in groups:  # each group takes its communication stream at its first collective, in this order
        dist.all_reduce(t, group=g)
    gA, gB = groups[0], groups[int(os.environ.get("R3_OTHER", "8"))]  # 9 groups, 8 pool streams: 0 and 8 share one (R3_OTHER=1: control, distinct streams)
    x = torch.ones(4, device="neuron")
    y = torch.ones(4, device="neuron")
    start = time.time()
    if rank == 0:
        wa = dist.all_reduce(x, group=gA, async_op=True)
        result = dist.all_reduce(y, group=gB, async_op=True).get_future().wait()[0]
        total = result.sum().item()
        dist.barrier(group=gB)
        wa.wait()
    else:
        result = dist.all_reduce(y, group=gB, async_op=True).get_future().wait()[0]
        total = result.sum().item()
        dist.barrier(group=gB)
        dist.all_reduce(x, group=gA)
    elapsed = time.time() - start
    assert total == 8.0 and x.tolist() == [2.0] * 4, (total, x)
    assert elapsed < 4, f"took {elapsed:.1f} s: a group's future waited for another group's collective"
    return "ok %.2f s" % elapsed


if __name__ == "__main__":
    run(body, timeout=60, env={"PG_TIMEOUT": "8", "OMP_NUM_THREADS": "1", "NEURON_LAUNCH_BLOCKING": "0", "R3_OTHER": os.environ.get("R3_OTHER", "8")})
