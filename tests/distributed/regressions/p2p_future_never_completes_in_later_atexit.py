"""Review 13 (the exit hook), finding 2: after torch_neuron_sim's atexit ran, no point-to-point future ever completes again:
an atexit handler that runs after it (registered before `import torch`, or before importing
torch_neuron_sim with TORCH_DEVICE_BACKEND_AUTOLOAD=0) and waits on an isend/irecv future hangs
forever. The same code worked before commit 5779fa5.

Shows: 2 ranks; each registers a cleanup handler before `import torch` (atexit runs handlers
last-registered-first, so it runs after _C._quiesce_for_exit). The handler does a final
handshake: rank 0 isends a tensor, rank 1 irecvs it, and both wait on the Work's future
(fut.wait(), as torch.futures / `then` chains do). The transfer itself succeeds (Work.wait()
returns), but the future's completion is refused by the closed completion pool and the future
is left incomplete: fut.wait() blocks forever (no timeout applies: the group's timeout is on
the Work, not on a future nobody will complete; Ctrl-C does not interrupt it). A control run
whose handler only calls Work.wait() exits cleanly.

How often: every run (deterministic).

Root cause: csrc/distributed/ProcessGroupNeuron.cpp, NeuronWork::complete(): the completion task
returns without completing the future when CompletionThreads::enter_python() refuses
(closed_ set for good by close_for_exit(), called from quiesce_for_exit at atexit); the future
and value are leaked on purpose ("left to the exit"), but Python is not finalizing yet and
code still runs that can wait on them.

Exits 1 while the bug exists, 0 once fixed."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _two_rank_scripts  # noqa: E402

CHILD = r'''
import atexit, sys
wait_on = sys.argv[1]

def final_handshake():
    import torch, torch.distributed as dist
    rank = dist.get_rank()
    t = torch.full((16,), 7.0 if rank == 0 else 0.0, device="neuron")
    work = dist.isend(t, 1) if rank == 0 else dist.irecv(t, 0)
    work.wait()
    print(f"rank {rank}: transfer done", flush=True)
    if wait_on == "future":
        work.get_future().wait()
    print(f"rank {rank}: handshake done", flush=True)

atexit.register(final_handshake)  # before import torch: runs after torch_neuron_sim's atexit

import datetime, torch, torch.distributed as dist
import torch_neuronx  # noqa
dist.init_process_group("neuron", timeout=datetime.timedelta(seconds=20))
x = torch.ones(4, device="neuron")
dist.all_reduce(x)
print(f"rank {dist.get_rank()}: main done", flush=True)
'''


def one_round(mode, limit=45):
    ok = True
    for r, (code, out) in enumerate(_two_rank_scripts.run(CHILD, [mode], limit=limit)):
        status = f"exit {code}" if code != "hung" else f"hung ({limit} s, killed)"
        ok = ok and code == 0
        print(f"  [{mode}] rank {r}: {status}; output: {out.strip().splitlines()[-3:]}")
    return ok


if __name__ == "__main__":
    if not one_round("work"):
        print("control (Work.wait only) failed: the test cannot tell")
        sys.exit(2)
    sys.exit(0 if one_round("future") else 1)
