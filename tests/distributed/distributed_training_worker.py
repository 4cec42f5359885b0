"""One rank of a distributed training test (tests/distributed/test_distributed_training.py starts it under
torchrun; the style of tests/distributed/distributed_worker.py).

    distributed_training_worker.py ddp OUT_DIR      DDP of a tiny Llama on neuron (backend "neuron"),
                                                    and its comm hooks (PowerSGD, fp16/bf16
                                                    compression), against one CPU device
    distributed_training_worker.py ddp_powersgd_buckets OUT_DIR
                                                    PowerSGD over several buckets ready back to back
    distributed_training_worker.py fsdp OUT_DIR     FSDP2 (fully_shard, fp32 and bf16 mixed
                                                    precision) on init_device_mesh("neuron", (2,)),
                                                    sharding, and a DCP checkpoint's round trip
    distributed_training_worker.py dtensor OUT_DIR  4 ranks: a (dp, tp) = (2, 2) neuron mesh,
                                                    DTensor placements, tensor-parallel MLP,
                                                    functional collectives
    distributed_training_worker.py trainer OUT_DIR  transformers' Trainer with DDP on neuron

Each rank writes OUT_DIR/rank<r>.json: {check name: [passed, detail]}. A check compares with
the same computation on one device (the CPU, the same ATen kernels); no result is hard-coded.
"""
import datetime
import gc
import math
import os
import sys

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))  # tests/: tiny_models.py
from distributed_report import RESULTS, check, write  # noqa: E402

NEURON = torch.device("neuron")
CPU = torch.device("cpu")

STEPS = 20
GLOBAL_BATCH = 4  # sequences per step over all ranks
SEQ = 16
LR = 3e-3
# The DDP gradient buckets: small, so that a step reduces several buckets (ordering, hooks).
BUCKET_CAP_MB = 0.1


def finish(out_dir, *holders):
    """Writes the report, frees what holds the process group (a DDP Reducer that outlives
    destroy_process_group() frees the group's last reference with the GIL held, and the Gloo
    transport's destructor then waits for its thread, which may need the GIL: a hang that
    upstream Gloo has too), then destroys the group."""
    write(out_dir)
    for holder in holders:
        holder.clear()
    gc.collect()
    dist.destroy_process_group()


# ---- the model, the data, one device's training -----------------------------------------------

def tiny_llama(seed=0):
    from tiny_models import build
    return build("llama", seed=seed).train()


def batches(steps=STEPS, vocab=128):
    """The global batches, the same on every rank and run: `steps` (GLOBAL_BATCH, SEQ) token ids,
    each row counting from a random start by a random stride of 1 to 3 (modulo the vocabulary),
    which a tiny model learns in a few steps (random tokens would leave the loss at log(vocab))."""
    generator = torch.Generator().manual_seed(1234)
    out = []
    for _ in range(steps):
        start = torch.randint(0, vocab, (GLOBAL_BATCH, 1), generator=generator)
        stride = torch.randint(1, 4, (GLOBAL_BATCH, 1), generator=generator)
        out.append((start + stride * torch.arange(SEQ)) % vocab)
    return out


def local(batch, rank, world):
    """This rank's rows of a global batch (equal slices, so the mean of the ranks' mean losses
    is the global batch's mean loss)."""
    rows = batch.shape[0] // world
    return batch[rank * rows:(rank + 1) * rows]


def lm_loss(model, ids):
    return model(input_ids=ids, labels=ids).loss


def train_one_device(model, device, steps=STEPS):
    """The reference: the whole global batch on one device. Returns the losses."""
    model = model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    losses = []
    for batch in batches(steps):
        optimizer.zero_grad(set_to_none=True)
        loss = lm_loss(model, batch.to(device))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def global_mean(value):
    """The mean over the ranks of a Python float (each rank's loss of its rows)."""
    t = torch.tensor([value], dtype=torch.float64, device=NEURON)
    dist.all_reduce(t)
    return t.item() / dist.get_world_size()


def flat_params(model):
    return torch.cat([p.detach().float().reshape(-1).cpu() for p in model.parameters()])


def same_on_every_rank(tensor):
    """Asserts that `tensor` (CPU) is bitwise the same on every rank; returns its max abs value."""
    mine = tensor.to(NEURON)
    gathered = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, mine)
    for r, other in enumerate(gathered):
        assert torch.equal(other.cpu(), tensor), \
            f"rank {r} differs from rank {dist.get_rank()}: max |diff| {(other.cpu() - tensor).abs().max().item()}"
    return tensor.abs().max().item()


def close(got, expected, rtol, atol, what):
    got, expected = torch.tensor(got, dtype=torch.float64), torch.tensor(expected, dtype=torch.float64)
    assert got.shape == expected.shape, (what, got.shape, expected.shape)
    diff = (got - expected).abs()
    bound = atol + rtol * expected.abs()
    bad = (diff > bound).nonzero().flatten().tolist()
    assert not bad, (f"{what}: {len(bad)} of {len(got)} differ beyond rtol={rtol} atol={atol}, first at "
                     f"{bad[0]}: got {got[bad[0]].item()} expected {expected[bad[0]].item()}\n"
                     f"got      {got.tolist()}\nexpected {expected.tolist()}")
    return f"max |diff| {diff.max().item():.3g}"


def init(timeout=120, backend="neuron"):
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout))
    return dist.get_rank(), dist.get_world_size()


# ---- DDP --------------------------------------------------------------------------------------

def train_ddp(rank, world, hook=None, hook_state=None, steps=STEPS, bucket_cap_mb=BUCKET_CAP_MB, device=NEURON):
    """DDP on `device` (neuron: backend "neuron"; cpu: Gloo) over the ranks, each with its rows
    of the global batches. Returns the global mean losses (the mean of the ranks' losses) and
    the DDP module."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = tiny_llama().to(device)
    ddp = DDP(model, device_ids=None, bucket_cap_mb=bucket_cap_mb)
    if hook is not None:
        ddp.register_comm_hook(hook_state, hook)
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=LR)
    losses = []
    for batch in batches(steps):
        optimizer.zero_grad(set_to_none=True)
        loss = lm_loss(ddp, local(batch, rank, world).to(device))
        loss.backward()
        optimizer.step()
        losses.append(global_mean(loss.item()))
    return losses, ddp


def ddp_scenario(out_dir):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    # Gloo for the CPU tensors of the PowerSGD reference run, "neuron" for the neuron tensors
    rank, world = init(backend="cpu:gloo,neuron:neuron")
    RESULTS["device"] = [True, f"{torch.neuron.current_device()} {dist.get_backend()}"]
    reference_model = tiny_llama()
    reference = train_one_device(reference_model, CPU)
    runs = {}

    @check("DDP: the losses of 20 steps equal one device's on the global batch")
    def _():
        losses, ddp = train_ddp(rank, world)
        runs["none"] = losses, ddp
        detail = close(losses, reference, rtol=1e-4, atol=1e-5, what="losses")
        return f"{detail}; first {losses[0]:.4f} last {losses[-1]:.4f}"

    @check("DDP: the trained parameters equal one device's and are the same on every rank")
    def _():
        got, expected = flat_params(runs["none"][1].module), flat_params(reference_model)
        same_on_every_rank(got)
        torch.testing.assert_close(got, expected, rtol=1e-3, atol=5e-5)  # AdamW's steps are lr=3e-3
        return f"max |diff| {(got - expected).abs().max().item():.3g} over {got.numel()} values"

    def bf16_hook(state, bucket):
        # DDP.register_comm_hook refuses a hook *named* bf16_compress_hook unless CUDA+NCCL or
        # XPU+XCCL (torch/nn/parallel/distributed.py, _check_comm_hook): PyTorch's policy, the
        # same for any other backend. The hook itself needs a bfloat16 allreduce, which "neuron" has.
        return default_hooks.bf16_compress_hook(state, bucket)

    hooks = {
        "fp16_compress_hook": (default_hooks.fp16_compress_hook, lambda: None),
        "bf16_compress_hook": (bf16_hook, lambda: None),
    }
    for name, (hook, state) in hooks.items():
        @check(f"DDP comm hook {name}: trains, the ranks stay equal, losses near no hook's")
        def _(name=name, hook=hook, state=state):
            losses, ddp = train_ddp(rank, world, hook=hook, hook_state=state())
            assert all(math.isfinite(v) for v in losses), losses
            same_on_every_rank(flat_params(ddp.module))
            baseline = runs["none"][0] if "none" in runs else reference
            # half-precision gradients: close to the full-precision run
            return close(losses, baseline, rtol=2e-2, atol=1e-3, what=f"{name} losses against no hook's")

    @check("DDP comm hook powerSGD_hook, one bucket: losses equal PowerSGD's on CPU (Gloo), it trains")
    def _():
        # One gradient bucket (DDP's default 25 MB): the hook's chained collectives (allreduce
        # .then(allreduce P, wait) .then(allreduce Q, wait)) never race with another bucket's,
        # so Gloo on CPU tensors runs it too. Its random projections are drawn on the CPU.
        baseline = runs["none"][0] if "none" in runs else reference
        losses, detail = powersgd(rank, world, baseline, bucket_cap_mb=25)
        assert detail.startswith("1 bucket"), detail
        cpu_losses, _ = powersgd(rank, world, reference, bucket_cap_mb=25, device=CPU)
        return f"{detail}; against CPU: {close(losses, cpu_losses, rtol=1e-4, atol=1e-5, what='losses')}"

    finish(out_dir, runs)


def powersgd(rank, world, baseline, bucket_cap_mb, device=NEURON):
    """DDP with PowerSGD (rank 2, compressing from the 3rd step); asserts that it trains and that
    the ranks stay equal. Returns the losses and a description."""
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

    state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=2, start_powerSGD_iter=3,
                                        min_compression_rate=2, use_error_feedback=True, warm_start=True,
                                        random_seed=0)
    buckets = set()

    def hook(state, bucket):
        buckets.add(bucket.index())
        return powerSGD_hook.powerSGD_hook(state, bucket)

    losses, ddp = train_ddp(rank, world, hook=hook, hook_state=state, bucket_cap_mb=bucket_cap_mb, device=device)
    buckets = len(buckets)
    assert all(math.isfinite(v) for v in losses), losses
    # every rank applied the same averaged (low-rank) gradients
    same_on_every_rank(flat_params(ddp.module))
    # a low-rank gradient: not the same steps, but it trains (20 steps: a part of the way)
    drop, baseline_drop = losses[0] - losses[-1], baseline[0] - baseline[-1]
    assert drop > 0.25 * baseline_drop, f"loss fell {drop:.4f} with PowerSGD, {baseline_drop:.4f} without: {losses}"
    return losses, (f"{buckets} bucket(s); first {losses[0]:.4f} last {losses[-1]:.4f} "
                    f"(no hook: last {baseline[-1]:.4f})")


def ddp_powersgd_buckets_scenario(out_dir):
    """PowerSGD over several gradient buckets that become ready back to back (a stack of small
    linear layers, whose backward is quick): each bucket's hook chains collectives in future
    callbacks (allreduce .then(allreduce P, wait) .then(allreduce Q, wait)), and every rank must
    issue them in the same order. NCCL completes a future at issue, so the callbacks run at once
    on the issuing thread; a backend whose futures complete later, on other threads, lets bucket
    k's P/Q allreduces race with bucket k+1's first one: Gloo then pairs collectives of different
    sizes (the process aborts in gloo::EnforceNotMet), or of equal sizes (the ranks silently
    diverge). Its own launch, with a short group timeout."""
    import torch.nn as nn
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, world = init(timeout=30)

    @check("DDP comm hook powerSGD_hook, several buckets ready back to back: the ranks' gradients are equal at "
           "every step, and it trains")
    def _():
        torch.manual_seed(0)
        layers = [nn.Linear(64, 64) for _ in range(8)]
        model = nn.Sequential(*[m for layer in layers for m in (layer, nn.Tanh())][:-1]).to(NEURON)
        ddp = DDP(model, bucket_cap_mb=0.02)  # 4 buckets once DDP has rebuilt them (after step 1)
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=2, start_powerSGD_iter=2,
                                            min_compression_rate=2, random_seed=0)
        buckets = set()

        def hook(state, bucket):
            buckets.add(bucket.index())
            return powerSGD_hook.powerSGD_hook(state, bucket)

        ddp.register_comm_hook(state, hook)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.2)
        generator = torch.Generator().manual_seed(3)
        x, y = torch.randn(4 * world, 64, generator=generator), torch.randn(4 * world, 64, generator=generator)
        rows = local(x, rank, world), local(y, rank, world)  # one batch, fitted a little more each step
        grads, losses = [], []
        for _ in range(STEPS):
            optimizer.zero_grad()
            loss = (ddp(rows[0].to(NEURON)) - rows[1].to(NEURON)).square().mean()
            loss.backward()
            grads.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]).cpu())
            optimizer.step()
            losses.append(global_mean(loss.item()))
        assert len(buckets) > 1, buckets
        every_step = torch.stack(grads)
        mine = every_step.to(NEURON)
        gathered = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(gathered, mine)
        for r, other in enumerate(gathered):
            differs = (other.cpu() != every_step).any(1).nonzero().flatten().tolist()
            assert not differs, f"rank {r}'s averaged gradients differ from this rank's at steps {differs}"
        same_on_every_rank(flat_params(model))
        assert all(math.isfinite(v) for v in losses), losses
        assert losses[-1] < 0.97 * losses[0], losses
        return f"{len(buckets)} buckets; loss {losses[0]:.4f} -> {losses[-1]:.4f}"

    finish(out_dir)


# ---- FSDP2 ------------------------------------------------------------------------------------

def fully_sharded(model, mesh, mp_policy=None):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    kwargs = {"mesh": mesh, "mp_policy": mp_policy or MixedPrecisionPolicy()}
    for layer in model.model.layers:
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    return model


def fsdp_scenario(out_dir):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy
    from torch.distributed.tensor import DTensor, Shard

    rank, world = init()
    mesh = init_device_mesh("neuron", (world,))
    RESULTS["mesh"] = [True, str(mesh)]
    reference_model = tiny_llama()
    reference = train_one_device(reference_model, CPU)
    full_model = tiny_llama()
    full_bytes = sum(p.numel() * p.element_size() for p in full_model.parameters())
    trained = {}

    def train(mp_policy, steps=STEPS):
        torch.neuron.synchronize()
        before = torch.neuron.memory_allocated()
        model = fully_sharded(tiny_llama(), mesh, mp_policy)
        torch.neuron.synchronize()
        sharded_bytes = torch.neuron.memory_allocated() - before
        optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
        # what a projection computes in, and the dtype of the sharded gradients
        seen = {}
        def record(module, args, output):
            seen.setdefault("compute", (args[0].dtype, module.weight.dtype))

        model.model.layers[0].self_attn.q_proj.register_forward_hook(record)
        losses = []
        for batch in batches(steps):
            optimizer.zero_grad(set_to_none=True)
            loss = lm_loss(model, local(batch, rank, world).to(NEURON))
            loss.backward()
            seen.setdefault("grads", {p.grad.dtype for p in model.parameters()})
            optimizer.step()
            losses.append(global_mean(loss.item()))
        trained[mp_policy.param_dtype if mp_policy else torch.float32] = seen
        return losses, model, optimizer, sharded_bytes

    @check("FSDP2 fp32: the losses of 20 steps equal one device's on the global batch")
    def _():
        losses, model, optimizer, sharded_bytes = train(None)
        trained["fp32"] = model, optimizer, sharded_bytes
        assert trained[torch.float32] == {"compute": (torch.float32, torch.float32), "grads": {torch.float32}}, trained
        return close(losses, reference, rtol=1e-4, atol=1e-5, what="losses")

    @check("FSDP2 fp32: the trained parameters (gathered) equal one device's")
    def _():
        model = trained["fp32"][0]
        got = torch.cat([p.full_tensor().detach().reshape(-1).cpu() for p in model.parameters()])
        expected = flat_params(reference_model)
        torch.testing.assert_close(got, expected, rtol=1e-3, atol=5e-5)
        return f"max |diff| {(got - expected).abs().max().item():.3g}"

    @check("FSDP2 bf16 params, fp32 reduce: the losses of 20 steps near one device's fp32")
    def _():
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        losses, model, _, _ = train(policy)
        assert all(math.isfinite(v) for v in losses), losses
        assert losses[-1] < losses[0] - 0.5 * (reference[0] - reference[-1]), (losses, reference)
        # the sharded parameters stay fp32; bf16 is the unsharded compute copy; gradients reduce in fp32
        assert all(p.dtype == torch.float32 for p in model.parameters())
        assert trained[torch.bfloat16] == {"compute": (torch.bfloat16, torch.bfloat16), "grads": {torch.float32}}, \
            trained[torch.bfloat16]
        return close(losses, reference, rtol=2e-2, atol=2e-2, what="bf16 losses against fp32 one device's")

    @check("FSDP2: each rank holds its shard only (Shard(0) DTensors, half the bytes)")
    def _():
        model, _, sharded_bytes = trained["fp32"]
        local_numel, full_numel = 0, 0
        for (name, p), full in zip(model.named_parameters(), full_model.parameters()):
            assert isinstance(p, DTensor), name
            assert p.placements == (Shard(0),) and p.device_mesh == mesh, (name, p.placements)
            assert p.shape == full.shape, (name, p.shape, full.shape)
            shard = p.to_local()
            assert shard.device.type == "neuron", (name, shard.device)
            rows = full.shape[0]
            expected_rows = len(range(rank * math.ceil(rows / world), min(rows, (rank + 1) * math.ceil(rows / world))))
            assert shard.shape[0] == expected_rows, (name, shard.shape, full.shape)
            # its values are this rank's rows of the unsharded parameter
            torch.testing.assert_close(p.full_tensor().cpu().narrow(0, rank * math.ceil(rows / world), expected_rows),
                                       shard.cpu(), rtol=0, atol=0)
            local_numel += shard.numel()
            full_numel += full.numel()
        assert local_numel <= 0.55 * full_numel, (local_numel, full_numel)
        assert sharded_bytes <= 0.6 * full_bytes, (sharded_bytes, full_bytes)
        return f"{local_numel} of {full_numel} values; {sharded_bytes} of {full_bytes} bytes allocated at fully_shard"

    @check("FSDP2: a DCP checkpoint loaded into a fresh sharded model restores the parameters and optimizer")
    def _():
        model, optimizer, _ = trained["fp32"]
        path = os.path.join(out_dir, "checkpoint")
        model_state, optim_state = get_state_dict(model, optimizer)
        dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=path)

        fresh = fully_sharded(tiny_llama(seed=7), mesh)
        fresh_optimizer = torch.optim.AdamW(fresh.parameters(), lr=LR)
        # the optimizer's state exists before loading (as after a first step)
        fresh_model_state, fresh_optim_state = get_state_dict(fresh, fresh_optimizer)
        differs = any(not torch.equal(a.to_local().cpu(), b.to_local().cpu())
                      for a, b in zip(model.parameters(), fresh.parameters()))
        assert differs, "the fresh model starts equal to the trained one: the check would prove nothing"
        state = {"model": fresh_model_state, "optim": fresh_optim_state}
        dcp.load(state, checkpoint_id=path)
        set_state_dict(fresh, fresh_optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        for (name, a), b in zip(model.named_parameters(), fresh.parameters()):
            assert torch.equal(a.to_local().cpu(), b.to_local().cpu()), name
            assert torch.equal(a.full_tensor().cpu(), b.full_tensor().cpu()), name
        # the restored optimizer takes the same next step
        batch = local(batches(STEPS + 1)[-1], rank, world).to(NEURON)
        steps = []
        for m, opt in ((model, optimizer), (fresh, fresh_optimizer)):
            opt.zero_grad(set_to_none=True)
            loss = lm_loss(m, batch)
            loss.backward()
            opt.step()
            steps.append(loss.item())
        assert steps[0] == steps[1], steps
        for (name, a), b in zip(model.named_parameters(), fresh.parameters()):
            assert torch.equal(a.to_local().cpu(), b.to_local().cpu()), f"after one more step: {name}"
        return f"{len(os.listdir(path))} files"

    finish(out_dir, trained)


# ---- DTensor on a 2-D mesh (4 ranks) ----------------------------------------------------------

def same_values(got, expected, what, rtol=0.0, atol=0.0):
    got = got.detach().cpu()
    assert got.dtype == expected.dtype and got.shape == expected.shape, (what, got.dtype, got.shape,
                                                                         expected.dtype, expected.shape)
    torch.testing.assert_close(got, expected, rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")


def rank_data(rank, shape, offset=0.0):
    """A rank-dependent float32 tensor, the same on every run (exact in float32 sums)."""
    n = math.prod(shape)
    return (torch.arange(n, dtype=torch.float32).reshape(shape) * (rank + 1) + 100 * rank + offset)


def dtensor_scenario(out_dir):
    import torch.distributed._functional_collectives as funcol
    import torch.nn as nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    rank, world = init()
    assert world == 4, world
    mesh = init_device_mesh("neuron", (2, 2), mesh_dim_names=("dp", "tp"))
    dp_mesh, tp_mesh = mesh["dp"], mesh["tp"]
    # rank = 2 * dp + tp: the tp group of rank r is {2 (r // 2), 2 (r // 2) + 1}, its dp group {r % 2, r % 2 + 2}
    tp_ranks = [2 * (rank // 2), 2 * (rank // 2) + 1]
    dp_ranks = [rank % 2, rank % 2 + 2]

    @check("mesh: (2, 2) neuron mesh, sub-meshes dp and tp with their ranks and groups")
    def _():
        assert mesh.device_type == "neuron" and mesh.shape == (2, 2), mesh
        assert mesh.mesh.tolist() == [[0, 1], [2, 3]], mesh.mesh
        assert tp_mesh.mesh.tolist() == tp_ranks and dp_mesh.mesh.tolist() == dp_ranks, (tp_mesh, dp_mesh)
        assert list(mesh.get_coordinate()) == [rank // 2, rank % 2], mesh.get_coordinate()
        for sub, ranks in ((tp_mesh, tp_ranks), (dp_mesh, dp_ranks)):
            group = sub.get_group()
            assert dist.get_process_group_ranks(group) == ranks, (dist.get_process_group_ranks(group), ranks)
            assert dist.get_backend(group) == "neuron", dist.get_backend(group)
            t = torch.full((3,), float(rank), device=NEURON)
            dist.all_reduce(t, group=group)
            same_values(t, torch.full((3,), float(sum(ranks))), f"all_reduce on {sub.mesh_dim_names}")
        return f"tp {tp_ranks} dp {dp_ranks}; device neuron:{torch.neuron.current_device()}"

    full = torch.randn(8, 12, generator=torch.Generator().manual_seed(5))  # the same on every rank

    @check("distribute_tensor: each rank holds its slice, full_tensor() is the original (1-D and 2-D meshes)")
    def _():
        cases = [(tp_mesh, [Shard(0)], lambda: full.chunk(2, 0)[rank % 2]),
                 (tp_mesh, [Shard(1)], lambda: full.chunk(2, 1)[rank % 2]),
                 (dp_mesh, [Shard(0)], lambda: full.chunk(2, 0)[rank // 2]),
                 (tp_mesh, [Replicate()], lambda: full),
                 (mesh, [Shard(0), Shard(1)], lambda: full.chunk(2, 0)[rank // 2].chunk(2, 1)[rank % 2]),
                 (mesh, [Replicate(), Shard(0)], lambda: full.chunk(2, 0)[rank % 2]),
                 (mesh, [Shard(1), Shard(1)], lambda: full.chunk(2, 1)[rank // 2].chunk(2, 1)[rank % 2])]
        for sub, placements, expected_local in cases:
            d = distribute_tensor(full.to(NEURON), sub, placements)
            what = f"{sub.mesh_dim_names} {placements}"
            assert d.to_local().device.type == "neuron", what
            same_values(d.to_local(), expected_local().contiguous(), f"local shard {what}")
            same_values(d.full_tensor(), full, f"full_tensor {what}")
        return f"{len(cases)} placements"

    @check("redistribute: Shard <-> Replicate, Shard(0) -> Shard(1), Partial -> Replicate / Shard equal the original")
    def _():
        d = distribute_tensor(full.to(NEURON), tp_mesh, [Shard(0)])
        r = d.redistribute(tp_mesh, [Replicate()])
        same_values(r.to_local(), full, "Shard(0) -> Replicate")
        s1 = r.redistribute(tp_mesh, [Shard(1)])
        same_values(s1.to_local(), full.chunk(2, 1)[rank % 2].contiguous(), "Replicate -> Shard(1)")
        s0 = s1.redistribute(tp_mesh, [Shard(0)])  # all-to-all
        same_values(s0.to_local(), full.chunk(2, 0)[rank % 2].contiguous(), "Shard(1) -> Shard(0)")
        two_d = distribute_tensor(full.to(NEURON), mesh, [Shard(0), Shard(1)])
        two_d = two_d.redistribute(mesh, [Replicate(), Replicate()])
        same_values(two_d.to_local(), full, "[Shard(0), Shard(1)] -> Replicate on both dims")
        # Partial: each tp rank holds a part of the sum
        part = rank_data(rank, (4, 6))
        partial = DTensor.from_local(part.to(NEURON), tp_mesh, [Partial()])
        expected_sum = sum(rank_data(r, (4, 6)) for r in tp_ranks)
        same_values(partial.redistribute(tp_mesh, [Replicate()]).to_local(), expected_sum, "Partial -> Replicate")
        same_values(partial.redistribute(tp_mesh, [Shard(0)]).to_local(),
                    expected_sum.chunk(2, 0)[rank % 2].contiguous(), "Partial -> Shard(0) (reduce-scatter)")
        same_values(partial.full_tensor(), expected_sum, "Partial full_tensor")

    @check("DTensor ops: a sharded matmul and a sum equal the full tensors'")
    def _():
        other = torch.randn(12, 5, generator=torch.Generator().manual_seed(6))
        a = distribute_tensor(full.to(NEURON), tp_mesh, [Shard(1)])
        b = distribute_tensor(other.to(NEURON), tp_mesh, [Shard(0)])
        product = a @ b  # Partial, then reduced
        same_values(product.full_tensor(), full @ other, "Shard(1) @ Shard(0)", rtol=1e-5, atol=1e-5)
        same_values(distribute_tensor(full.to(NEURON), mesh, [Shard(0), Shard(1)]).sum().full_tensor(), full.sum(),
                    "sum over a 2-D sharding", rtol=1e-5, atol=1e-5)

    @check("parallelize_module: ColwiseParallel / RowwiseParallel MLP on mesh['tp'] equals the unsharded one "
           "(forward, gradients, 3 optimizer steps)")
    def _():
        torch.manual_seed(11)
        reference = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))
        model.load_state_dict(reference.state_dict())
        model = parallelize_module(model.to(NEURON), tp_mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
        assert model[0].weight.placements == (Shard(0),) and model[2].weight.placements == (Shard(1),), \
            (model[0].weight.placements, model[2].weight.placements)
        assert model[0].weight.to_local().shape == (16, 16) and model[2].weight.to_local().shape == (16, 16)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
        generator = torch.Generator().manual_seed(12 + rank // 2)  # the same input across a tp group
        for step in range(3):
            x = torch.randn(4, 16, generator=generator)
            out = model(x.to(NEURON))
            expected = reference(x)
            assert not isinstance(out, DTensor), type(out)
            same_values(out, expected, f"step {step}: output", rtol=1e-5, atol=1e-6)
            out.square().sum().backward()
            expected.square().sum().backward()
            for name, p in model.named_parameters():
                ref = dict(reference.named_parameters())[name]
                same_values(p.grad.full_tensor(), ref.grad, f"step {step}: grad of {name}", rtol=1e-5, atol=1e-5)
            optimizer.step()
            reference_optimizer.step()
            optimizer.zero_grad()
            reference_optimizer.zero_grad()
        for name, p in model.named_parameters():
            same_values(p.full_tensor(), dict(reference.named_parameters())[name].detach(), f"trained {name}",
                        rtol=1e-5, atol=1e-5)

    groups = {"world": (None, list(range(world))), "tp": (tp_mesh, tp_ranks), "dp": (dp_mesh, dp_ranks)}
    for label, (group, ranks) in groups.items():
        @check(f"functional collectives on {label}: all_reduce, all_gather_tensor, reduce_scatter_tensor, "
               "all_to_all_single")
        def _(group=group, ranks=ranks, label=label):
            group = group if group is not None else dist.group.WORLD
            n, me = len(ranks), ranks.index(rank)
            mine = rank_data(rank, (4, 3))
            summed = funcol.all_reduce(mine.to(NEURON), "sum", group)
            same_values(funcol.wait_tensor(summed), sum(rank_data(r, (4, 3)) for r in ranks), "all_reduce sum")
            largest = funcol.all_reduce(mine.to(NEURON), "max", group)
            same_values(funcol.wait_tensor(largest), torch.stack([rank_data(r, (4, 3)) for r in ranks]).amax(0),
                        "all_reduce max")
            gathered = funcol.all_gather_tensor(mine.to(NEURON), 0, group)
            same_values(funcol.wait_tensor(gathered), torch.cat([rank_data(r, (4, 3)) for r in ranks], 0),
                        "all_gather_tensor dim 0")
            gathered1 = funcol.all_gather_tensor(mine.to(NEURON), 1, group)
            same_values(funcol.wait_tensor(gathered1), torch.cat([rank_data(r, (4, 3)) for r in ranks], 1),
                        "all_gather_tensor dim 1")
            big = rank_data(rank, (2 * n, 3))
            scattered = funcol.reduce_scatter_tensor(big.to(NEURON), "sum", 0, group)
            same_values(funcol.wait_tensor(scattered),
                        sum(rank_data(r, (2 * n, 3)) for r in ranks).chunk(n, 0)[me].contiguous(),
                        "reduce_scatter_tensor sum dim 0")
            averaged = funcol.reduce_scatter_tensor(big.to(NEURON), "avg", 0, group)
            same_values(funcol.wait_tensor(averaged),
                        (sum(rank_data(r, (2 * n, 3)) for r in ranks) / n).chunk(n, 0)[me].contiguous(),
                        "reduce_scatter_tensor avg dim 0")
            exchanged = funcol.all_to_all_single(big.to(NEURON), None, None, group)
            same_values(funcol.wait_tensor(exchanged),
                        torch.cat([rank_data(r, (2 * n, 3)).chunk(n, 0)[me] for r in ranks], 0),
                        "all_to_all_single")
            return f"group of {n}: {ranks}"

    finish(out_dir)


# ---- transformers' Trainer --------------------------------------------------------------------

def trainer_scenario(out_dir):
    """transformers' Trainer under torchrun, as a user runs it: no process group made by hand;
    TrainingArguments make it (through accelerate's PartialState), on the device it picks."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    from transformers import Trainer, TrainingArguments

    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    RESULTS["device module loaded by import torch"] = [hasattr(torch, "neuron"), ""]
    samples = [{"input_ids": row, "labels": row} for batch in batches(6) for row in batch]
    args = TrainingArguments(output_dir=os.path.join(out_dir, "trainer"), max_steps=6, per_device_train_batch_size=2,
                             learning_rate=LR, logging_steps=1, report_to=[], save_strategy="no", seed=0,
                             disable_tqdm=True, dataloader_num_workers=0)
    model = tiny_llama()
    initial = flat_params(model)
    trainer = Trainer(model=model, args=args, train_dataset=samples)
    result = trainer.train()

    @check("Trainer: device neuron:LOCAL_RANK, distributed over the ranks with backend neuron")
    def _():
        from accelerate.utils import DistributedType
        from transformers.training_args import ParallelMode
        assert args.device == torch.device("neuron", local_rank), args.device
        assert args.parallel_mode == ParallelMode.DISTRIBUTED, args.parallel_mode
        assert args.world_size == 2 and args.process_index == rank, (args.world_size, args.process_index)
        assert args.distributed_state.distributed_type == DistributedType.MULTI_NEURON, \
            args.distributed_state.distributed_type
        assert dist.is_initialized() and dist.get_backend() == "neuron", dist.get_backend()
        assert isinstance(trainer.model_wrapped, DDP), type(trainer.model_wrapped)
        assert next(trainer.model.parameters()).device == torch.device("neuron", local_rank)
        return f"{args.device}, {args.distributed_state.distributed_type}, backend {dist.get_backend()}"

    @check("Trainer: 6 steps, finite losses, the ranks end with the same parameters, which changed")
    def _():
        losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
        assert trainer.state.global_step == 6, trainer.state.global_step
        assert len(losses) == 6 and all(math.isfinite(v) for v in losses), trainer.state.log_history
        assert math.isfinite(result.training_loss), result
        final = flat_params(trainer.model)
        same_on_every_rank(final)
        assert (final - initial).abs().max().item() > 1e-4, "the parameters did not change"
        return f"losses {[round(v, 4) for v in losses]}"

    del trainer  # and its DDP module, before the group is destroyed
    finish(out_dir)


# ---- main -------------------------------------------------------------------------------------

if __name__ == "__main__":
    scenario, out = sys.argv[1], sys.argv[2]
    if scenario != "trainer":  # the Trainer's script is a user's: `import torch` loads the device (entry point)
        import torch_neuronx  # noqa: F401  (registers the device and the backend)
    scenarios = {"ddp": ddp_scenario, "ddp_powersgd_buckets": ddp_powersgd_buckets_scenario, "fsdp": fsdp_scenario,
                 "dtensor": dtensor_scenario, "trainer": trainer_scenario}
    if scenario not in scenarios:
        raise SystemExit(f"unknown scenario {scenario}")
    scenarios[scenario](out)
