"""Review 8, finding 3 (launch-blocking part). Default (launch-blocking) mode, same root cause as async_two_streams_deadlock.py: run() holds the executor mutex
while a step can give up the GIL. Here a custom op with a Python kernel runs inside the
program (Executor.cpp:387); the interpreter hands the GIL to a second thread, which enters
run() and blocks on the mutex holding the GIL, and the first thread can never get the GIL
back. Exits 1 (watchdog) on the hang."""
import faulthandler
import os
import sys
import threading
import time

os.environ["TORCH_NEURONX_DISABLE_NEFF_CACHE"] = "1"
import torch
import torch_neuronx  # noqa: F401

N = torch.device("neuron")


@torch.library.custom_op("review::slow_add", mutates_args=())
def slow_add(x: torch.Tensor) -> torch.Tensor:
    start = time.perf_counter()
    while time.perf_counter() - start < 0.05:     # Python work: the GIL changes hands
        pass
    return x + 1


@slow_add.register_fake
def _(x):
    return torch.empty_like(x)


g = torch.compile(lambda x: slow_add(x * 2), backend="neuron")
x = torch.ones(4, device=N)
g(x)
faulthandler.dump_traceback_later(60, exit=True)


def work():
    for _ in range(5):
        g(x)


threads = [threading.Thread(target=work) for _ in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
faulthandler.cancel_dump_traceback_later()
print("no deadlock")
sys.exit(0)
