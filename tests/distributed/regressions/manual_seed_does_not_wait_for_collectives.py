"""Review 10, finding 3 (fixed: the drain skips the communication streams). torch.manual_seed (NeuronGeneratorImpl drain -> Runtime::synchronize(device)) waits for
every stream of the device, the groups' communication streams included, so it blocks (GIL held)
until every pending asynchronous collective of every group has completed. Note [Stream-ordered
collectives] says ranks may now issue the asynchronous collectives of different groups in
different orders; with a manual_seed in between (PowerSGD's hook calls it) they deadlock.
Rank 0: all_reduce(x, gA, async); torch.manual_seed(0); barrier(gB); wait gA.
Rank 1: barrier(gB); all_reduce(x, gA).
Expected: done at once (CUDA's manual_seed does not wait for NCCL). Bug: hang until the 8 s
timeout, then errors (exit 1)."""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _two_ranks_spawned import run


def body(rank):
    import datetime, time
    import torch, torch.distributed as dist
    gA = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=8))
    gB = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=8))
    x = torch.ones(4, device="neuron")
    dist.barrier(group=gA); dist.barrier(group=gB)
    start = time.time()
    if rank == 0:
        wa = dist.all_reduce(x, group=gA, async_op=True)
        torch.manual_seed(0)
        dist.barrier(group=gB)
        wa.wait()
    else:
        dist.barrier(group=gB)
        dist.all_reduce(x, group=gA)
    elapsed = time.time() - start
    assert x.tolist() == [2.0] * 4, x
    assert elapsed < 4, f"took {elapsed:.1f} s"
    return "ok %.2f s" % elapsed


if __name__ == "__main__":
    run(body, timeout=60, env={"PG_TIMEOUT": "8", "OMP_NUM_THREADS": "1", "NEURON_LAUNCH_BLOCKING": "0"})
