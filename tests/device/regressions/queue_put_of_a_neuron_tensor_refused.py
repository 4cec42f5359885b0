"""Review 17, finding 4: sending a neuron tensor through torch.multiprocessing.Queue (the queue DataLoader workers and
most producer/consumer code use) still loses it silently: put() returns, the refusal is printed
by the queue's feeder thread, and the receiver waits forever.

python/torch_neuron_sim/_interop.py:37-45 wraps ForkingPickler's reducers, so the new error is
raised where the object is pickled. multiprocessing.Queue pickles in its feeder thread
(multiprocessing/queues.py, _feed), after put() has returned: the error goes to stderr and
the item is dropped. Issue 23 named exactly this ("raised in a Queue's feeder thread, and the
receiver waited forever"); tests/test_interop.py only tries SimpleQueue, which pickles in put().
Fix: refuse at put() time (e.g. pickle-check neuron tensors in a Queue.put wrapper installed
with the reducers, or make the reducer's error reach the caller), and test mp.Queue.

The receiver here waits 20 s (it would wait forever)."""
import queue
import sys

import torch
import torch.multiprocessing as mp
import torch_neuronx  # noqa: F401


def receiver(q, result):
    try:
        q.get(timeout=20)
        result.put("received")
    except queue.Empty:
        result.put("nothing arrived")


if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    q, result = ctx.Queue(), ctx.SimpleQueue()
    child = ctx.Process(target=receiver, args=(q, result))
    child.start()
    try:
        q.put(torch.arange(4.0, device="neuron"))
        raised = None
    except RuntimeError as e:
        raised = str(e)
    outcome = result.get()
    child.join()
    print("put() raised:", (raised or "nothing")[:120])
    print("receiver:", outcome)
    if raised is None and outcome == "nothing arrived":
        print("BUG: put() returned, the tensor was dropped by the feeder thread, the receiver waited in vain")
        sys.exit(1)
    print("OK")
    sys.exit(0)
