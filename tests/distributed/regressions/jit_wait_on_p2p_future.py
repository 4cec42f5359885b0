"""Review 14 (the exit hook), finding 1: torch.jit.wait() on the future of an irecv (or isend) hangs forever.

What: `torch.jit.wait(dist.irecv(t, 0).get_future())` never returns. torch.jit.wait (torch._C.wait)
waits for the future *with the GIL held* (unlike Future.wait(), whose binding releases it). Since
commit 9fb710c the completion task of a point-to-point Work's future calls PyGILState_Ensure()
before markCompleted(), even when the future has no Python callback, so the completion waits for
the GIL that the waiter holds: deadlock (no timeout applies; the group's timeout is on the Work).
The same applies to any C++ code that waits on such a future while holding the GIL.
Control: Future.wait() on the same kind of future returns (it releases the GIL).

How often: every run (deterministic).

Root cause: csrc/distributed/ProcessGroupNeuron.cpp:616-623 (NeuronWork::complete's completion
task: `struct Gil { PyGILState_STATE state = PyGILState_Ensure(); ... } gil;` taken before
future->markCompleted). Before 9fb710c the completion took no GIL itself (only Python callbacks did).

Exits 1 while the bug exists (rank hangs), 0 once fixed."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _two_rank_scripts  # noqa: E402

CHILD = r'''
import datetime, sys, faulthandler, torch, torch.distributed as dist
import torch_neuronx  # noqa
mode = sys.argv[1]
dist.init_process_group("neuron", timeout=datetime.timedelta(seconds=15))
rank = dist.get_rank()
t = torch.full((16,), 7.0 if rank == 0 else 0.0, device="neuron")
work = dist.isend(t, 1) if rank == 0 else dist.irecv(t, 0)
fut = work.get_future()
faulthandler.dump_traceback_later(20, exit=True)   # a hang shows where, then exits 1
if mode == "jit":
    torch.jit.wait(fut)
else:
    fut.wait()
faulthandler.cancel_dump_traceback_later()
print(f"rank {rank}: {mode} wait returned; t[0]={t[0].item()}", flush=True)
dist.barrier()
dist.destroy_process_group()
'''

if __name__ == "__main__":
    sys.exit(_two_rank_scripts.control_then_test(CHILD, "future", "jit", control_name="control (Future.wait)", tail=4))
