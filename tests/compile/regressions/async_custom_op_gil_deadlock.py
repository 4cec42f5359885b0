"""Review 8, finding 4. Async mode: a compiled graph containing a custom op with a Python kernel deadlocks the
next generator call (torch.manual_seed, get_rng_state, torch.utils.checkpoint, ...).

The whole program is queued as one task (csrc/compile/Executor.cpp:434-449); the custom
op's CPU kernel runs on the stream worker through redispatchBoxed (Executor.cpp:387) and
needs the GIL. NeuronGenerator.cpp:15-25 drains the device *holding* the GIL, relying on
"queued work never needs the GIL" - which this task breaks. Eager neuron runs such ops
inline. Exits 1 (watchdog) on the hang."""
import faulthandler
import os
import sys

os.environ["NEURON_LAUNCH_BLOCKING"] = "0"
os.environ["TORCH_NEURONX_DISABLE_NEFF_CACHE"] = "1"
import torch
import torch_neuronx  # noqa: F401

N = torch.device("neuron")


@torch.library.custom_op("review::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@twice.register_fake
def _(x):
    return torch.empty_like(x)


def f(a, b):
    for _ in range(4):
        a = (a @ b).tanh()       # some work so the task is still queued below
    return twice(a)


a = torch.randn(768, 768, device=N)
b = torch.randn(768, 768, device=N)
g = torch.compile(f, backend="neuron")
g(a, b)
torch.neuron.synchronize()

faulthandler.dump_traceback_later(60, exit=True)
y = g(a, b)
torch.manual_seed(0)             # drains with the GIL held; the worker waits for the GIL
print("no deadlock", float(y.sum()))
faulthandler.cancel_dump_traceback_later()
sys.exit(0)
