"""Review 13 (the exit hook), finding 3: a point-to-point completion that throws leaves CompletionThreads::in_python_ raised for
good, so every later exit of the process waits the full 10 s limit of close_for_exit().

Shows: rank 1 posts an irecv and completes its future itself (fut.set_result, allowed on any
torch.futures.Future) before the peer's data arrives. When the transfer then ends, the
completion task's future->markCompleted() throws ("Attempting to mark a completed Future as
complete again"); the exception leaves the task before leave_python(), serve() swallows it, and
in_python_ stays 1. At exit, _quiesce_for_exit waits 10 s for a completion that is not running.
Any throw from markCompleted/setError does the same (e.g. a C++ callback added with addCallback
that throws: Future::invokeCallback does not catch). A control run without set_result exits at
once.

How often: every run (deterministic). Fails when rank 1's exit takes > 7 s after its main
code ended.

Root cause: csrc/distributed/ProcessGroupNeuron.cpp, NeuronWork::complete(), the posted
completion: enter_python() ... markCompleted/setError ... leave_python() with no RAII guard or
try/catch, so an exception skips leave_python() (and drops `future`/`value` outside the
section, in serve()'s `task = nullptr`).

Exits 1 while the bug exists, 0 once fixed."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _two_rank_scripts  # noqa: E402

CHILD = r'''
import datetime, sys, time, torch, torch.distributed as dist
import torch_neuronx  # noqa
dist.init_process_group("neuron", timeout=datetime.timedelta(seconds=20))
rank = dist.get_rank()
t = torch.full((16,), float(rank), device="neuron")
dist.barrier()
if rank == 0:
    time.sleep(1.0)
    dist.isend(t, 1).wait()
else:
    work = dist.irecv(t, 0)
    if sys.argv[1] == "set_result":
        work.get_future().set_result([t])  # completed by the user before the transfer ends
    work.wait()
    time.sleep(0.5)  # the completion task has run (and thrown)
dist.barrier()
print(f"rank {rank} main end {time.time():.3f}", flush=True)
'''


def one_round(mode, limit=60):
    results = _two_rank_scripts.run(CHILD, [mode], limit=limit)
    end = time.time()
    outs = [out if code != "hung" else "hung\n" + out for code, out in results]
    exit_seconds = None
    for line in outs[1].splitlines():
        if line.startswith("rank 1 main end"):
            exit_seconds = end - float(line.split()[-1])
    print(f"  [{mode}] return codes {[code for code, _ in results]}; rank 1 exit took "
          f"{exit_seconds if exit_seconds is None else round(exit_seconds, 1)} s")
    if exit_seconds is None:
        print(outs[1][-1500:])
    return exit_seconds


if __name__ == "__main__":
    control = one_round("plain")
    if control is None or control > 5:
        print("control run was slow or failed: the test cannot tell")
        sys.exit(2)
    slow = one_round("set_result")
    sys.exit(1 if slow is None or slow > 7 else 0)
