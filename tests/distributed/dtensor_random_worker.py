"""DTensor random ops on a neuron mesh, one rank of it (tests/distributed/test_dtensor_random.py runs it under
torchrun with the c10d backend "neuron"): every check's outcome goes to <out_dir>/rank<r>.json.

DTensor's promise (torch/distributed/tensor/_random.py): a random op on a DTensor gives the
values one device gives with the same seed. Its tracker hands the shard with linear index s
the generator offset old + s * (first shard's numel) and leaves every rank at old + numel: so
each local shard equals the one-device draw of its shape at the offset DTensor gives it, and
where shards are row-major blocks of the tensor in order (Shard(0) on one mesh dimension,
Replicate) the whole DTensor equals the one-device draw of its shape."""
import json
import os
import sys
import traceback

import torch
import torch.distributed as dist
import torch.nn.functional as F
import torch_neuronx  # noqa: F401
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
import torch.distributed.tensor as dtensor
import torch.distributed.tensor._random as random

SEED = 1234

# name -> (op on a DTensor or a plain tensor of the same shape; draws for a fresh tensor of `shape`)
OPS = {
    "rand": lambda like: dtensor.rand(like.shape, device_mesh=like.device_mesh, placements=like.placements)
    if hasattr(like, "device_mesh") else torch.rand(like.shape, device=like.device),
    "randn": lambda like: dtensor.randn(like.shape, device_mesh=like.device_mesh, placements=like.placements)
    if hasattr(like, "device_mesh") else torch.randn(like.shape, device=like.device),
    "uniform_": lambda like: like.uniform_(-1, 2),
    "normal_": lambda like: like.normal_(0.5, 2.0),
    "bernoulli_": lambda like: like.bernoulli_(0.3),
    # (exponential_, log_normal_, geometric_: DTensor 2.13 runs them outside its RNG tracker, each
    # rank drawing its shard at its own offset; so on CUDA too)
    "dropout": lambda like: F.dropout(like.fill_(1.0), 0.5),
    "rand_like": lambda like: torch.rand_like(like),
    "randint_like": lambda like: torch.randint_like(like, 0, 1000),
    "kaiming_uniform_": lambda like: torch.nn.init.kaiming_uniform_(like),
}
# ops whose values depend on the shape (kaiming's bound): no one-device piece to compare a shard with
SHAPE_DEPENDENT = {"kaiming_uniform_"}


def main(out_dir):
    dist.init_process_group("neuron")
    rank, world = dist.get_rank(), dist.get_world_size()
    checks = {}

    def check(name, body):
        try:
            body()
            checks[name] = "ok"
        except Exception:  # recorded, asserted by the test
            checks[name] = traceback.format_exc()

    meshes = {"1d": (init_device_mesh("neuron", (world,)),
                     [[Replicate()], [Shard(0)], [Shard(1)]])}
    if world == 4:
        meshes["2d"] = (init_device_mesh("neuron", (2, 2)),
                        [[Replicate(), Replicate()], [Shard(0), Replicate()], [Replicate(), Shard(0)],
                         [Shard(0), Shard(0)], [Shard(0), Shard(1)], [Shard(1), Shard(0)], [Replicate(), Shard(1)]])
    # (8, 16): shards of a multiple of 4 elements; (6,) and (10, 3): not (DTensor rounds each
    # shard's start offset up to 4, so only the shards themselves equal one device's draws there)
    for shape, mesh_name, (mesh, placement_list) in [(shape, *entry) for shape in [(8, 16), (6,), (10, 3)]
                                                     for entry in meshes.items()]:
        for placements in placement_list:
            if any(isinstance(p, Shard) and p.dim >= len(shape) for p in placements):
                continue
            for op_name, op in OPS.items():
                if op_name == "kaiming_uniform_" and len(shape) < 2:
                    continue  # fan-in needs 2 dimensions
                label = f"{mesh_name} {shape} {placements} {op_name}"

                def body(op=op, op_name=op_name, placements=placements, mesh=mesh, shape=shape):
                    torch.manual_seed(SEED)
                    x = distribute_tensor(torch.zeros(shape, device="neuron"), mesh, placements)
                    torch.manual_seed(SEED)
                    result = op(x)
                    local = result.to_local().cpu()
                    full = result.full_tensor().cpu()
                    offset_after = int(torch.neuron.get_rng_state()[8:].view(torch.int64))
                    # one device, the same seed
                    torch.manual_seed(SEED)
                    one_device = op(torch.zeros(shape, device="neuron")).cpu()
                    assert offset_after == int(torch.neuron.get_rng_state()[8:].view(torch.int64)), \
                        "the generator's offset after the op differs from one device's"
                    if op_name not in SHAPE_DEPENDENT:
                        # the local shard: one device's draw of its shape at the offset DTensor gives it
                        start, _ = random._rng_tracker._compute_rng_offsets(result._spec)
                        torch.manual_seed(SEED)
                        state = torch.neuron.get_rng_state()
                        state[8:] = torch.tensor([start], dtype=torch.int64).view(torch.uint8)
                        torch.neuron.set_rng_state(state)
                        piece = op(torch.zeros(local.shape, device="neuron")).cpu()
                        assert torch.equal(local, piece), f"the shard at offset {start} differs from one device's draw"
                    # shards that are row-major blocks in order (DTensor's first-shard sizes
                    # assume one split per dimension): the whole tensor is one device's draw
                    row_blocks = all(isinstance(p, Replicate) or p == Shard(0) for p in placements) and \
                        sum(p == Shard(0) for p in placements) <= 1
                    aligned = torch.tensor([int(local.numel() % 4 == 0)], device="neuron")
                    dist.all_reduce(aligned, op=dist.ReduceOp.MIN)
                    if row_blocks and int(aligned.item()):
                        assert torch.equal(full, one_device), "the DTensor differs from one device's draw"

                check(label, body)

    def user_generator():  # PyTorch's test_init_with_user_generator
        mesh = meshes["1d"][0]
        torch.manual_seed(42)
        generator = torch.Generator(device="neuron").manual_seed(42)
        a = dtensor.empty((8, 3), device_mesh=mesh, placements=[Shard(0)])
        b = dtensor.empty((8, 3), device_mesh=mesh, placements=[Shard(0)])
        for _ in range(2):  # the generator's offset advances on each use
            torch.nn.init.uniform_(a, 0.0, 1.0)
            torch.nn.init.uniform_(b, 0.0, 1.0, generator)
            assert torch.equal(a.full_tensor().cpu(), b.full_tensor().cpu())

    check("user generator", user_generator)

    def tensor_parallel_init():  # sharded initialisation of a column-parallel Linear from meta
        from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module
        mesh = meshes["1d"][0]
        with torch.device("meta"):
            model = torch.nn.Linear(16, 8 * world, bias=False)
        parallelize_module(model, mesh, ColwiseParallel())
        model.to_empty(device="neuron")
        torch.manual_seed(SEED)
        model.reset_parameters()
        full = model.weight.full_tensor().cpu()
        torch.manual_seed(SEED)
        reference = torch.nn.Linear(16, 8 * world, bias=False, device="neuron").weight.cpu()
        assert torch.equal(full, reference), "a column-parallel Linear's weight differs from one device's"

    check("tensor parallel init", tensor_parallel_init)

    def dropout_under_tensor_parallel():  # a replicated activation: every rank drops the same elements
        mesh = meshes["1d"][0]
        torch.manual_seed(SEED)
        x = distribute_tensor(torch.ones(4, 64, device="neuron"), mesh, [Replicate()])
        local = F.dropout(x, 0.5).to_local()
        gathered = [torch.empty_like(local) for _ in range(world)]
        dist.all_gather(gathered, local)
        assert all(torch.equal(g.cpu(), local.cpu()) for g in gathered)

    check("dropout replicated", dropout_under_tensor_parallel)

    def user_generator_reseeded():  # the generator's own state, not one DTensor kept a copy of
        mesh = meshes["1d"][0]
        generator = torch.Generator(device="neuron")
        a = dtensor.empty((8, 3), device_mesh=mesh, placements=[Shard(0)])
        b = dtensor.empty((8, 3), device_mesh=mesh, placements=[Shard(0)])
        for seed in (55, 56):
            torch.manual_seed(seed)
            generator.manual_seed(seed)
            torch.nn.init.uniform_(a, 0.0, 1.0)
            torch.nn.init.uniform_(b, 0.0, 1.0, generator)
            assert torch.equal(a.full_tensor().cpu(), b.full_tensor().cpu()), seed

    check("user generator reseeded", user_generator_reseeded)

    def multinomial_sharded():
        mesh = meshes["1d"][0]
        torch.manual_seed(SEED)
        probs = torch.rand(4 * world, 4, device="neuron")
        probs = probs / probs.sum(-1, keepdim=True)
        rows = dtensor.distribute_tensor(probs, mesh, [Shard(0)])
        result = torch.multinomial(rows, 2, replacement=True)
        assert isinstance(result, dtensor.DTensor) and tuple(result.placements) == (Shard(0),)
        assert result.shape == (4 * world, 2)
        columns = dtensor.distribute_tensor(probs, mesh, [Shard(1)])  # categories: gathered first
        result = torch.multinomial(columns, 2, replacement=True)
        assert tuple(result.placements) == (Replicate(),) and result.shape == (4 * world, 2)
        assert int(result.to_local().max()) < 4

    check("multinomial sharded", multinomial_sharded)

    def meta_init_replicated():  # a replicated tensor made from meta: the same values on every rank
        mesh = meshes["1d"][0]
        meta = distribute_tensor(torch.empty(64, 32, device="meta"), mesh, [Replicate()])
        for enabled in (True, False):
            torch.neuron.manual_seed(0)
            made = torch.empty_like(meta, device="neuron")
            if random._rng_tracker is not None:
                random._rng_tracker.distribute_region_enabled = enabled
            made.uniform_()
            local = made.to_local()
            gathered = [torch.empty_like(local) for _ in range(world)]
            dist.all_gather(gathered, local)
            assert all(torch.equal(g.cpu(), local.cpu()) for g in gathered), enabled
        random._rng_tracker.distribute_region_enabled = True

    check("meta init replicated", meta_init_replicated)

    def tracker_made_by_the_first_random_op():
        random._rng_tracker = None
        torch.manual_seed(SEED + rank)  # different seeds on the ranks
        x = distribute_tensor(torch.empty(world * 4, device="neuron"), meshes["1d"][0], [Shard(0)])
        assert random._rng_tracker is None, "made by distribute_tensor"
        x.uniform_(0, 1)
        assert isinstance(random._rng_tracker, random.OffsetBasedRNGTracker)
        # the tracker's start synchronises every rank's device generator with rank 0's (DTensor 2.13,
        # deprecated with a warning): it changes the device's generator, it keeps no copy
        assert torch.neuron.initial_seed() == SEED, torch.neuron.initial_seed()

    check("tracker made by the first random op", tracker_made_by_the_first_random_op)

    def manual_seed_on_a_mesh():
        mesh = meshes["1d"][0]
        random.manual_seed(100 + rank, mesh)  # no collective: the seed is taken as given
        assert torch.neuron.initial_seed() == 100 + rank
        random.manual_seed(1234, mesh)
        assert torch.neuron.initial_seed() == 1234
        outside = DeviceMesh("neuron", [(rank + 1) % world], _rank=rank)
        try:
            random.manual_seed(rank, outside)
        except RuntimeError as error:
            assert "part of the device mesh" in str(error), error
        else:
            raise AssertionError("manual_seed on a mesh without this rank did not raise")

    check("manual seed on a mesh", manual_seed_on_a_mesh)

    def philox_state_round_trip():  # a seed with the top bit set, read and written back
        state = torch.neuron.get_rng_state()
        philox = random._PhiloxState(state.clone())
        philox.seed = torch.tensor([2**63 + 42], dtype=torch.uint64)
        philox.seed = philox.seed.clone()
        philox.offset = torch.tensor([8], dtype=torch.uint64)
        torch.neuron.set_rng_state(philox.state)
        assert torch.neuron.initial_seed() == 2**63 + 42
        torch.neuron.set_rng_state(state)

    check("philox state round trip", philox_state_round_trip)

    def checkpointed_dtensor_dropout():  # DTensor's offsets replayed by activation checkpointing
        import torch.utils.checkpoint as cp
        mesh = meshes["1d"][0]
        torch.manual_seed(0)
        linear = torch.nn.Linear(16, 16, device="neuron")
        weight = distribute_tensor(linear.weight.detach(), mesh, [Shard(0)])

        def block(x):
            return F.dropout(F.linear(x, weight.redistribute(mesh, [Replicate()])), 0.5) * 3

        def run(checkpointed):
            torch.manual_seed(SEED)
            x = distribute_tensor(torch.ones(8, 16, device="neuron"), mesh, [Shard(0)]).requires_grad_()
            out = cp.checkpoint(block, x, use_reentrant=False) if checkpointed else block(x)
            out.sum().backward()
            return out.full_tensor().cpu(), x.grad.full_tensor().cpu(), torch.neuron.get_rng_state()
        for a, b in zip(run(False), run(True)):
            assert torch.equal(a, b)

    check("checkpointed dtensor dropout", checkpointed_dtensor_dropout)

    if world == 4:
        def pipeline_stage_seeds():  # a seed per pipeline stage on a (pp, spmd) mesh
            world_mesh = init_device_mesh("neuron", (2, 2), mesh_dim_names=("pp", "spmd"))
            pp_rank, spmd = world_mesh["pp"].get_local_rank(), world_mesh["spmd"]
            random.manual_seed(123 + pp_rank, spmd)
            assert torch.neuron.initial_seed() == 123 + pp_rank
            weight = dtensor.ones(2 * spmd.size(), 2, device_mesh=spmd, placements=[Shard(0)])
            torch.nn.init.normal_(weight)
            local = weight.to_local()
            gathered = [torch.empty_like(local) for _ in range(world)]
            dist.all_gather(gathered, local)
            assert all(not torch.equal(g.cpu(), local.cpu()) for i, g in enumerate(gathered) if i != rank)

        check("pipeline stage seeds", pipeline_stage_seeds)

        def fsdp_and_tp_from_meta():  # FSDP2 over TP, initialised from meta: distinct shards, reproducible
            from torch.distributed.fsdp import fully_shard
            from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module
            mesh = init_device_mesh("neuron", (2, 2), mesh_dim_names=("dp", "tp"))

            def made():
                with torch.device("meta"):
                    model = torch.nn.Linear(8, 16, bias=False)
                parallelize_module(model, mesh["tp"], ColwiseParallel())
                fully_shard(model, mesh=mesh["dp"])
                model.to_empty(device="neuron")
                torch.manual_seed(SEED)
                model.reset_parameters()
                return model.weight.to_local().cpu()
            first, again = made(), made()
            assert torch.equal(first, again)
            gathered = [torch.empty_like(first).to("neuron") for _ in range(world)]
            dist.all_gather(gathered, first.to("neuron"))
            assert all(not torch.equal(g.cpu(), first) for i, g in enumerate(gathered) if i != rank)

        check("fsdp and tp from meta", fsdp_and_tp_from_meta)

    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as report:
        json.dump(checks, report)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
