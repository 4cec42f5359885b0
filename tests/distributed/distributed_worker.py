"""One rank of a distributed test (tests/distributed/test_distributed*.py start it under torchrun, or as
plain processes with RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT set).

    distributed_worker.py ops OUT_DIR     every collective on neuron tensors (backend "neuron")
                                          against the same collective on CPU tensors (Gloo), in
                                          one group "cpu:gloo,neuron:neuron"
    distributed_worker.py faults OUT_DIR  a peer that does not call (timeout), a peer killed
                                          during an allreduce
    distributed_worker.py tp MODEL OUT    tensor-parallel greedy generation

Each rank writes OUT_DIR/rank<r>.json: {check name: [passed, detail]}.
"""
import datetime
import json
import os
import signal
import sys
import time
import traceback

import torch
import torch.distributed as dist

NEURON = torch.device("neuron")
RESULTS = {}


def check(name):
    """Decorator: runs the check now and records [passed, detail]."""
    def run(function):
        try:
            detail = function()
            RESULTS[name] = [True, detail or ""]
        except Exception:  # noqa: BLE001 - the report carries it
            RESULTS[name] = [False, traceback.format_exc(limit=6)]
        return function
    return run


def write(out_dir):
    with open(os.path.join(out_dir, f"rank{dist.get_rank() if dist.is_initialized() else os.environ['RANK']}.json"),
              "w") as out:
        json.dump(RESULTS, out, indent=1)


def same(cpu_results, neuron_results):
    """Asserts equal values, dtypes and shapes (neuron results moved to the CPU)."""
    assert len(cpu_results) == len(neuron_results), (len(cpu_results), len(neuron_results))
    for expected, got in zip(cpu_results, neuron_results):
        got = got.cpu()
        assert expected.dtype == got.dtype and expected.shape == got.shape, (expected, got)
        assert torch.equal(expected, got), f"\nexpected {expected}\ngot      {got}"


def data(shape, dtype, rank, offset=0):
    """A rank-dependent input, the same on every run."""
    n = 1
    for size in shape:
        n *= size
    values = torch.arange(n, dtype=torch.float64).reshape(shape) * (rank + 2) - 3 * rank + offset
    if dtype == torch.bool:
        return (values.long() % 3 == 0)
    if not dtype.is_floating_point:
        values = values.remainder(23)
    return values.to(dtype)


def compare(collective):
    """Runs `collective(device)` (which returns its result tensors) on CPU tensors (Gloo) and
    on neuron tensors (the neuron backend), and asserts the same results."""
    same(collective(torch.device("cpu")), collective(NEURON))


# ---- the ops scenario -------------------------------------------------------------------------

def ops_scenario(out_dir):
    dist.init_process_group("cpu:gloo,neuron:neuron", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    other = 1 - rank

    @check("one core per process, from LOCAL_RANK")
    def _():
        assert torch.neuron.current_device() == local_rank, (torch.neuron.current_device(), local_rank)
        core = torch.neuron.get_device_properties(local_rank).global_core_index
        return f"neuron:{torch.neuron.current_device()} core {core}"

    @check("transport: shared memory on one host unless NEURON_SIM_SHM_COLLECTIVES=0")
    def _():
        from torch_neuron_sim import _C
        backend = dist.group.WORLD._get_backend(NEURON)
        shared = _C._process_group_uses_shared_memory(backend)
        assert shared == (os.environ.get("NEURON_SIM_SHM_COLLECTIVES", "1") != "0"), shared
        return "shared memory" if shared else "gloo"

    reductions = [("SUM", dist.ReduceOp.SUM, torch.float32), ("PRODUCT", dist.ReduceOp.PRODUCT, torch.float32),
                  ("MIN", dist.ReduceOp.MIN, torch.float32), ("MAX", dist.ReduceOp.MAX, torch.float32),
                  ("BAND", dist.ReduceOp.BAND, torch.int32), ("BOR", dist.ReduceOp.BOR, torch.int32),
                  ("BXOR", dist.ReduceOp.BXOR, torch.int64), ("SUM", dist.ReduceOp.SUM, torch.bfloat16),
                  ("SUM", dist.ReduceOp.SUM, torch.float16), ("SUM", dist.ReduceOp.SUM, torch.float64),
                  ("SUM", dist.ReduceOp.SUM, torch.int64), ("MAX", dist.ReduceOp.MAX, torch.uint8),
                  ("MAX", dist.ReduceOp.MAX, torch.bool), ("AVG", dist.ReduceOp.AVG, torch.float32),
                  ("AVG", dist.ReduceOp.AVG, torch.bfloat16)]
    for op_name, op, dtype in reductions:
        @check(f"all_reduce {op_name} {dtype}")
        def _(op=op, dtype=dtype):
            def run(device):
                t = data((3, 5), dtype, rank).to(device)
                dist.all_reduce(t, op=op)
                return [t]
            compare(run)

    @check("all_reduce AVG int32 (truncating, as NCCL)")
    def _():
        t = data((7,), torch.int32, rank).to(NEURON)
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        total = sum(data((7,), torch.int32, r).long() for r in range(world))
        same([torch.div(total, world, rounding_mode="trunc").int()], [t])

    for kind in ("scalar", "tensor"):
        @check(f"all_reduce PREMUL_SUM ({kind} factor)")
        def _(kind=kind):
            factor = 0.25 if kind == "scalar" else torch.tensor(0.25, device=NEURON)
            t = data((4, 3), torch.float32, rank).to(NEURON)
            dist.all_reduce(t, op=dist._make_nccl_premul_sum(factor))
            expected = sum(data((4, 3), torch.float32, r) * 0.25 for r in range(world))
            same([expected], [t])

    @check("all_reduce of a non-contiguous tensor")
    def _():
        def run(device):
            t = data((4, 6), torch.float32, rank).to(device).t()
            dist.all_reduce(t)
            return [t.contiguous()]
        compare(run)

    @check("all_reduce of a view with a storage offset")
    def _():
        def run(device):
            base = data((10,), torch.float32, rank).to(device)
            dist.all_reduce(base[3:8])
            return [base]
        compare(run)

    @check("all_reduce_coalesced")
    def _():
        def run(device):
            ts = [data((3,), torch.float32, rank).to(device), data((2, 2), torch.float32, rank, 5).to(device)]
            dist.all_reduce_coalesced(ts)
            return ts
        compare(run)

    @check("all_reduce in a _coalescing_manager (AVG)")
    def _():
        ts = [data((3,), torch.float32, rank).to(NEURON), data((5,), torch.float32, rank, 1).to(NEURON)]
        with dist._coalescing_manager(async_ops=True) as manager:
            for t in ts:
                dist.all_reduce(t, op=dist.ReduceOp.AVG)
        manager.wait()
        expected = [sum(data((3,), torch.float32, r) for r in range(world)) / world,
                    sum(data((5,), torch.float32, r, 1) for r in range(world)) / world]
        same(expected, ts)

    for dtype in (torch.float32, torch.bfloat16, torch.int16):
        @check(f"all_gather {dtype}")
        def _(dtype=dtype):
            def run(device):
                outputs = [torch.zeros(2, 3, dtype=dtype, device=device) for _ in range(world)]
                dist.all_gather(outputs, data((2, 3), dtype, rank).to(device))
                return outputs
            if dtype == torch.int16:  # Gloo has no int16: compare with the expected values
                same([data((2, 3), dtype, r) for r in range(world)], run(NEURON))
            else:
                compare(run)

    @check("all_gather_into_tensor")
    def _():
        def run(device):
            output = torch.zeros(world * 4, device=device)
            dist.all_gather_into_tensor(output, data((4,), torch.float32, rank).to(device))
            return [output]
        compare(run)

    @check("all_gather_into_tensor into a flat output (NCCL needs only the element count; Accelerate's gather)")
    def _():
        t = torch.tensor([[rank, 10 + rank]], dtype=torch.int64, device=NEURON)
        output = torch.empty(world * t.numel(), dtype=torch.int64, device=NEURON)
        dist.all_gather_into_tensor(output, t)
        same([torch.tensor([v for r in range(world) for v in (r, 10 + r)])], [output])

    @check("all_gather_coalesced")
    def _():
        def run(device):
            inputs = [data((2,), torch.float32, rank).to(device), data((3,), torch.float32, rank, 7).to(device)]
            outputs = [[torch.zeros_like(t) for t in inputs] for _ in range(world)]
            dist.all_gather_coalesced(outputs, inputs)
            return [t for lst in outputs for t in lst]
        compare(run)

    @check("all_gather_into_tensor in a _coalescing_manager")
    def _():
        def run(device):
            inputs = [data((2,), torch.float32, rank).to(device), data((3,), torch.float32, rank, 7).to(device)]
            outputs = [torch.zeros(world * t.numel(), device=device) for t in inputs]
            with dist._coalescing_manager(async_ops=True) as manager:
                for output, t in zip(outputs, inputs):
                    dist.all_gather_into_tensor(output, t)
            manager.wait()
            return outputs
        compare(run)

    for op_name, op in (("SUM", dist.ReduceOp.SUM), ("MAX", dist.ReduceOp.MAX)):
        @check(f"reduce_scatter {op_name}")
        def _(op=op):
            def run(device):
                inputs = [data((2, 3), torch.float32, rank, i).to(device) for i in range(world)]
                output = torch.zeros(2, 3, device=device)
                dist.reduce_scatter(output, inputs, op=op)
                return [output]
            compare(run)

        @check(f"reduce_scatter_tensor {op_name}")
        def _(op=op):
            def run(device):
                output = torch.zeros(3, device=device)
                dist.reduce_scatter_tensor(output, data((world * 3,), torch.float32, rank).to(device), op=op)
                return [output]
            compare(run)

    @check("reduce_scatter_tensor AVG and PREMUL_SUM")
    def _():
        full = sum(data((world * 3,), torch.float32, r) for r in range(world))
        for op, expected in ((dist.ReduceOp.AVG, full / world),
                             (dist._make_nccl_premul_sum(0.5), sum(data((world * 3,), torch.float32, r) * 0.5
                                                                   for r in range(world)))):
            source = data((world * 3,), torch.float32, rank).to(NEURON)
            output = torch.zeros(3, device=NEURON)
            dist.reduce_scatter_tensor(output, source, op=op)
            same([expected[rank * 3:(rank + 1) * 3], data((world * 3,), torch.float32, rank)], [output, source])

    @check("reduce_scatter_tensor in a _coalescing_manager")
    def _():
        def run(device):
            inputs = [data((world * 2,), torch.float32, rank).to(device), data((world,), torch.float32, rank, 3).to(device)]
            outputs = [torch.zeros(t.numel() // world, device=device) for t in inputs]
            with dist._coalescing_manager(async_ops=True) as manager:
                for output, t in zip(outputs, inputs):
                    dist.reduce_scatter_tensor(output, t)
            manager.wait()
            return outputs
        compare(run)

    for root in (0, 1):
        for dtype in (torch.float32, torch.bfloat16):
            @check(f"broadcast from {root} {dtype}")
            def _(root=root, dtype=dtype):
                def run(device):
                    t = data((3, 4), dtype, rank).to(device)
                    dist.broadcast(t, src=root)
                    return [t]
                compare(run)

    @check("broadcast of uint16 (moved as bytes)")
    def _():
        t = data((5,), torch.int32, rank).to(torch.uint16).to(NEURON)
        dist.broadcast(t, src=1)
        same([data((5,), torch.int32, 1).to(torch.uint16)], [t])

    @check("broadcast is a broadcast (the root's NaN and inf arrive as they are)")
    def _():
        t = torch.tensor([float("nan"), float("inf"), -0.0], device=NEURON) if rank == 1 else \
            torch.tensor([1.0, float("-inf"), 5.0], device=NEURON)
        dist.broadcast(t, src=1)
        got = t.cpu()
        assert got[0].isnan() and got[1] == float("inf") and got[2] == 0 and got[2].signbit(), got

    for op_name, op in (("SUM", dist.ReduceOp.SUM), ("MAX", dist.ReduceOp.MAX)):
        @check(f"reduce to 1 {op_name}")
        def _(op=op):
            def run(device):
                t = data((2, 3), torch.float32, rank).to(device)
                dist.reduce(t, dst=1, op=op)
                return [t] if rank == 1 else []
            compare(run)

    @check("reduce to 1 AVG and PREMUL_SUM (a non-root input is left as it was)")
    def _():
        for op, expected in ((dist.ReduceOp.AVG, sum(data((4,), torch.float32, r) for r in range(world)) / world),
                             (dist._make_nccl_premul_sum(2.0), sum(data((4,), torch.float32, r) * 2 for r in range(world)))):
            t = data((4,), torch.float32, rank).to(NEURON)
            dist.reduce(t, dst=1, op=op)
            if rank == 1:
                same([expected], [t])
            elif op != dist.ReduceOp.AVG:
                same([data((4,), torch.float32, rank)], [t])

    @check("gather to 0")
    def _():
        def run(device):
            outputs = [torch.zeros(3, device=device) for _ in range(world)] if rank == 0 else None
            dist.gather(data((3,), torch.float32, rank).to(device), outputs, dst=0)
            return outputs or []
        compare(run)

    @check("scatter from 1")
    def _():
        def run(device):
            inputs = [data((2, 2), torch.float32, rank, i).to(device) for i in range(world)] if rank == 1 else None
            output = torch.zeros(2, 2, device=device)
            dist.scatter(output, inputs, src=1)
            return [output]
        compare(run)

    @check("all_to_all_single, even splits")
    def _():
        def run(device):
            output = torch.zeros(world * 2, 3, device=device)
            dist.all_to_all_single(output, data((world * 2, 3), torch.float32, rank).to(device))
            return [output]
        compare(run)

    # uneven: rank 0 sends 1 row to 0 and 3 to 1; rank 1 sends 2 and 2
    send_splits = [[1, 3], [2, 2]]
    for dtype in (torch.float32, torch.int16):
        @check(f"all_to_all_single, uneven splits {dtype}")
        def _(dtype=dtype):
            input_splits = send_splits[rank]
            output_splits = [send_splits[r][rank] for r in range(world)]

            def run(device):
                output = torch.zeros(sum(output_splits), 2, dtype=dtype, device=device)
                dist.all_to_all_single(output, data((4, 2), dtype, rank).to(device), output_splits, input_splits)
                return [output]
            expected = torch.cat([data((4, 2), dtype, r).split(send_splits[r])[rank] for r in range(world)])
            same([expected], run(NEURON))
            if dtype != torch.int16:
                compare(run)
            return f"received {output_splits} rows"

    @check("all_to_all (lists, uneven sizes)")
    def _():
        def run(device):
            inputs = [data((rank + 1 + i,), torch.float32, rank, i).to(device) for i in range(world)]
            outputs = [torch.zeros(r + 1 + rank, device=device) for r in range(world)]
            dist.all_to_all(outputs, inputs)
            return outputs
        # Gloo takes equal sizes only: compare with the values each rank sent.
        same([data((r + 1 + rank,), torch.float32, r, rank) for r in range(world)], run(NEURON))

    @check("send / recv")
    def _():
        t = data((3, 2), torch.float32, rank).to(NEURON)
        if rank == 0:
            dist.send(t, dst=1)
            received = torch.zeros(3, 2, device=NEURON)
            dist.recv(received, src=1)
        else:
            received = torch.zeros(3, 2, device=NEURON)
            dist.recv(received, src=0)
            dist.send(t, dst=0)
        same([data((3, 2), torch.float32, other)], [received])

    @check("isend / irecv, waited")
    def _():
        received = torch.zeros(4, dtype=torch.bfloat16, device=NEURON)
        works = [dist.isend(data((4,), torch.bfloat16, rank).to(NEURON), dst=other),
                 dist.irecv(received, src=other)]
        for work in works:
            work.wait()
        assert all(work.is_completed() for work in works)
        same([data((4,), torch.bfloat16, other)], [received])

    @check("batch_isend_irecv")
    def _():
        received = torch.zeros(5, device=NEURON)
        ops = [dist.P2POp(dist.isend, data((5,), torch.float32, rank).to(NEURON), other),
               dist.P2POp(dist.irecv, received, other)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        same([data((5,), torch.float32, other)], [received])

    @check("recv from any source")
    def _():
        if rank == 1:
            dist.send(torch.full((2,), 42.0, device=NEURON), dst=0)
        else:
            received = torch.zeros(2, device=NEURON)
            source = dist.recv(received)
            assert source == 1, source
            same([torch.full((2,), 42.0)], [received])

    @check("barrier (default group)")
    def _():
        dist.barrier()

    @check("barrier on a subgroup, and on a group of one rank")
    def _():
        pair = dist.new_group([0, 1])
        dist.barrier(group=pair)
        singles = [dist.new_group([r]) for r in range(world)]
        dist.barrier(group=singles[rank])
        t = data((3,), torch.float32, rank).to(NEURON)
        dist.all_reduce(t, group=singles[rank])
        same([data((3,), torch.float32, rank)], [t])

    @check("asynchronous work: wait, is_completed, future value and then()")
    def _():
        t = data((64, 64), torch.float32, rank).to(NEURON)
        work = dist.all_reduce(t, async_op=True)
        chained = work.get_future().then(lambda future: future.value()[0] * 2)
        work.wait()
        assert work.is_completed() and work.is_success()
        value = work.get_future().wait()
        assert isinstance(value, list) and value[0] is not None and value[0].device.type == "neuron", value
        expected = sum(data((64, 64), torch.float32, r) for r in range(world))
        same([expected, expected, expected * 2], [t, value[0], chained.wait()])

    @check("asynchronous work: several outstanding, waited in reverse order")
    def _():
        sizes = [1 << 20, 100, 200, 300]  # the first is slow: a reordered gather would see its input
        tensors = [data((sizes[i],), torch.float32, rank, i).to(NEURON) for i in range(4)]
        outputs = [torch.zeros(world * 50, device=NEURON) for _ in range(2)]
        works = [dist.all_reduce(t, async_op=True) for t in tensors]
        works += [dist.all_gather_into_tensor(outputs[i], tensors[i][:50], async_op=True) for i in range(2)]
        for work in reversed(works):
            work.wait()
        same([sum(data((sizes[i],), torch.float32, r, i) for r in range(world)) for i in range(4)], tensors)
        # the gathers were queued after the allreduces of the same tensors: they saw the sums
        same([tensors[i][:50].cpu().repeat(world) for i in range(2)], outputs)

    @check("a synchronous collective runs after the asynchronous ones issued before it")
    def _():
        # A call without async_op runs on the calling thread (launch-blocking mode or not),
        # after the collectives still queued on the communication thread: it sees their results.
        big = data((1 << 20,), torch.float32, rank).to(NEURON)
        small = data((300,), torch.float32, rank, 1).to(NEURON)
        works = [dist.all_reduce(big, async_op=True), dist.all_reduce(small, async_op=True)]
        gathered = torch.zeros(world * 300, device=NEURON)
        dist.all_gather_into_tensor(gathered, small)  # synchronous: after the queued all_reduces
        assert all(w.is_completed() for w in works), "a synchronous call overtook the queued ones"
        total = sum(data((300,), torch.float32, r, 1) for r in range(world))
        same([total.repeat(world), sum(data((1 << 20,), torch.float32, r) for r in range(world))], [gathered, big])
        for _ in range(20):  # alternating, as a tensor-parallel forward's all_reduces
            x = data((64,), torch.float32, rank).to(NEURON)
            w = dist.all_reduce(x.clone(), async_op=True)
            dist.all_reduce(x)
            w.wait()
            same([sum(data((64,), torch.float32, r) for r in range(world))], [x])

    @check("a collective waits for the work queued before it, and its results are seen after wait()")
    def _():
        a = data((256, 256), torch.float32, rank).to(NEURON) / 1000
        for _ in range(3):
            a = a @ a.t() / 256  # queued on the stream in asynchronous mode
        work = dist.all_reduce(a, async_op=True)
        work.wait()
        b = a * 3  # after wait(): sees the reduced values
        ac = data((256, 256), torch.float32, rank) / 1000
        for _ in range(3):
            ac = ac @ ac.t() / 256
        cpu_results = [ac.clone()]
        dist.all_reduce(cpu_results[0])
        torch.testing.assert_close(a.cpu(), cpu_results[0], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(b.cpu(), cpu_results[0] * 3, rtol=1e-5, atol=1e-6)

    @check("no device memory is held after collectives end")
    def _():
        torch.neuron.synchronize()
        before = torch.neuron.memory_allocated()
        for i in range(10):
            t = data((1000,), torch.float32, rank, i).to(NEURON)
            dist.all_reduce(t)
            outputs = [torch.zeros(1000, device=NEURON) for _ in range(world)]
            dist.all_gather(outputs, t)
            dist.all_reduce(t, op=dist.ReduceOp.AVG, async_op=True).wait()
            del t, outputs
        # The transport drops its views of the memory just after the Work completes.
        deadline = time.monotonic() + 5
        while torch.neuron.memory_allocated() != before and time.monotonic() < deadline:
            time.sleep(0.01)
        after = torch.neuron.memory_allocated()
        assert after == before, (before, after)

    @check("reduce_scatter of inputs of different sizes (each rank's output its own size)")
    def _():
        inputs = [data((r + 1, 2), torch.float32, rank, r).to(NEURON) for r in range(world)]
        output = torch.zeros(rank + 1, 2, device=NEURON)
        dist.reduce_scatter(output, inputs, op=dist.ReduceOp.AVG)
        expected = sum(data((rank + 1, 2), torch.float32, r, rank) for r in range(world)) / world
        same([expected], [output])

    @check("a finishing step ends before the next collective starts (no wait between them)")
    def _():
        t = torch.full((4,), float(rank + 1), device=NEURON)
        dist.all_reduce(t, op=dist.ReduceOp.AVG, async_op=True)  # then / world: its finishing step
        dist.all_reduce(t, async_op=True).wait()
        mean = sum(r + 1 for r in range(world)) / world
        output = torch.zeros(2, device=NEURON)
        dist.reduce_scatter_tensor(output, torch.full((2 * world,), float(rank + 1), device=NEURON),
                                   op=dist.ReduceOp.AVG, async_op=True)  # copy-out and division
        dist.all_reduce(output, async_op=True).wait()
        same([torch.full((4,), mean * world), torch.full((2,), mean * world)], [t, output])

    @check("futures complete without wait(): reduce_scatter_tensor, send/recv, a chained collective")
    def _():
        output = torch.zeros(2, device=NEURON)
        future = dist.reduce_scatter_tensor(output, torch.ones(2 * world, device=NEURON), async_op=True).get_future()
        same([torch.full((2,), float(world))], [future.wait()[0]])
        t = torch.full((3,), float(rank), device=NEURON)
        p2p = dist.isend(t, other) if rank == 0 else dist.irecv(t, other)
        p2p.get_future().wait()
        same([torch.zeros(3)], [t])
        b = torch.full((2,), float(rank + 1), device=NEURON)
        chained = dist.all_reduce(torch.ones(2, device=NEURON), async_op=True).get_future().then(
            lambda _: dist.all_reduce(b, async_op=True).get_future().wait()[0])  # PowerSGD's pattern
        same([torch.full((2,), float(sum(r + 1 for r in range(world))))], [chained.wait()])

    @check("PREMUL_SUM refused by the transport leaves the caller's tensors as they were")
    def _():
        tensors = [torch.full((2,), 3.0, device=NEURON), torch.full((2,), 3.0, dtype=torch.float64, device=NEURON)]
        try:
            dist.all_reduce_coalesced(tensors, op=dist._make_nccl_premul_sum(2.0))
        except Exception:  # noqa: BLE001 - the mixed dtypes are refused; the point is what is left
            pass
        else:
            raise AssertionError("mixed dtypes accepted")
        same([torch.full((2,), 3.0), torch.full((2,), 3.0, dtype=torch.float64)], tensors)

    @check("zero-copy collectives")
    def _():
        from torch_neuron_sim import _C
        return _C._process_group_zero_copy(dist.group.WORLD._get_backend(NEURON))

    @check("errors name the collective, the group and the rank")
    def _():
        try:
            dist.all_reduce(torch.ones(3, dtype=torch.int16, device=NEURON))
        except RuntimeError as error:
            message = str(error)
            assert "allreduce on neuron process group" in message and f"rank {rank} of {world}" in message, message
            assert "int16" in message or "Short" in message, message
            return message.splitlines()[0]
        raise AssertionError("no error")

    dist.destroy_process_group()

    @check("destroy_process_group, then a new group")
    def _():
        assert not dist.is_initialized()
        dist.init_process_group("neuron", timeout=datetime.timedelta(seconds=60))
        t = torch.ones(2, device=NEURON)
        dist.all_reduce(t)
        same([torch.full((2,), float(world))], [t])
        assert dist.get_backend() == "neuron"
    write(out_dir)
    dist.destroy_process_group()


# ---- the faults scenario ----------------------------------------------------------------------

def faults_scenario(out_dir):
    timeout = float(os.environ.get("FAULT_TIMEOUT", "3"))
    dist.init_process_group("neuron", timeout=datetime.timedelta(seconds=timeout))
    rank = dist.get_rank()
    dist.all_reduce(torch.ones(2, device=NEURON))  # connected

    # A peer that does not call: rank 0's wait(timeout) gives up at that timeout, and an
    # allreduce fails within the group's timeout.
    if rank == 0:
        @check("wait(timeout) gives up at its timeout")
        def _():
            work = dist.all_reduce(torch.ones(10, device=NEURON), async_op=True)
            start = time.monotonic()
            try:
                work.wait(timeout=datetime.timedelta(seconds=1))
            except Exception as error:  # noqa: BLE001
                assert time.monotonic() - start < 2.5, time.monotonic() - start
                assert "given to wait()" in str(error) and "rank 0 of 2" in str(error), str(error)
                assert not work.is_success()
                return f"{type(error).__name__}: {error}"
            raise AssertionError("no error")

        @check("a collective a peer does not call times out")
        def _():
            start = time.monotonic()
            try:
                dist.all_reduce(torch.ones(1000, device=NEURON))
            except Exception as error:  # noqa: BLE001
                RESULTS["timeout error"] = [True, f"{type(error).__name__}: {error}"]
                RESULTS["timeout seconds"] = [True, time.monotonic() - start]
                return
            raise AssertionError("no error")
    else:
        time.sleep(timeout + 2.5)
    # Both ranks meet again on a fresh group (the failed one is out of step).
    group = dist.new_group([0, 1])
    dist.all_reduce(torch.ones(2, device=NEURON), group=group)
    if rank == 1:
        for _ in range(3):
            dist.all_reduce(torch.ones(1 << 16, device=NEURON), group=group)
        os.kill(os.getpid(), signal.SIGKILL)  # killed while rank 0 is in its 4th allreduce
    start = time.monotonic()
    try:
        for _ in range(1000):
            dist.all_reduce(torch.ones(1 << 16, device=NEURON), group=group)
        RESULTS["killed peer error"] = [False, "no error"]
    except Exception as error:  # noqa: BLE001
        RESULTS["killed peer error"] = [True, f"{type(error).__name__}: {error}"]
    RESULTS["killed peer seconds"] = [True, time.monotonic() - start]
    write(out_dir)
    dist.destroy_process_group()
    RESULTS["destroy_process_group after the faults"] = [True, ""]
    write(out_dir)


# ---- the tensor-parallel scenario -------------------------------------------------------------

def tp_scenario(model_dir, out_dir):
    from transformers import AutoModelForCausalLM
    from transformers.distributed import DistributedConfig

    dist.init_process_group(backend="neuron")
    rank = dist.get_rank()
    if os.environ.get("TP_MESH") == "1":  # the user's own mesh instead of a DistributedConfig
        from torch.distributed.device_mesh import DeviceMesh
        mesh = DeviceMesh("neuron", list(range(dist.get_world_size())))
        RESULTS["mesh"] = [True, str(mesh)]
        model = AutoModelForCausalLM.from_pretrained(model_dir, tp_plan="auto", device_mesh=mesh)
    else:
        model = AutoModelForCausalLM.from_pretrained(
            model_dir, distributed_config=DistributedConfig(tp_size=dist.get_world_size()))
    # the weights this rank holds (after generate, memory also holds the KV cache and, compiled,
    # the programs' arenas: one per stretch of the graph between all-reduces)
    RESULTS["memory_after_load"] = [True, torch.neuron.memory_allocated(model.device)]
    prompt = torch.tensor(json.loads(os.environ["TP_PROMPT"]), device=model.device)
    options = {}
    if os.environ.get("TP_STATIC") == "1":  # transformers compiles the decode step (backend "neuron")
        options["cache_implementation"] = "static"
    if os.environ.get("TP_GUARD_FILTER") == "1":  # README: PyTorch's guard filter through CompileConfig
        from transformers import CompileConfig
        options["compile_config"] = CompileConfig(
            backend="neuron", dynamic=False, mode=None,
            options={"guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe})
    tokens = model.generate(prompt, max_new_tokens=int(os.environ["TP_NEW_TOKENS"]), do_sample=False, **options)
    if options:
        from torch._dynamo.utils import counters
        RESULTS["compiled graphs"] = [True, counters["neuron"]["compiled_graphs"]]
    RESULTS["tokens"] = [True, tokens.tolist()]
    RESULTS["device"] = [True, str(model.device)]
    RESULTS["memory_allocated"] = [True, torch.neuron.memory_allocated(model.device)]
    RESULTS["backend"] = [True, dist.get_backend()]
    write(out_dir)
    dist.destroy_process_group()


if __name__ == "__main__":
    scenario = sys.argv[1]
    if scenario == "ops":
        ops_scenario(sys.argv[2])
    elif scenario == "faults":
        faults_scenario(sys.argv[2])
    elif scenario == "tp":
        tp_scenario(sys.argv[2], sys.argv[3])
    else:
        raise SystemExit(f"unknown scenario {scenario}")
