"""Review 9, finding 2. A future callback that runs another collective and waits for its future (what PowerSGD's
DDP comm hook does: `dist.all_reduce(t, async_op=True).get_future().wait()` inside `.then()`).
NeuronWork completes its future on the Gloo group's one worker thread (options._threads = 1),
so the callback blocks that thread waiting for a collective queued behind it: a deadlock with
no timeout. The same code on the CPU group (Gloo) finishes. DEV=cpu runs the control.
Exits 1 while the bug exists."""
import os, sys; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _two_ranks_spawned import run

def fn(rank):
    import torch, torch.distributed as dist, threading
    dev = os.environ.get("DEV", "neuron")
    a = torch.ones(4, device=dev)
    b = torch.full((4,), float(rank + 1), device=dev)
    work = dist.all_reduce(a, async_op=True)
    chained = work.get_future().then(
        lambda fut: dist.all_reduce(b, async_op=True).get_future().wait()[0])
    result = {}
    waiter = threading.Thread(target=lambda: result.setdefault("v", chained.wait()), daemon=True)
    waiter.start()
    waiter.join(timeout=25)  # group timeout is 10 s
    assert "v" in result, f"{dev}: the chained future did not complete within 25 s (group timeout 10 s): deadlock"
    return result["v"].cpu().tolist()

if __name__ == "__main__":
    run(fn, timeout=50, env={"PG_TIMEOUT": "10", "DEV": os.environ.get("DEV", "neuron")})
