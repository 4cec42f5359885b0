"""Found while testing the exit path (commit 5779fa5). A script whose point-to-point works have `then` callbacks and which exits right after its
last collective aborted at exit about 1 time in 20 ("terminate called without an active
exception"): the completion thread completed a future after Python began finalizing, and
dropping the callbacks (Python functions) retook the GIL inside a noexcept destructor.
A backtrace (std::set_terminate in an LD_PRELOAD library):
  completion thread: Future::markCompleted -> ~vector<FutureCallback> -> decref of the Python
  callback -> gil_scoped_acquire -> PyEval_AcquireThread -> pthread_exit -> std::terminate
Fixed by Note [Completions at exit] (a completion takes the GIL before it touches the future,
as the releaser does). The ranks run pinned to one core, which makes the window wider.
ROUNDS (default 8) pairs of processes; exits 1 if any rank fails or hangs."""
import os
import socket
import subprocess
import sys

CHILD = r'''
import datetime, os, sys, torch, torch.distributed as dist
import torch_neuronx  # noqa
dist.init_process_group("neuron", timeout=datetime.timedelta(seconds=20))
rank = dist.get_rank()
t = torch.full((1024,), float(rank), device="neuron")
works = [dist.isend(t, 1) if rank == 0 else dist.irecv(t, 0) for _ in range(4)]
for w in works:
    w.get_future().then(lambda f: f.value())
dist.barrier()
del works, t
'''


def one_round():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cpu = min(os.sched_getaffinity(0))
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2")
    procs = [subprocess.Popen(["taskset", "-c", str(cpu), sys.executable, "-c", CHILD],
                              env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
    failed = []
    for r, p in enumerate(procs):
        try:
            out = p.communicate(timeout=60)[0]
        except subprocess.TimeoutExpired:
            p.kill()
            out = "hung (60 s)\n" + p.communicate()[0]
        if p.returncode != 0:
            print(f"rank {r} failed ({p.returncode}):\n{out[-1500:]}")
            failed.append(r)
    return failed


if __name__ == "__main__":
    bad = 0
    for i in range(int(os.environ.get("ROUNDS", "8"))):
        failed = one_round()
        print(f"round {i}: {'failed ranks ' + str(failed) if failed else 'ok'}", flush=True)
        bad += bool(failed)
    sys.exit(1 if bad else 0)
