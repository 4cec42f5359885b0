"""Review 9b. A rank of a failed shared-memory group still advances its progress counter on every later
call (step() publishes the new step before it looks at the failed flag, and each later call
fails only after that). A late peer then passes every step without waiting and uses the
pointers the failed rank published for a different, later call.
Rank 1: group timeout 2 s; all_gather_into_tensor times out (rank 0 is 4 s late); then three
more all_reduce calls, each failing at once ("the group failed"): its counter moves ahead.
Rank 0: group timeout 20 s; calls the all_gather 4 s late.
Expected: rank 0's all_gather raises (the group failed). Bug: rank 0 takes the zero-copy path
with rank 1's pointers of a later all_reduce (b = null) and writes at a wild address: it
dies with SIGSEGV (exit 1). (Without zero-copy, rank 0 instead reads slots of later calls.)"""
import os, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _two_ranks_spawned import run

N = 1 << 16

def body(rank):
    import torch, torch.distributed as dist
    from torch_neuron_sim import _C
    backend = dist.group.WORLD._get_backend(torch.device("neuron"))
    dist.all_reduce(torch.ones(1, device="neuron"))
    assert _C._process_group_zero_copy(backend) >= 0, "zero-copy not set up"
    inp = torch.full((N,), float(rank + 1), device="neuron")
    out = torch.zeros(2 * N, device="neuron")
    if rank == 0:
        time.sleep(4)
        try:
            dist.all_gather_into_tensor(out, inp)
        except Exception as e:
            print("rank 0 (late) got the expected error:", str(e).splitlines()[0][:150], flush=True)
            return "ok"
        raise AssertionError("rank 0's all_gather on a failed group returned without an error")
    try:
        dist.all_gather_into_tensor(out, inp)
    except Exception as e:
        print("rank 1 failed as expected:", str(e).splitlines()[0][:110], flush=True)
    small = torch.ones(1, device="neuron")
    for _ in range(3):
        try:
            dist.all_reduce(small)
        except Exception as e:
            print("rank 1 later call failed:", str(e).splitlines()[0][-80:], flush=True)
    time.sleep(8)
    return "ok"

if __name__ == "__main__":
    run(body, timeout=40, env={"NEURON_SIM_SHARED_MEMORY": "1", "PG_TIMEOUT_1": "2", "PG_TIMEOUT_0": "20",
                               "OMP_NUM_THREADS": "1"})
