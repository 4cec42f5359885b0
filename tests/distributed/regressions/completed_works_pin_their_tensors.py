"""Review 9b. Memory lifetime: a completed collective's tensors stay allocated after the caller drops
them (and the Work). ProcessGroupNeuron::track() keeps a weak_intrusive_ptr to every Work in
in_flight_ (pruned only once 64 are listed); c10::intrusive_ptr destroys an object (its
outputs_, value_, future_) only when the weak count also reaches 0, so each of the last up to
64 Works keeps its output tensors alive.
Expected: memory_allocated() back to the baseline after 20 all_reduces of fresh 4 MiB tensors
that were deleted. Bug: about 20 x 4 MiB still allocated (exit 1)."""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _two_ranks_spawned import run

def body(rank):
    import gc, torch, torch.distributed as dist
    dist.all_reduce(torch.ones(1, device="neuron"))
    gc.collect()
    base = torch.neuron.memory_allocated()
    for i in range(20):
        t = torch.ones(1 << 20, device="neuron")  # 4 MiB
        dist.all_reduce(t)
        assert float(t[0]) == 2.0
        del t
    # The transport hands a finished Work's last reference to a completion thread (Note
    # [Releasing a Work off the transport's threads]): its tensors go a moment later.
    import time
    deadline = time.monotonic() + 5
    while True:
        gc.collect()
        held = torch.neuron.memory_allocated() - base
        if held < (4 << 20) or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    print(f"rank {rank}: {held / 2**20:.0f} MiB still allocated after the tensors were dropped", flush=True)
    assert held < (4 << 20), f"{held / 2**20:.0f} MiB of dropped tensors still allocated"
    return "ok"

if __name__ == "__main__":
    run(body, timeout=60, env={"OMP_NUM_THREADS": "1", "NEURON_SIM_SHM_COLLECTIVES": os.environ.get("SHM", "1")})
