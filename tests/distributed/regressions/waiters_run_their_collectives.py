"""Note [Waiters run their collectives]: a wait() runs its asynchronous collective, and those
queued before it in order, when the communication thread has not started them; a collective
nobody waits for is run by the communication thread once its grace period has passed.
Asynchronous mode (launch-blocking mode runs every collective at the call). Phase 1 gives the group a grace period of 10 minutes: only the waiters can have run its
collectives before the harness's 60 s (a hang otherwise). Checked for c10d's async_op=True,
for a wait on the later of two collectives (the earlier one runs first, on the same thread), for
functional collectives (what DTensor and compiled graphs issue), for the two ranks waiting in
different orders, for a synchronous collective and one on Gloo (all_to_all) issued after a
collective nobody waited for (they run it first: review 26, finding 3, they waited out the grace
period), and for a TorchDispatchMode active around wait(), which must not see the collective's
own CPU ops (finding 4: an AVG all_reduce of a non-contiguous tensor showed it copy_ and div_).
Phase 2 gives a group 0.1 s: an all_reduce nobody waits for completes."""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _two_ranks_spawned import run


def body(rank):
    import time
    import torch, torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    os.environ["NEURON_SIM_COLLECTIVE_GRACE_US"] = str(600 * 10**6)  # read when a group is made
    group = dist.new_group([0, 1], backend="neuron")
    a = torch.full((4,), float(rank + 1), device="neuron")
    b = torch.full((4,), 10.0 * (rank + 1), device="neuron")
    work_a = dist.all_reduce(a, group=group, async_op=True)
    work_b = dist.all_reduce(b, group=group, async_op=True)
    assert not work_a.is_completed(), "the communication thread took a task within its grace period"
    work_b.wait()  # runs a, then b, here
    assert work_a.is_completed()
    work_a.wait()
    assert a.cpu().tolist() == [3.0] * 4 and b.cpu().tolist() == [30.0] * 4, (a, b)

    x = torch.arange(4.0, device="neuron") * (rank + 1)
    y = funcol.wait_tensor(funcol.all_reduce(x, "sum", group))
    assert y.cpu().tolist() == [0.0, 3.0, 6.0, 9.0], y

    # The ranks wait in different orders: each runs what is queued up to its wait, in the order issued.
    c = torch.full((2,), float(rank), device="neuron")
    d = torch.full((2,), float(rank + 5), device="neuron")
    works = [dist.all_reduce(c, group=group, async_op=True), dist.all_reduce(d, group=group, async_op=True)]
    for work in (works if rank == 0 else works[::-1]):
        work.wait()
    assert c.cpu().tolist() == [1.0, 1.0] and d.cpu().tolist() == [11.0, 11.0], (c, d)

    # Issued after a queued collective nobody waited for: they run it first, here.
    e = torch.ones(4, device="neuron")
    unwaited = dist.all_reduce(e, group=group, async_op=True)
    f = torch.ones(4, device="neuron")
    dist.all_reduce(f, group=group)  # synchronous
    assert unwaited.is_completed() and e.cpu().tolist() == [2.0] * 4 and f.cpu().tolist() == [2.0] * 4, (e, f)
    unwaited = dist.all_reduce(e, group=group, async_op=True)
    swapped = torch.empty(2, device="neuron")
    dist.all_to_all_single(swapped, torch.full((2,), float(rank), device="neuron"), group=group)  # Gloo's
    assert unwaited.is_completed() and e.cpu().tolist() == [4.0] * 4 and swapped.cpu().tolist() == [0.0, 1.0], swapped

    from torch.utils._python_dispatch import TorchDispatchMode

    class Seen(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    t = torch.arange(6.0, device="neuron").view(2, 3).t()  # not contiguous: staged and copied back
    work = dist.all_reduce(t, op=dist.ReduceOp.AVG, group=group, async_op=True)
    with Seen() as seen:
        work.wait()
    assert seen.ops == [], seen.ops
    assert t.cpu().tolist() == [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]], t

    os.environ["NEURON_SIM_COLLECTIVE_GRACE_US"] = str(100 * 1000)
    late = dist.new_group([0, 1], backend="neuron")
    g = torch.ones(3, device="neuron")
    work_g = dist.all_reduce(g, group=late, async_op=True)
    deadline = time.monotonic() + 30
    while not work_g.is_completed():
        assert time.monotonic() < deadline, "a collective nobody waited for never ran"
        time.sleep(0.01)
    assert g.cpu().tolist() == [2.0] * 3, g
    return "ok"


if __name__ == "__main__":
    run(body, timeout=60, env={"OMP_NUM_THREADS": "1", "NEURON_SIM_SHM_COLLECTIVES": "1", "NEURON_LAUNCH_BLOCKING": "0"})
