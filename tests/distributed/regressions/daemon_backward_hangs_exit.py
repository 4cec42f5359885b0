"""Review 13 (the exit hook), finding 1: a process whose daemon thread is inside a backward (a hook, custom Function or
collective that does not return) never exits: the atexit flush waits forever.

Shows: a daemon thread runs a backward of a neuron tensor whose tensor hook blocks (here on an
Event nobody sets; in real code e.g. a bounded queue.put to a consumer that ended, or a
collective waiting for a peer that is gone). The main thread ends. Daemon threads are meant to
be abandoned at exit, and without torch_neuron_sim's atexit the process exits at once (the
control run, which unregisters _C._quiesce_for_exit, checks this). With it, the process hangs
forever, and SIGINT (Ctrl-C) does not end it either: the atexit runs in C++ with the GIL
released, so Python's signal handler never runs.

How often: every run (deterministic).

Root cause: csrc/ExitQuiesce.cpp flush_autograd_device_threads() queues a zero-size backward on
each device index and join()s its thread with no limit. The device thread is busy (blocked in
the daemon's hook), so the flush's task never runs and join() never returns. Unlike the
collectives' quiesce (10 s limits), the flush has no bound.

Exits 1 while the bug exists, 0 once fixed."""
import os
import signal
import subprocess
import sys
import time

CHILD = r'''
import atexit, sys, threading
import torch, torch_neuron_sim
if sys.argv[1] == "control":
    atexit.unregister(torch_neuron_sim._C._quiesce_for_exit)
started, never = threading.Event(), threading.Event()
def hook(grad):
    started.set()
    never.wait()
    return grad
def worker():
    x = torch.ones(4, device="neuron", requires_grad=True)
    y = x * 2
    y.register_hook(hook)
    y.sum().backward()
threading.Thread(target=worker, daemon=True).start()
started.wait()
print("main thread done", flush=True)
'''


def run(mode, limit=30):
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    p = subprocess.Popen([sys.executable, "-c", CHILD, mode], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    start = time.time()
    try:
        out = p.communicate(timeout=limit)[0]
        return f"exited {p.returncode} after {time.time() - start:.1f} s", True, out
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGINT)  # Ctrl-C
        try:
            out = p.communicate(timeout=5)[0]
            return f"hung {limit} s; ended by SIGINT ({p.returncode})", False, out
        except subprocess.TimeoutExpired:
            p.kill()
            out = p.communicate()[0]
            return f"hung {limit} s; SIGINT did not end it (killed)", False, out


if __name__ == "__main__":
    what, ok, out = run("control")
    print("without the atexit (control):", what)
    if not ok:
        print("control run did not exit; the test cannot tell\n", out[-1500:])
        sys.exit(2)
    what, ok, out = run("with-atexit")
    print("with the atexit:", what)
    if not ok:
        print(out[-1500:])
    sys.exit(0 if ok else 1)
