"""Zero-copy (review 9b, finding 2): abort() ends this rank's collective while a peer is still
writing into this rank's tensor (the peer reduces its part of both ranks' tensors from its own
process). The memory the failed call lent must never go to another tensor (Note [Memory lent
to peers]). Async mode. Both ranks all_reduce a 64 MiB tensor; rank 1 polls its element 0
until rank 0 writes there, SIGSTOPs rank 0, aborts, sees its Work fail, frees the tensor and
allocates a zeroed one of the same size (the caching allocator would hand it the same block),
then SIGCONTs rank 0.
Expected: the new tensor stays zero. Bug: rank 0's remaining writes land in it (exit 1)."""
import os, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _two_ranks_spawned import run

N = 16 << 20

def body(rank):
    import ctypes, signal, torch, torch.distributed as dist
    from torch_neuron_sim import _C
    backend = dist.group.WORLD._get_backend(torch.device("neuron"))
    pids = [None, None]
    dist.all_gather_object(pids, os.getpid())
    assert _C._process_group_zero_copy(backend) >= 0, "zero-copy not set up"
    t = torch.full((N,), float(rank + 1), device="neuron")
    torch.neuron.synchronize()
    if rank == 0:
        try:
            dist.all_reduce(t)
        except Exception as e:  # rank 1 aborted: this rank's call fails once it runs again
            print("rank 0's all_reduce failed:", str(e).splitlines()[0][:120], flush=True)
        return "done"
    first = ctypes.c_float.from_address(t.data_ptr())
    work = dist.all_reduce(t, async_op=True)
    end = time.time() + 10
    while first.value == 2.0 and time.time() < end:
        pass
    assert first.value != 2.0, "rank 0 never wrote into rank 1's tensor (not zero-copy?)"
    os.kill(pids[0], signal.SIGSTOP)
    try:
        backend.abort()
        try:
            work.wait()
            raise AssertionError("the aborted all_reduce succeeded")
        except RuntimeError as e:
            print("rank 1's all_reduce failed:", str(e).splitlines()[0][:120], flush=True)
        time.sleep(1)  # this rank's own comm thread may still be reducing its part
        address = t.data_ptr()
        del t, work
        u = torch.zeros(N, device="neuron")
        torch.neuron.synchronize()
        print("new tensor reuses the lent block:", u.data_ptr() == address, flush=True)
    finally:
        os.kill(pids[0], signal.SIGCONT)
    time.sleep(2)
    changed = int((u.cpu() != 0).sum())
    assert changed == 0, f"{changed} elements of a tensor allocated after the abort were written by rank 0"
    return "ok"

if __name__ == "__main__":
    run(body, timeout=60, env={"NEURON_SIM_SHARED_MEMORY": "1", "NEURON_LAUNCH_BLOCKING": "0", "PG_TIMEOUT": "20",
                               "OMP_NUM_THREADS": "1"})
