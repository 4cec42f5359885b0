"""Review 11 sweep (kept as a test): values of hierarchical allreduce/broadcast/barrier for
several host layouts (contiguous, interleaved, 3+1, 1+3) and a subgroup spanning hosts,
interleaved with whole-group Gloo collectives (all_gather) and async issue."""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _ranks_on_fake_hosts import run


def body(rank, world):
    import torch, torch.distributed as dist
    from torch_neuron_sim import _C
    D = "neuron"
    info = _C._process_group_hierarchy(dist.group.WORLD._get_backend(torch.device(D)))
    errs = []

    def check(name, got, want):
        if not torch.equal(got.cpu(), want):
            errs.append(f"{name}: got {got.cpu().flatten()[:4].tolist()} want {want.flatten()[:4].tolist()}")

    total = sum(range(1, world + 1))
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64, torch.uint8, torch.int8):
        t = torch.full((1000,), rank + 1, dtype=dtype, device=D)
        dist.all_reduce(t)
        check(f"sum {dtype}", t, torch.full((1000,), total, dtype=dtype))
    t = torch.tensor([rank == 0, True, rank == 1], device=D)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    check("bool max", t, torch.tensor([True, True, True]))
    t = torch.tensor([rank == 0, True, rank == 1], device=D)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    check("bool min", t, torch.tensor([False, True, False]))
    t = torch.tensor([rank == 0, False, True], device=D)
    dist.all_reduce(t)
    check("bool sum", t, torch.tensor([True, False, True]))
    t = torch.full((7,), float(rank + 1), device=D)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    check("avg", t, torch.full((7,), total / world))
    t = torch.full((7,), rank + 1, dtype=torch.int64, device=D)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    check("avg int", t, torch.full((7,), total // world))
    t = torch.full((7,), float(rank + 1), device=D)
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
    check("premul", t, torch.full((7,), total * 0.5))
    for op, want in ((dist.ReduceOp.MAX, world), (dist.ReduceOp.MIN, 1), (dist.ReduceOp.PRODUCT, 24 if world == 4 else 6)):
        t = torch.full((5,), float(rank + 1), device=D)
        dist.all_reduce(t, op=op)
        check(f"{op}", t, torch.full((5,), float(want)))
    for op, want in ((dist.ReduceOp.BAND, 0), (dist.ReduceOp.BOR, (1 << world) - 1), (dist.ReduceOp.BXOR, (1 << world) - 1)):
        t = torch.full((5,), 1 << rank, dtype=torch.int32, device=D)
        dist.all_reduce(t, op=op)
        check(f"{op}", t, torch.full((5,), want, dtype=torch.int32))
    for root in range(world):
        for dtype in (torch.float32, torch.int16, torch.uint16, torch.float8_e4m3fn, torch.complex64):
            t = torch.full((33,), rank * 10 + root, device=D).to(dtype)
            dist.broadcast(t, src=root)
            check(f"bcast root {root} {dtype}", t, torch.full((33,), root * 10 + root).to(dtype))
    dist.barrier()
    # async mix: hierarchical allreduce, Gloo all_gather, hierarchical broadcast, in one go
    works, outs = [], []
    for i in range(6):
        a = torch.full((4096,), float(rank + i), device=D)
        works.append(dist.all_reduce(a, async_op=True)); outs.append(("ar", i, a))
        g = torch.zeros(world * 3, device=D)
        works.append(dist.all_gather_into_tensor(g, torch.full((3,), float(rank + i), device=D), async_op=True))
        outs.append(("ag", i, g))
        b = torch.full((100,), float(rank * 100 + i), device=D)
        works.append(dist.broadcast(b, src=i % world, async_op=True)); outs.append(("bc", i, b))
    for w in works:
        w.wait()
    for kind, i, x in outs:
        if kind == "ar":
            check(f"async ar {i}", x, torch.full((4096,), float(total - world + world * i)))
        elif kind == "ag":
            check(f"async ag {i}", x, torch.tensor([float(r + i) for r in range(world) for _ in range(3)]))
        else:
            check(f"async bc {i}", x, torch.full((100,), float((i % world) * 100 + i)))
    # a subgroup spanning hosts: ranks 1..world-1
    sub = dist.new_group(list(range(1, world)))
    if rank >= 1:
        t = torch.full((10,), float(rank), device=D)
        dist.all_reduce(t, group=sub)
        check("sub sum", t, torch.full((10,), float(sum(range(1, world)))))
        t = torch.full((10,), float(rank), device=D)
        dist.broadcast(t, src=world - 1, group=sub)
        check("sub bcast", t, torch.full((10,), float(world - 1)))
        dist.barrier(group=sub)
        subinfo = _C._process_group_hierarchy(sub._get_backend(torch.device(D)))
    else:
        subinfo = "-"
    dist.barrier()
    dist.destroy_process_group()
    assert not errs, errs
    return f"ok; world hierarchy={info}; sub={subinfo}"


if __name__ == "__main__":
    layouts = [[0, 0, 1, 1], [0, 1, 0, 1], [0, 0, 0, 1], [0, 1, 1, 1]]
    if len(sys.argv) > 1:
        layouts = [[int(c) for c in sys.argv[1].split(",")]]
    ok = all([run(body, layout, timeout=150, pg_timeout=30) for layout in layouts])
    sys.exit(0 if ok else 1)
