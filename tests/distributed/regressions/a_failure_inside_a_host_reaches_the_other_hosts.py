"""Review 11, finding 2 (fixed: a failed leader drops its connections to the other leaders). Hosts A={0,1}, B={2,3} (hierarchical world group), group timeout 12 s. After a warm-up
allreduce, rank 3 (B's non-leader) dies (os._exit). Ranks 0, 1, 2 call allreduce.
Leader 2 notices its dead local peer at once (shared memory checks pids) and fails, but it never
reaches the leaders' Gloo step, so leader 0 waits there for the whole timeout, and rank 1 waits for
its leader: host A's ranks fail only at the 12 s timeout. With flat Gloo over the 4 ranks (SHM=0 /
no hierarchy) the death closes rank 3's connections and every rank fails at once; with shared
memory on one host (the Note: 'a rank whose process has exited is noticed within ~50 ms')
too. Usage: python r1_... [hier|flat]"""
import os, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _ranks_on_fake_hosts import main as run

MODE = sys.argv[1] if len(sys.argv) > 1 else "hier"


def body(rank, world):
    import torch, torch.distributed as dist
    t = torch.ones(1000, device="neuron")
    dist.all_reduce(t)
    dist.barrier()
    if rank == 3:
        time.sleep(0.5)
        os._exit(1)
    time.sleep(1.5)  # rank 3 is dead now
    start = time.time()
    try:
        dist.all_reduce(t)
        return "no error?"
    except Exception as e:
        took = time.time() - start
        msg = str(e).splitlines()[0][:230]
        if took > 5:
            raise AssertionError(f"failed only after {took:.1f} s (timeout 12 s): {msg}")
        return f"failed after {took:.2f} s: {msg}"


if __name__ == "__main__":
    env = {"NEURON_SIM_SHM_COLLECTIVES": "0"} if MODE == "flat" else {}
    env.update(LINGER="20", DIES="3")
    run(body, [0, 0, 1, 1], timeout=60, pg_timeout=12, env=env)
