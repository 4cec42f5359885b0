"""Records which attributes PyTorch's own code reads from torch.neuron while it runs the features
that reach a device module generically (activation checkpointing, fork_rng, autocast, seeding,
torch.load, the DataLoader's pin-memory thread, the profiler, torch.compile, DDP, FSDP2, DTensor's
RNG tracker, distributed checkpoint), and writes them as JSON to argv[1]:
{"reads": {attribute: ["torch/...py:line", ...]}, "features": {name: "ok" | error}}.

tests/device/test_device_module_contract.py checks that every read seen here is one the static
survey (device_module_survey.py) found: the survey must not miss a kind of read that runs.
One process, one rank (a process group of world size 1 on a FileStore), CPU only."""
import json
import os
import sys
import tempfile
import traceback
import types

import torch
import torch_neuronx  # noqa: F401

TORCH_ROOT = os.path.dirname(torch.__file__)
READS: dict[str, set[str]] = {}


class _Recording(types.ModuleType):
    """torch.neuron's class while recording: notes each read made by a frame of torch's code."""

    def __getattribute__(self, name):
        frame = sys._getframe(1)
        path = frame.f_code.co_filename
        if path.startswith(TORCH_ROOT + os.sep):
            where = "torch/" + os.path.relpath(path, TORCH_ROOT).replace(os.sep, "/")
            READS.setdefault(name, set()).add(f"{where}:{frame.f_lineno}")
        return super().__getattribute__(name)


def features(tmp):
    import torch.nn.functional as F
    import torch.utils.checkpoint as cp

    def checkpointing():
        x = torch.randn(4, 8, device="neuron", requires_grad=True)
        for reentrant in (True, False):
            cp.checkpoint(lambda z: F.dropout(z, 0.5), x, use_reentrant=reentrant).sum().backward()

    def fork_rng():
        with torch.random.fork_rng(device_type="neuron"):
            torch.rand(3, device="neuron")
        with torch.random.fork_rng():
            torch.rand(3, device="neuron")

    def autocast():
        with torch.autocast("neuron", dtype=torch.bfloat16):
            torch.mm(torch.ones(2, 2, device="neuron"), torch.ones(2, 2, device="neuron"))

    def seeding():
        torch.manual_seed(1)
        torch.seed()

    def load():
        path = os.path.join(tmp, "t.pt")
        torch.save(torch.ones(3, device="neuron"), path)
        torch.load(path, map_location="neuron:0")
        torch.load(path)

    def pin_memory_loader():
        data = torch.utils.data.TensorDataset(torch.arange(8.0))
        for (batch,) in torch.utils.data.DataLoader(data, batch_size=4, pin_memory=True):
            batch.to("neuron", non_blocking=True)

    def legacy_to():
        torch.ones(2).neuron()
        torch.nn.Linear(2, 2).neuron()
        torch.ones(2).untyped_storage().neuron()

    def device_attr_helpers():
        torch._utils._get_all_device_indices()
        torch._utils._get_devices_properties([0])
        torch._utils._get_current_device_index()

    def profiler():
        activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.PrivateUse1]
        with torch.profiler.profile(activities=activities):
            torch.ones(4, device="neuron") * 2
        with torch.autograd.profiler.profile(use_device="neuron"):
            torch.ones(4, device="neuron") * 2

    def compiled():
        def f(x):
            return cp.checkpoint(lambda z: F.dropout(z.sin(), 0.5), x, use_reentrant=False)
        x = torch.randn(4, 8, device="neuron", requires_grad=True)
        torch.compile(f, backend="neuron")(x).sum().backward()

        def g(x):
            s = torch.neuron.current_stream()
            return x + 1, s
        torch.compile(g, backend="neuron")(torch.ones(2, device="neuron"))

    def distributed():
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor import Replicate, distribute_tensor
        store = dist.FileStore(os.path.join(tmp, "store"), 1)
        dist.init_process_group("neuron", store=store, rank=0, world_size=1)
        try:
            ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4).to("neuron"))
            ddp(torch.ones(2, 4, device="neuron")).sum().backward()
            model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5)).to("neuron")
            fully_shard(model)
            model(torch.ones(2, 4, device="neuron")).sum().backward()
            mesh = init_device_mesh("neuron", (1,))
            torch.manual_seed(0)
            F.dropout(distribute_tensor(torch.ones(4, 4, device="neuron"), mesh, [Replicate()]), 0.5)
            dcp.save(model.state_dict(), checkpoint_id=os.path.join(tmp, "dcp"))
            dcp.load(model.state_dict(), checkpoint_id=os.path.join(tmp, "dcp"))
        finally:
            dist.destroy_process_group()

    return [checkpointing, fork_rng, autocast, seeding, load, pin_memory_loader, legacy_to,
            device_attr_helpers, profiler, compiled, distributed]


def main(out):
    outcomes = {}
    module = torch.neuron
    original = type(module)
    with tempfile.TemporaryDirectory() as tmp:
        module.__class__ = _Recording
        try:
            for feature in features(tmp):
                try:
                    feature()
                    outcomes[feature.__name__] = "ok"
                except Exception:  # reported; the test names it
                    outcomes[feature.__name__] = traceback.format_exc()
        finally:
            module.__class__ = original
    with open(out, "w") as fh:
        json.dump({"reads": {k: sorted(v) for k, v in READS.items()}, "features": outcomes}, fh, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
