"""Review 9b, finding 6: asynchronous collectives of two groups, issued by the ranks in
different orders. Issuing a collective waits for the current stream; it used to hold a task
waiting for every collective issued before on it, of any group, so each rank's second call
waited for its first, which waited for the peer's second call, until the timeout. Now the
group's communication stream waits, and the current stream only in wait() and for the future's
users (Note [Stream-ordered collectives]), as ProcessGroupNCCL. Async mode (in launch-blocking
mode every call ends before it returns, as NCCL's under CUDA_LAUNCH_BLOCKING=1).
Rank 0: all_reduce(x, g1, async), all_reduce(y, g2, async); rank 1 the same with g2 first.
Then a future's users still see the result: then() and the future's wait() on a collective
whose result is read on the device right after, without Work.wait().
Expected: both finish at once with the sums. Bug: both time out (groups' timeout 8 s)."""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _two_ranks_spawned import run


def body(rank):
    import datetime
    import torch, torch.distributed as dist
    g1 = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=8))
    g2 = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=8))
    x = torch.ones(4, device="neuron")
    y = torch.ones(4, device="neuron")
    order = [(x, g1), (y, g2)] if rank == 0 else [(y, g2), (x, g1)]
    works = [dist.all_reduce(t, group=g, async_op=True) for t, g in order]
    for w in works:
        w.wait()
    assert x.tolist() == [2.0] * 4 and y.tolist() == [2.0] * 4, (x, y)
    # The future's users are ordered after the collective through its events.
    big = torch.full((1 << 20,), float(rank + 1), device="neuron")
    chained = dist.all_reduce(big, group=g1, async_op=True).get_future().then(lambda f: f.value()[0] * 2)
    doubled = chained.wait()[0] if isinstance(chained.wait(), list) else chained.wait()
    assert doubled.device.type == "neuron" and doubled.min().item() == doubled.max().item() == 6.0, doubled
    z = torch.full((1 << 20,), float(rank + 1), device="neuron")
    future = dist.all_reduce(z, group=g2, async_op=True).get_future()
    result = future.wait()[0]
    total = (result + 0).sum().item()  # a device op on the result, then a read
    assert total == 3.0 * (1 << 20), total
    return "ok"


if __name__ == "__main__":
    run(body, timeout=60, env={"PG_TIMEOUT": "8", "OMP_NUM_THREADS": "1", "NEURON_LAUNCH_BLOCKING": "0"})
