"""Review 9b. A shared-memory collective waits for the group's last Gloo work, point-to-point included
(Call::start() notes send/recv works too; the comm thread's wait_transport_works() waits for
them). A receive posted before a collective then blocks that collective until the peer sends,
and the peer sends only after the collective: rank 0's all_reduce stalls until the receive
times out (the group timeout: 30 min by default; 8 s here), then the receive fails.
Rank 0: r = irecv(x, 1); all_reduce(y); r.wait().   Rank 1: all_reduce(y); send(x, 0).
With NEURON_SIM_SHM_COLLECTIVES=0 (Gloo only) this runs (as with NCCL, whose p2p ops use
their own communicators and streams). Bug: with shared memory rank 0's recv fails with a timeout after 8 s (exit 1)."""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _two_ranks_spawned import run

def body(rank):
    import torch, torch.distributed as dist
    x = torch.full((4,), float(rank), device="neuron")
    y = torch.ones(4, device="neuron")
    if rank == 0:
        r = dist.irecv(x, 1)
        dist.all_reduce(y)
        r.wait()
        assert x.tolist() == [1.0] * 4
    else:
        dist.all_reduce(y)
        dist.send(x, 0)
    assert y.tolist() == [2.0] * 4
    return "ok"

if __name__ == "__main__":
    run(body, timeout=40, env={"PG_TIMEOUT": "8", "OMP_NUM_THREADS": "1",
                               "NEURON_SIM_SHM_COLLECTIVES": os.environ.get("SHM", "1")})
