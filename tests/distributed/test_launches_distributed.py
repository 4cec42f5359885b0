"""Note [Launches] for collectives: each collective and point-to-point transfer of the neuron
process group passes the seam once, on the collective path, whichever transport runs it
(shared memory or Gloo) and in either execution mode. Two ranks under torchrun; each writes
its counts to a JSON file."""
import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

WORKER = textwrap.dedent("""
    import json, os, sys, torch, torch_neuronx
    import torch.distributed as dist
    from torch_neuron_sim import _C

    dist.init_process_group(backend="neuron")
    rank, world = dist.get_rank(), dist.get_world_size()
    neuron = torch.device("neuron")
    t = torch.full((64,), float(rank + 1), device=neuron)
    gathered = [torch.empty(64, device=neuron) for _ in range(world)]
    flat = torch.empty(64 * world, device=neuron)
    message = torch.arange(16.0, device=neuron) if rank == 0 else torch.empty(16, device=neuron)
    torch.neuron.synchronize()

    def counted(fn):
        torch.neuron.synchronize()
        _C._count_launches(True)
        fn()
        torch.neuron.synchronize()
        counts = dict(_C._launch_counts())
        _C._count_launches(False)
        return counts

    def point_to_point():
        if rank == 0:
            dist.send(message, dst=1)
        else:
            dist.recv(message, src=0)

    counts = {
        "allreduce": counted(lambda: dist.all_reduce(t)),
        "broadcast": counted(lambda: dist.broadcast(t, src=0)),
        "allgather": counted(lambda: dist.all_gather(gathered, t)),
        "allgather_into_tensor": counted(lambda: dist.all_gather_into_tensor(flat, t)),
        "send" if rank == 0 else "recv": counted(point_to_point),
    }
    # The collectives computed what they should (the counting observer changes nothing).
    assert torch.equal(message.cpu(), torch.arange(16.0))
    assert torch.equal(flat.cpu(), torch.cat([g.cpu() for g in gathered]))
    with open(os.path.join(sys.argv[1], f"rank{rank}.json"), "w") as out:
        json.dump(counts, out)
    dist.destroy_process_group()
""")

MODES = {
    "shared memory": {},
    "gloo only": {"NEURON_SIM_SHM_COLLECTIVES": "0"},
    "asynchronous": {"NEURON_LAUNCH_BLOCKING": "0", "NEURON_SIM_INLINE_BYTES": "0"},
}


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("mode", list(MODES))
def test_each_collective_passes_the_seam_once_on_the_collective_path(mode, tmp_path):
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    env = dict(os.environ, OMP_NUM_THREADS="1", TORCHELASTIC_ERROR_FILE="", **MODES[mode])
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                 "NEURON_RT_VISIBLE_CORES"):
        env.pop(name, None)
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", f"--master-port={free_port()}",
               str(worker), str(tmp_path)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-6000:]
    for rank in (0, 1):
        counts = json.loads((tmp_path / f"rank{rank}.json").read_text())
        for collective, by_path in counts.items():
            assert by_path == {**{path: 0 for path in by_path}, "collective": 1}, (rank, collective, by_path)
