"""Review 10, finding 4 (fixed: one releaser thread per process). A transport thread hands the
last references of a finished collective (Python-owned tensors: dropping them takes the GIL) to
another thread (Note [Releasing a Work off the transport's threads]). They went to the
completion threads, which start a new thread whenever all are busy: while the GIL was held for
long, every finished collective blocked one more thread. Here 60 asynchronous allreduces of
tensors only the Work holds finish while the main thread keeps the GIL (a pure-Python loop with a
long switch interval). Expected: a thread or two more than before. Bug: one more per collective."""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _two_ranks_spawned import run


def threads():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("Threads:"))


def body(rank):
    import time
    import torch, torch.distributed as dist
    x = torch.ones(16, device="neuron")
    dist.all_reduce(x)  # the group's threads exist from here on
    dist.barrier()
    time.sleep(0.5)
    before = threads()
    for _ in range(60):
        dist.all_reduce(torch.ones(4096, device="neuron"), async_op=True)  # tensor and Work dropped
    sys.setswitchinterval(30.0)  # keep the GIL: a waiting thread gets it only after the loop
    end = time.monotonic() + 2.0
    while time.monotonic() < end:
        pass
    sys.setswitchinterval(0.005)
    during = threads()
    torch.neuron.synchronize()
    dist.barrier()
    assert during - before <= 4, f"{during - before} more threads after 60 collectives ended with the GIL held"
    return f"{during - before} more threads"


if __name__ == "__main__":
    run(body, timeout=60, env={"PG_TIMEOUT": "20", "OMP_NUM_THREADS": "1", "NEURON_LAUNCH_BLOCKING": "0"})
