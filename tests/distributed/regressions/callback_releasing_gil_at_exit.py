"""Review 14 (the exit hook), finding 2: a point-to-point future's `then` callback that releases the GIL (time.sleep, I/O, a wait)
while the process exits aborts the process (std::terminate, SIGABRT).

What: rank 1 irecvs with `fut.then(cb)`; cb starts, tells the main thread, and keeps sleeping in
2 ms steps (each releases and retakes the GIL, as any I/O or wait does); the main thread then
ends the script. Nothing at exit waits for the completion thread any more, so Python finalizes
while cb runs; cb's next GIL retake ends the thread (take_gil -> PyThread_exit_thread ->
pthread_exit: a forced unwind). The unwind leaves cb and reaches c10::ivalue::Future::
markCompleted, whose local vector of callbacks is destroyed on the way out; the Python
callback's guard (PythonFunctionGuard) takes the GIL in its destructor -> pthread_exit again
inside the unwind -> std::terminate ("terminate called without an active exception", SIGABRT).
gdb backtrace of rank 1: take_gil <- PyEval_AcquireThread <- gil_scoped_acquire <-
PythonFunctionGuard::_M_dispose <- ~vector<FutureCallback> <- Future::markCompleted
(ivalue_inl.h:981) <- ProcessGroupNeuron.cpp:629 <- CompletionThreads::serve :353.
Before 9fb710c the atexit waited (up to 10 s) for completions inside Python
(CompletionThreads::close_for_exit), so the callback ended before finalizing.
Control: the same script whose main thread waits for cb to end exits 0.

How often: every run (3/3).

Root cause: csrc/distributed/ProcessGroupNeuron.cpp:609-637 (Note [Completions at exit]): the
task holds the GIL only until a callback releases it; nothing at exit waits for completions
that run Python (close_for_exit removed, :444), and the note's "the thread just ends" holds
only while no C++ frame with a GIL-taking destructor is on the stack (here Future::markCompleted's
callbacks). (The task's `catch (...) {}` at :631 would also swallow a forced unwind.)

Exits 1 while the bug exists, 0 once fixed."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _two_rank_scripts  # noqa: E402

CHILD = r'''
import datetime, sys, threading, time, torch, torch.distributed as dist
import torch_neuronx  # noqa
mode = sys.argv[1]
dist.init_process_group("neuron", timeout=datetime.timedelta(seconds=15))
rank = dist.get_rank()
t = torch.full((16,), 7.0 if rank == 0 else 0.0, device="neuron")
started, ended = threading.Event(), threading.Event()

def cb(f):
    started.set()
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline:
        time.sleep(0.002)    # releases and retakes the GIL, as any I/O or wait does
    ended.set()
    return None

if rank == 0:
    dist.isend(t, 1).wait()
    dist.barrier()
else:
    work = dist.irecv(t, 0)
    chained = work.get_future().then(cb)
    started.wait(10)
    dist.barrier()
    if mode == "control":
        ended.wait(20)
print(f"rank {rank}: main done", flush=True)
'''

if __name__ == "__main__":
    sys.exit(_two_rank_scripts.control_then_test(CHILD, "control", "exit"))
