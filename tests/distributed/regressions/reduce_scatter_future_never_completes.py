"""Review 9, finding 1. The future of an asynchronous reduce_scatter_tensor (and reduce_scatter, send, recv) only
completes if someone calls work.wait(); get_future().wait() alone blocks forever, with no
timeout. (Gloo on CPU raises 'Work::getFuture not implemented' instead of handing out a
future that never completes.) Exits 1 while the bug exists."""
import os, sys; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _two_ranks_spawned import run

def fn(rank):
    import torch, torch.distributed as dist, threading
    N = torch.device("neuron")
    out = torch.zeros(2, device=N)
    work = dist.reduce_scatter_tensor(out, torch.arange(4., device=N) + rank, async_op=True)
    fut = work.get_future()
    waiter = threading.Thread(target=fut.wait, daemon=True)
    waiter.start()
    waiter.join(timeout=20)   # the group's timeout is 15 s: any correct future has ended by now
    stuck = waiter.is_alive()
    work.wait()               # unblocks it (Note [ProcessGroupNeuron]: completes in wait())
    assert not stuck, ("get_future().wait() of reduce_scatter_tensor still blocked after 20 s "
                       f"(group timeout 15 s); the collective itself had finished: out={out.cpu().tolist()}")
    return out.cpu().tolist()

if __name__ == "__main__":
    run(fn, timeout=60, env={"PG_TIMEOUT": "15"})
