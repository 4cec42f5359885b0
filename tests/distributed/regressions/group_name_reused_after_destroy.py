"""Review 11, finding 3 (fixed: the store prefix counts sessions, distributed.py `_session`).
Group-name reuse after destroy_process_group (distributed.py's former `_made`): the store prefix was
neuron/<group name>/<how many times THIS process made that name>/. new_group() names groups
from a counter every rank advances, members or not, and destroy_process_group() resets it. So a
name first used for a group a rank was not in is later reused for a group it is in: the members'
counts differ and they rendezvous under different prefixes (Gloo transport, host/<rank> keys,
leaders/, shm/...). Session 1: new_group([0]) (name "1", made on rank 0 only). Session 2, after
destroy + init: new_group([0, 1]) (name "1" again): rank 0 uses neuron/1/2/, rank 1
neuron/1/1/. Expected: the group works. Bug: its creation / first collective hangs until the
store timeout. (Pre-existing in `_made`, not introduced by 92548b0; the hierarchical keys
inherit it.)"""
import os, sys, time, datetime
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _ranks_on_fake_hosts import main as run


def body(rank, world):
    import torch, torch.distributed as dist
    import torch_neuron_sim.distributed as nd
    store = dist.distributed_c10d._get_default_store()
    solo = dist.new_group([0])
    if rank == 0:
        t = torch.ones(2, device="neuron")
        dist.all_reduce(t, group=solo)  # make sure its backend exists on rank 0
    dist.barrier()
    print(f"rank {rank}: session 1 done, generations session {nd._session}", flush=True)
    dist.destroy_process_group()
    dist.init_process_group("neuron", store=store, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=8))
    print(f"rank {rank}: session 2 initialized, generations session {nd._session}", flush=True)
    start = time.time()
    try:
        pair = dist.new_group([0, 1])
        t = torch.ones(2, device="neuron")
        dist.all_reduce(t, group=pair)
    except Exception as e:
        raise AssertionError(f"after {time.time() - start:.1f} s, generations session {nd._session}: {str(e).splitlines()[0][:200]}")
    return f"ok, generations session {nd._session}"


if __name__ == "__main__":
    run(body, [0, 0], timeout=60, pg_timeout=8)
