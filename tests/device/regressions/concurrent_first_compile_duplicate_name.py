"""Review 12, finding 1. Two threads that call torch.compile(..., backend="neuron") for the first time in a process
(a server warming two models; a thread pool) race in Dynamo's lookup_backend: both see
"neuron" not yet in _COMPILER_FNS, both load the entry point (the ~1.8 s backend import is the
window), and the second register_backend() raises AssertionError("duplicate name: neuron").
Before 09e3ce7 `import torch` registered the backend up front, so lookup never loaded the
entry point. Expected: both compiles succeed. Actual: AssertionError: duplicate name: neuron.
Exit 1 while the bug is present, 0 once fixed."""
import os
import sys
import threading

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch  # noqa: E402  (autoloads torch_neuronx)

errors, barrier = [], threading.Barrier(2)


def work():
    barrier.wait()
    try:
        torch.compile(lambda x: x * 2 + 1, backend="neuron")
    except Exception as error:  # noqa: BLE001
        errors.append(f"{type(error).__name__}: {error}")


threads = [threading.Thread(target=work) for _ in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
if errors:
    print("FAIL: concurrent first torch.compile(backend='neuron'):", errors)
    sys.exit(1)
print("ok")
