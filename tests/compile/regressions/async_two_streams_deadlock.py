"""Review 8, finding 3. Async mode: two threads calling one compiled function on different streams deadlock.

ProgramExecutor::run (csrc/compile/Executor.cpp:412-421) takes the executor's mutex while
holding the GIL, then (other stream still using the arena) waits in synchronize_stream,
which releases the GIL and re-takes it at the end while still holding the mutex. A second
caller that entered run() in the meantime holds the GIL and blocks on the mutex: each
waits for what the other holds.

Run: NEURON_LAUNCH_BLOCKING=0 is set below. Exits 1 (faulthandler watchdog) when it hangs,
0 when both calls return."""
import faulthandler
import os
import sys
import threading
import time

os.environ["NEURON_LAUNCH_BLOCKING"] = "0"
os.environ["TORCH_NEURONX_DISABLE_NEFF_CACHE"] = "1"
import torch
import torch_neuronx  # noqa: F401

N = torch.device("neuron")


def f(a, b):
    for _ in range(6):
        a = (a @ b).tanh()
    return a


g = torch.compile(f, backend="neuron")
a = torch.randn(768, 768, device=N)
b = torch.randn(768, 768, device=N)
g(a, b)
torch.neuron.synchronize()

go = threading.Event()
side = torch.neuron.Stream()


def other_thread():
    go.wait()
    with torch.neuron.stream(side):
        g(a, b)          # the arena's last user is the default stream: waits for it, GIL released


t = threading.Thread(target=other_thread, daemon=True)
t.start()
faulthandler.dump_traceback_later(60, exit=True)   # a C watchdog: works while the GIL is stuck
g(a, b)                  # queued on the default stream (~1 s of work)
go.set()
time.sleep(0.2)          # the other thread enters run() and waits for the default stream
g(a, b)                  # blocks on the executor mutex holding the GIL
t.join()
torch.neuron.synchronize()
faulthandler.cancel_dump_traceback_later()
print("no deadlock: both threads returned")
sys.exit(0)
