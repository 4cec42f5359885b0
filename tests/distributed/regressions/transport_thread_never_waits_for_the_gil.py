"""Issue 9. The intermittent PowerSGD failure of issue 9 (asynchronous mode): a transport's thread
dropped the last reference to a finished Work, which holds Python-owned tensors, and so waited
for the GIL; the thread holding the GIL was in torch.manual_seed (PowerSGD's hook calls it),
which waits for the device's streams with the GIL kept, among them the communication stream
waiting for the *next* collective, which the blocked transport thread would have run. Both
waited until the group's timeout. Now transport threads hand such references to a completion
thread (Note [Releasing a Work off the transport's threads]).
Each rank, 40 times: two asynchronous all_reduces whose Works it drops at once, then
torch.manual_seed. Run on the Gloo transport and on shared memory (each in its own launch).
Expected: done in well under a second per transport, sums right. Bug: a hang until the
groups' timeout (8 s), then a failure (exit 1). Found with gdb on the hung ranks: Gloo's
thread in take_gil under NeuronWork::release_resources, the autograd thread in
Stream::wait_for under NeuronGeneratorImpl::set_current_seed."""
import os, subprocess, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _two_ranks_spawned import run


def body(rank):
    import torch, torch.distributed as dist
    x = torch.ones(1 << 14, device="neuron")
    y = torch.ones(1 << 14, device="neuron")
    for i in range(40):
        dist.all_reduce(x, async_op=True)  # the Works are dropped here: the transport holds the last references
        dist.all_reduce(y, async_op=True)
        torch.manual_seed(i)  # waits for the streams, GIL held
    torch.neuron.synchronize()
    dist.barrier()
    assert x.min().item() == x.max().item() == 2.0 ** 40, x
    assert y.min().item() == y.max().item() == 2.0 ** 40, y
    return "ok"


if __name__ == "__main__":
    if "TRANSPORT_SHM" in os.environ:
        run(body, timeout=60, env={"PG_TIMEOUT": "8", "OMP_NUM_THREADS": "1", "NEURON_LAUNCH_BLOCKING": "0",
                                   "NEURON_SIM_INLINE_BYTES": "0",
                                   "NEURON_SIM_SHM_COLLECTIVES": os.environ["TRANSPORT_SHM"]})
    codes = []
    for shm in ("0", "1"):
        print(f"-- NEURON_SIM_SHM_COLLECTIVES={shm}", flush=True)
        codes.append(subprocess.run([sys.executable, __file__], env=dict(os.environ, TRANSPORT_SHM=shm)).returncode)
    sys.exit(1 if any(codes) else 0)
