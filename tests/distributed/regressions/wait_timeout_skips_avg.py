"""Review 9, finding 3. work.wait(timeout) that expires: the Work fails, but the Gloo op still runs and writes the SUM
into the output; the AVG division (a finish step) is skipped, so once the peer arrives the
tensor silently holds the SUM (2+4=6), neither the input (2) nor the average (3).
Exits 1 while the bug exists."""
import os, sys, datetime, time; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _two_ranks_spawned import run

def fn(rank):
    import torch, torch.distributed as dist
    N = torch.device("neuron")
    t = torch.full((4,), 2.0 * (rank + 1), device=N)
    if rank == 1:
        time.sleep(3)
    w = dist.all_reduce(t, op=dist.ReduceOp.AVG, async_op=True)
    try:
        w.wait(timeout=datetime.timedelta(seconds=1))
        timed_out = False
    except Exception:
        timed_out = True
    dist.barrier()  # the peer has arrived; the Gloo allreduce has run
    v = t.cpu().tolist()
    if timed_out:
        assert v[0] in (2.0, 3.0), f"rank {rank}: wait(1 s) failed, yet the tensor now holds {v} (the SUM: AVG's division skipped)"
    else:
        assert v[0] == 3.0, v
    return (timed_out, v)

if __name__ == "__main__":
    run(fn, timeout=50, env={"PG_TIMEOUT": "15"})
