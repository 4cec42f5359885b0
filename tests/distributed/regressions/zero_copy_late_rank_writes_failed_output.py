"""Review 9b. Zero-copy: a late rank passes the agreement step of a collective that already failed on
its peer (step() only checks the failed flag while it has to wait, and the peer's counter is
already there), then writes into the peer's output, which the peer got back with an error.
Rank 1: group timeout 2 s; its all_gather_into_tensor times out (rank 0 is 4 s late); it then
zeroes the output it got back and leaves it alone.
Rank 0: group timeout 20 s; calls the same all_gather 4 s late.
Expected: rank 1's output stays zero. Bug: it receives rank 0's input after the failure
(exit 1). (Once rank 1 has freed the output, this is a write into whatever reuses it.)"""
import os, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _two_ranks_spawned import run

N = 1 << 16

def body(rank):
    import torch, torch.distributed as dist
    from torch_neuron_sim import _C
    backend = dist.group.WORLD._get_backend(torch.device("neuron"))
    dist.all_reduce(torch.ones(1, device="neuron"))
    zc0 = _C._process_group_zero_copy(backend)
    assert zc0 >= 0, f"zero-copy not set up ({zc0})"
    inp = torch.full((N,), float(rank + 1), device="neuron")
    out = torch.zeros(2 * N, device="neuron")
    if rank == 0:
        time.sleep(4)
        try:
            dist.all_gather_into_tensor(out, inp)
        except Exception as e:
            print("rank 0 (late) got:", str(e).splitlines()[0][:170], flush=True)
        print("rank 0 zero-copy calls:", _C._process_group_zero_copy(backend) - zc0, flush=True)
        return "done"
    try:
        dist.all_gather_into_tensor(out, inp)
    except Exception as e:
        print("rank 1 failed as expected:", str(e).splitlines()[0][:120], flush=True)
    else:
        raise AssertionError("rank 1 expected a timeout")
    out.zero_()
    time.sleep(5)
    changed = int((out.cpu() != 0).sum())
    assert changed == 0, f"{changed} elements of rank 1's output were written by rank 0 after rank 1's " \
                         f"collective had failed and returned"
    return "ok"

if __name__ == "__main__":
    run(body, timeout=40, env={"NEURON_SIM_SHARED_MEMORY": "1", "PG_TIMEOUT_1": "2", "PG_TIMEOUT_0": "20",
                               "OMP_NUM_THREADS": "1"})
