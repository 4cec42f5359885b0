"""Review 11, finding 1 (fixed: the leader waits for its Gloo step in slices, checking abort() and
the deadline, and never drops the last reference to the leaders' group). Hosts A={0,1}, B={2,3}, group timeout 12 s. Host B never calls the allreduce (its ranks stay
alive). Ranks 0 and 1 issue it; 1 s later a thread on each calls
dist.distributed_c10d._abort_process_group() (as a fault-tolerant trainer does; the flat
shared-memory and Gloo groups' tests expect the wait to raise and the abort to return at once).
Leader 0 is inside the leaders' Gloo allreduce, waited for with no bound but Gloo's timeout on
the communication thread; abort() calls leaders->abort(), which does not end it; the group's
destructor joins the communication thread first. Expected: wait() raises ~1 s after the call,
abort returns at once. Bug: on leader rank 0 either wait() or _abort_process_group() (whichever
drops the group's last reference) blocks until Gloo's own timeout (12 s here, 30 min default). Usage: python r2_... [layout, default 0,0,1,1]"""
import os, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _ranks_on_fake_hosts import main as run


def body(rank, world):
    import threading
    import torch, torch.distributed as dist
    t = torch.ones(1000, device="neuron")
    dist.all_reduce(t)
    if rank >= 2:
        time.sleep(25)  # host B never joins, but stays alive (no closed sockets)
        return "host B: skipped the allreduce"
    abort = {}

    def abort_later():
        time.sleep(1)
        s = time.time()
        dist.distributed_c10d._abort_process_group()
        abort["took"] = time.time() - s
    start = time.time()
    th = threading.Thread(target=abort_later)
    th.start()
    try:
        dist.all_reduce(t)
        raised = "no error"
    except Exception as e:
        raised = f"{str(e).splitlines()[0][:150]}"
    raised_after = time.time() - start
    th.join()
    msg = f"wait raised after {raised_after:.2f} s ({raised}); _abort_process_group took {abort['took']:.2f} s"
    # whichever thread drops the group's last reference runs its destructor, which joins the
    # communication thread stuck in the leaders' Gloo step: the wait or the abort blocks
    assert max(raised_after, 1 + abort["took"]) < 4, msg
    return msg


if __name__ == "__main__":
    layout = [int(c) for c in sys.argv[1].split(",")] if len(sys.argv) > 1 else [0, 0, 1, 1]
    env = {"NEURON_SIM_SHM_COLLECTIVES": "0"} if os.environ.get("FLAT") == "1" else {}  # FLAT=1: Gloo over 4 ranks
    run(body, layout, timeout=60, pg_timeout=12, env=env)
