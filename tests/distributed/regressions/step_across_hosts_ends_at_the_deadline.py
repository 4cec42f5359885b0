"""Review 11, finding 4 (fixed: the Gloo step gets the time left when it starts). The leaders' Gloo step gets `left`, the time to the Work's deadline measured when the task
STARTS (run_hierarchical), not when the Gloo step starts after the local step. Hosts A={0,1},
B={2,3}, timeout 8 s. Rank 1 calls the allreduce 5 s late (so leader 0's local step ends at
~5 s); rank 3 never calls (alive). Leader 0's Work gives up at its deadline (~8.5 s), but its
communication thread stays in the leaders' Gloo allreduce with an 8 s timeout started at ~5 s,
until ~13 s: destroy_process_group() (which joins that thread) then blocks ~4.5 s more, and any
collective issued meanwhile queues behind it. Expected: the Gloo step ends at the deadline."""
import os, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _ranks_on_fake_hosts import main as run


def body(rank, world):
    import torch, torch.distributed as dist
    t = torch.ones(1000, device="neuron")
    dist.all_reduce(t)
    dist.barrier()
    if rank == 3:
        time.sleep(25)
        return "never called"
    if rank == 1:
        time.sleep(5)
    start = time.time()
    try:
        dist.all_reduce(t)
        raised = "no error"
    except Exception as e:
        raised = str(e).splitlines()[0][80:200]
    raised_at = time.time() - start
    if rank != 0:
        return f"raised at {raised_at:.1f} s ({raised})"  # stays alive (LINGER), group kept: no socket closes
    s = time.time()
    dist.destroy_process_group()
    destroy = time.time() - s
    msg = f"raised at {raised_at:.1f} s ({raised}); destroy_process_group took {destroy:.1f} s"
    assert destroy < 1.5, msg
    return msg


if __name__ == "__main__":
    run(body, [0, 0, 1, 1], timeout=60, pg_timeout=8, env={"LINGER": "15"})
