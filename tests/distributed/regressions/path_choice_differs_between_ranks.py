"""Review 9b. Which transport a collective takes is decided from rank-local facts (contiguity): ranks
whose tensors have the same shape and dtype but different layouts take different transports
(one waits in shared memory, the other in Gloo) and both hang until the group timeout.
Rank 0 passes a non-contiguous view, rank 1 a contiguous tensor of the same shape
(WHAT=broadcast: rank 0 broadcasts a column slice; WHAT=all_reduce: a transposed view).
With NEURON_SIM_SHM_COLLECTIVES=0 (Gloo only) the call returns at once, as with CPU tensors
on Gloo (whose result for a non-contiguous tensor is its raw memory: NCCL raises instead).
Expected: the call returns or raises at once. Bug: both ranks time out after the group
timeout (8 s here, 30 min by default) (exit 1)."""
import os, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _two_ranks_spawned import run

def body(rank):
    import torch, torch.distributed as dist
    what = os.environ.get("WHAT", "broadcast")
    start = time.time()
    try:
        if what == "broadcast":
            t = torch.arange(32.0, device="neuron").view(4, 8)[:, :4] if rank == 0 else torch.zeros(4, 4, device="neuron")
            dist.broadcast(t, 0)
        else:
            base = torch.arange(16.0, device="neuron").view(4, 4)
            t = base.t() if rank == 0 else base.t().contiguous()
            dist.all_reduce(t)
        t.cpu()
    except Exception as e:
        took = time.time() - start
        assert took < 4, f"{what} failed after {took:.1f} s: {str(e).splitlines()[0][:200]}"
        return f"raised at once: {e}"
    return f"returned after {time.time() - start:.1f} s"

if __name__ == "__main__":
    run(body, timeout=40, env={"PG_TIMEOUT": "8", "OMP_NUM_THREADS": "1", "WHAT": os.environ.get("WHAT", "broadcast"),
                               "NEURON_SIM_SHM_COLLECTIVES": os.environ.get("SHM", "1")})
