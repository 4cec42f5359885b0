"""One rank of the two-"host" test (tests/distributed/test_distributed_multihost.py): each rank runs under
its own `torchrun --nnodes 2 --nproc-per-node 1` inside its own network namespace, the two
namespaces joined by a veth pair, so every byte between the ranks crosses that veth.

    distributed_multihost_worker.py all MODEL OUT_DIR
        (under torchrun) collectives on neuron tensors (backend "neuron", Gloo over the veth
        named by GLOO_SOCKET_IFNAME), then tensor-parallel greedy generation (tp_size=2 over
        the two hosts). Environment: TP_PROMPT (a JSON list of lists), TP_NEW_TOKENS.
    distributed_multihost_worker.py hier OUT_DIR
        (under torchrun, 2 nodes x 2 processes) the world group spans the hosts (Gloo), each
        host's pair shares memory, the cross-host pairs use Gloo; interleaved collectives on
        all three give the right values.
    distributed_multihost_worker.py partition OUT_DIR
        (a plain process, RANK etc. set by the test) a loop of allreduces; writes
        OUT_DIR/started<rank> once in it; the test then takes the veth down (no peer dies, no
        connection is reset: only the group's timeout can end the allreduce). Records the
        error and how long the clean-up took. Environment: PARTITION_TIMEOUT (seconds);
        PARTITION_ABORT=1: a thread aborts the group (_abort_process_group) as soon as the test
        writes OUT_DIR/abort-now (the clean-up is then that abort, not destroy_process_group).

Each rank writes OUT_DIR/rank<r>.json: {check name: [passed, detail]}.
"""
import datetime
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist

from distributed_report import RESULTS, check, write

NEURON = torch.device("neuron")


def interface_bytes(name):
    """(received, sent) bytes of this namespace's interface `name`."""
    base = f"/sys/class/net/{name}/statistics"
    with open(f"{base}/rx_bytes") as rx, open(f"{base}/tx_bytes") as tx:
        return int(rx.read()), int(tx.read())


def interface_addresses():
    """The IPv4 addresses of this namespace's interfaces (`ip -o -4 addr`)."""
    import subprocess
    listing = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True, timeout=10).stdout
    return sorted(line.split()[3] for line in listing.splitlines())


def collectives():
    rank, world = dist.get_rank(), dist.get_world_size()
    interface = os.environ["GLOO_SOCKET_IFNAME"]

    @check("launch: two nodes, one process each, LOCAL_RANK 0 on neuron:0")
    def _():
        assert world == 2, world
        assert os.environ["LOCAL_RANK"] == "0" and os.environ["LOCAL_WORLD_SIZE"] == "1", dict(os.environ)
        assert int(os.environ["GROUP_RANK"]) == rank, (os.environ["GROUP_RANK"], rank)  # node rank
        assert torch.neuron.current_device() == 0, torch.neuron.current_device()
        assert dist.get_backend() == "neuron", dist.get_backend()
        return {"addresses": interface_addresses(), "hostname": socket.gethostname(),
                "master": f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"}

    @check("launch: the group runs on Gloo (the ranks are on two hosts: no shared memory)")
    def _():
        from torch_neuron_sim import _C
        backend = dist.group.WORLD._get_backend(NEURON)
        if not hasattr(_C, "_process_group_uses_shared_memory"):
            return "no shared-memory transport in this build"
        assert not _C._process_group_uses_shared_memory(backend), "shared memory between two network namespaces"
        return "Gloo"

    @check("all_reduce SUM float32")
    def _():
        t = torch.arange(6, dtype=torch.float32, device=NEURON) * (rank + 1)
        dist.all_reduce(t)
        assert torch.equal(t.cpu(), torch.arange(6, dtype=torch.float32) * 3), t.cpu()

    @check("all_reduce crosses the veth (its byte counters grow by the tensor's size)")
    def _():
        n = 1 << 20  # 4 MiB of float32
        before = interface_bytes(interface)
        t = torch.full((n,), float(rank + 1), device=NEURON)
        start = time.monotonic()
        dist.all_reduce(t)
        seconds = time.monotonic() - start
        after = interface_bytes(interface)
        assert torch.equal(t.cpu(), torch.full((n,), 3.0)), t.cpu()[:4]
        received, sent = after[0] - before[0], after[1] - before[1]
        # a 2-rank allreduce moves at least half the tensor each way
        assert received >= n * 4 // 2 and sent >= n * 4 // 2, (received, sent)
        return {"received": received, "sent": sent, "seconds": round(seconds, 3)}

    @check("all_reduce AVG bfloat16 and MAX int64")
    def _():
        a = torch.full((5,), float(2 * rank + 1), dtype=torch.bfloat16, device=NEURON)
        dist.all_reduce(a, op=dist.ReduceOp.AVG)
        assert torch.equal(a.cpu(), torch.full((5,), 2.0, dtype=torch.bfloat16)), a.cpu()
        b = torch.tensor([rank, -rank, 7 * rank], dtype=torch.int64, device=NEURON)
        dist.all_reduce(b, op=dist.ReduceOp.MAX)
        assert b.cpu().tolist() == [1, 0, 7], b.cpu()

    @check("all_gather_into_tensor")
    def _():
        output = torch.zeros(2 * 3, device=NEURON)
        dist.all_gather_into_tensor(output, torch.full((3,), float(rank + 10), device=NEURON))
        assert output.cpu().tolist() == [10.0] * 3 + [11.0] * 3, output.cpu()

    @check("all_gather (list)")
    def _():
        outputs = [torch.zeros(2, 2, dtype=torch.int32, device=NEURON) for _ in range(world)]
        dist.all_gather(outputs, torch.full((2, 2), rank * 5, dtype=torch.int32, device=NEURON))
        assert [o.cpu().flatten().tolist() for o in outputs] == [[0] * 4, [5] * 4], outputs

    @check("broadcast from 1")
    def _():
        t = torch.tensor([1.5, float("nan"), -2.0], device=NEURON) if rank == 1 else torch.zeros(3, device=NEURON)
        dist.broadcast(t, src=1)
        got = t.cpu()
        assert got[0] == 1.5 and got[1].isnan() and got[2] == -2.0, got

    @check("reduce_scatter_tensor SUM")
    def _():
        output = torch.zeros(2, device=NEURON)
        dist.reduce_scatter_tensor(output, torch.arange(4, dtype=torch.float32, device=NEURON) + rank)
        expected = (torch.arange(4, dtype=torch.float32) * 2 + 1)[rank * 2:(rank + 1) * 2]
        assert torch.equal(output.cpu(), expected), (output.cpu(), expected)

    @check("all_to_all_single, uneven splits")
    def _():
        sends = [[1, 3], [2, 2]]
        received = [sends[r][rank] for r in range(world)]
        source = torch.arange(4, dtype=torch.float32, device=NEURON) + 100 * rank
        output = torch.zeros(sum(received), device=NEURON)
        dist.all_to_all_single(output, source, received, sends[rank])
        expected = torch.cat([(torch.arange(4, dtype=torch.float32) + 100 * r).split(sends[r])[rank]
                              for r in range(world)])
        assert torch.equal(output.cpu(), expected), (output.cpu(), expected)

    @check("send / recv")
    def _():
        if rank == 0:
            dist.send(torch.arange(5, dtype=torch.float32, device=NEURON), dst=1)
            back = torch.zeros(5, device=NEURON)
            dist.recv(back, src=1)
            assert back.cpu().tolist() == [0.0, 2.0, 4.0, 6.0, 8.0], back.cpu()
        else:
            got = torch.zeros(5, device=NEURON)
            dist.recv(got, src=0)
            dist.send(got * 2, dst=0)

    @check("barrier")
    def _():
        dist.barrier()


def tensor_parallel(model_dir):
    from transformers import AutoModelForCausalLM
    from transformers.distributed import DistributedConfig

    @check("tensor-parallel generate (tp_size=2 over the two hosts)")
    def _():
        model = AutoModelForCausalLM.from_pretrained(model_dir, distributed_config=DistributedConfig(tp_size=2))
        prompt = torch.tensor(json.loads(os.environ["TP_PROMPT"]), device=model.device)
        tokens = model.generate(prompt, max_new_tokens=int(os.environ["TP_NEW_TOKENS"]), do_sample=False)
        return {"tokens": tokens.tolist(), "device": str(model.device),
                "memory_allocated": torch.neuron.memory_allocated(model.device)}


def partition(out_dir):
    timeout = float(os.environ["PARTITION_TIMEOUT"])
    dist.init_process_group(backend="neuron", timeout=datetime.timedelta(seconds=timeout))
    rank = dist.get_rank()
    t = torch.ones(1 << 20, device=NEURON)
    dist.all_reduce(t)
    from torch_neuron_sim import _C
    RESULTS["hierarchy"] = [True, _C._process_group_hierarchy(dist.group.WORLD._get_backend(NEURON))]
    RESULTS["iterations"] = [True, 0]
    write(out_dir)
    aborting = os.environ.get("PARTITION_ABORT") == "1"
    if aborting:
        import threading

        def abort_when_told():
            while not os.path.exists(os.path.join(out_dir, "abort-now")):
                time.sleep(0.01)
            start = time.time()
            dist.distributed_c10d._abort_process_group()
            RESULTS["abort"] = [True, {"start": start, "seconds": time.time() - start}]
        threading.Thread(target=abort_when_told, daemon=True).start()
    end = time.monotonic() + 120
    try:
        while time.monotonic() < end:
            dist.all_reduce(t)
            RESULTS["iterations"][1] += 1
            if RESULTS["iterations"][1] == 2:
                with open(os.path.join(out_dir, f"started{rank}"), "w") as marker:
                    marker.write(str(time.time()))
        RESULTS["error"] = [False, "the loop ended without an error"]
        write(out_dir)
        return 3
    except Exception as error:  # noqa: BLE001 - the report carries it
        RESULTS["error"] = [True, {"type": type(error).__name__, "message": str(error), "time": time.time()}]
    write(out_dir)
    if aborting:
        end = time.monotonic() + timeout + 10
        while "abort" not in RESULTS and time.monotonic() < end:
            time.sleep(0.05)
        RESULTS["done"] = [True, time.time()]
        write(out_dir)
        return 0
    start = time.time()
    try:
        dist.all_reduce(torch.ones(4, device=NEURON))
        RESULTS["next collective"] = [False, "no error"]
    except Exception as error:  # noqa: BLE001
        RESULTS["next collective"] = [True, {"message": f"{type(error).__name__}: {error}",
                                             "seconds": time.time() - start}]
    write(out_dir)
    start = time.time()
    dist.destroy_process_group()
    RESULTS["destroy_process_group"] = [True, {"seconds": time.time() - start}]
    RESULTS["done"] = [True, time.time()]
    write(out_dir)
    return 0


def uses_shared_memory(group):
    from torch_neuron_sim import _C
    if not hasattr(_C, "_process_group_uses_shared_memory"):
        return None
    return bool(_C._process_group_uses_shared_memory(group._get_backend(NEURON)))


def hierarchical(out_dir):
    dist.init_process_group(backend="neuron", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ["LOCAL_RANK"])
    node = int(os.environ["GROUP_RANK"])
    # every rank makes every group, in the same order
    host_groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    cross_groups = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    host_group, cross_group = host_groups[node], cross_groups[local]

    @check("hier: 4 ranks, 2 per node, each on its own core")
    def _():
        assert world == 4 and rank == 2 * node + local, (world, rank, node, local)
        assert torch.neuron.current_device() == local, torch.neuron.current_device()

    @check("hier: transports (world and cross-host pairs: Gloo; a host's pair: shared memory)")
    def _():
        found = {"world": uses_shared_memory(dist.group.WORLD), "host": uses_shared_memory(host_group),
                 "cross": uses_shared_memory(cross_group)}
        if found["world"] is None:
            return "no shared-memory transport in this build"
        assert found == {"world": False, "host": True, "cross": False}, found
        return found

    @check("hier: interleaved allreduces on the world, host and cross-host groups")
    def _():
        for step in range(3):
            a = torch.full((1000,), float(rank + 1 + step), device=NEURON)
            b = torch.full((300,), float(rank + 1), device=NEURON)
            c = torch.full((7,), float(10 * (rank + 1)), device=NEURON)
            dist.all_reduce(a)
            dist.all_reduce(b, group=host_group)
            dist.all_reduce(c, group=cross_group, op=dist.ReduceOp.MAX)
            assert torch.equal(a.cpu(), torch.full((1000,), float(10 + 4 * step))), (step, a.cpu()[:3])
            host_sum = float(sum(r + 1 for r in (2 * node, 2 * node + 1)))
            assert torch.equal(b.cpu(), torch.full((300,), host_sum)), (step, b.cpu()[:3])
            assert torch.equal(c.cpu(), torch.full((7,), float(10 * (2 + local + 1)))), (step, c.cpu())

    @check("hier: the world group's layout (Note [Hierarchical collectives])")
    def _():
        from torch_neuron_sim import _C
        info = _C._process_group_hierarchy(dist.group.WORLD._get_backend(NEURON))
        assert info is not None, "the world group spans two hosts with two ranks each: it should be hierarchical"
        assert info["hosts"] == [0, 0, 1, 1] and info["local_size"] == 2 and info["leader"] == (local == 0), info
        for group in (host_group, cross_group):
            assert _C._process_group_hierarchy(group._get_backend(NEURON)) is None
        return info

    @check("hier: world allreduce, broadcast and barrier run inside each host, then across")
    def _():
        from torch_neuron_sim import _C
        backend = dist.group.WORLD._get_backend(NEURON)
        before = _C._process_group_hierarchy(backend)["calls"]
        ops = 0
        for dtype in (torch.float32, torch.bfloat16, torch.int64):
            t = (torch.arange(4097, device=NEURON) % 25).to(dtype) * (rank + 1)  # sums exact in bfloat16
            dist.all_reduce(t)
            assert torch.equal(t.cpu(), (torch.arange(4097) % 25).to(dtype) * 10), (dtype, t.cpu()[:4])
            ops += 1
        t = torch.full((3, 5), float(rank + 1), device=NEURON)
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        assert torch.equal(t.cpu(), torch.full((3, 5), 2.5)), t.cpu()
        for op, expected in ((dist.ReduceOp.MAX, 4.0), (dist.ReduceOp.MIN, 1.0), (dist.ReduceOp.PRODUCT, 24.0)):
            t = torch.full((9,), float(rank + 1), device=NEURON)
            dist.all_reduce(t, op=op)
            assert torch.equal(t.cpu(), torch.full((9,), expected)), (op, t.cpu())
            ops += 1
        t = torch.full((2, 6), float(rank + 1), device=NEURON).t()  # not contiguous
        dist.all_reduce(t)
        assert torch.equal(t.cpu(), torch.full((6, 2), 10.0)), t.cpu()
        coalesced = [torch.full((5,), float(rank), device=NEURON), torch.full((3,), float(rank), device=NEURON)]
        dist.all_reduce_coalesced(coalesced)
        assert coalesced[0].cpu().tolist() == [6.0] * 5 and coalesced[1].cpu().tolist() == [6.0] * 3, coalesced
        ops += 3
        for root in range(world):  # the root's host first, then the other
            t = torch.full((1000,), float(rank * 10 + root), device=NEURON)
            dist.broadcast(t, src=root)
            assert torch.equal(t.cpu(), torch.full((1000,), float(root * 10 + root))), (root, t.cpu()[:3])
            ops += 1
        t = torch.full((4,), rank, dtype=torch.int16, device=NEURON)  # a dtype Gloo has no type for
        dist.broadcast(t, src=3)
        assert t.cpu().tolist() == [3] * 4, t.cpu()
        dist.barrier()
        ops += 2
        calls = _C._process_group_hierarchy(backend)["calls"] - before
        assert calls == ops, (calls, ops)
        return {"hierarchical calls": calls}

    @check("hier: a 4 MiB world allreduce sends less across hosts than Gloo over the four ranks")
    def _():
        interface = os.environ["GLOO_SOCKET_IFNAME"]
        gloo = dist.new_group(backend="gloo")  # the flat way, same ranks
        n = 1 << 20

        def sent_by_host(run):  # the host's veth counter: both of its ranks' traffic
            dist.barrier()
            before = interface_bytes(interface)[1]
            run()
            dist.barrier()
            return interface_bytes(interface)[1] - before

        hier = flat = None
        for _ in range(2):
            t = torch.full((n,), float(rank + 1), device=NEURON)
            hier = min(hier or 1 << 62, sent_by_host(lambda: dist.all_reduce(t)))
            assert torch.equal(t.cpu(), torch.full((n,), 10.0)), t.cpu()[:4]
            c = torch.full((n,), float(rank + 1))
            flat = min(flat or 1 << 62, sent_by_host(lambda: dist.all_reduce(c, group=gloo)))
            assert torch.equal(c, torch.full((n,), 10.0)), c[:4]
        # hierarchical: the 4 MiB cross once each way between the leaders (a 2-rank allreduce)
        assert hier < 0.85 * flat, (hier, flat)
        return {"bytes sent by this host": {"hierarchical": hier, "gloo over 4 ranks": flat}}

    @check("hier: all_gather_into_tensor on a host's pair, then on the world")
    def _():
        out = torch.zeros(2 * 4, device=NEURON)
        dist.all_gather_into_tensor(out, torch.full((4,), float(rank), device=NEURON), group=host_group)
        assert out.cpu().tolist() == [float(2 * node)] * 4 + [float(2 * node + 1)] * 4, out.cpu()
        out = torch.zeros(4 * 2, device=NEURON)
        dist.all_gather_into_tensor(out, torch.full((2,), float(rank), device=NEURON))
        assert out.cpu().tolist() == [0.0, 0.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0], out.cpu()

    @check("hier: async collectives on three groups, waited for in reverse order")
    def _():
        a = torch.ones(5, device=NEURON)
        b = torch.ones(5, device=NEURON)
        c = torch.ones(5, device=NEURON)
        works = [dist.all_reduce(a, async_op=True), dist.all_reduce(b, group=host_group, async_op=True),
                 dist.all_reduce(c, group=cross_group, async_op=True)]
        for work in reversed(works):
            work.wait()
        assert a.cpu().tolist() == [4.0] * 5 and b.cpu().tolist() == [2.0] * 5 and c.cpu().tolist() == [2.0] * 5

    write(out_dir)
    dist.destroy_process_group()
    RESULTS["hier: destroy_process_group"] = [True, ""]
    write(out_dir)


def main(model_dir, out_dir):
    dist.init_process_group(backend="neuron", timeout=datetime.timedelta(seconds=60))
    collectives()
    write(out_dir)
    tensor_parallel(model_dir)
    write(out_dir)
    dist.destroy_process_group()
    RESULTS["destroy_process_group"] = [True, ""]
    write(out_dir)


def ranks(first, count, scenario, out_dir):
    """Starts `count` ranks of `scenario` (RANK first.., LOCAL_RANK 0..) from this one process, so
    that they share its namespaces (one `ip netns exec` per rank would give each its own mount
    namespace: another host, as host_key() sees it); returns the first failing exit code."""
    import subprocess
    children = [subprocess.Popen([sys.executable, __file__, scenario, out_dir],
                                 env=dict(os.environ, RANK=str(first + local), LOCAL_RANK=str(local)))
                for local in range(count)]
    codes = [child.wait() for child in children]
    return next((code for code in codes if code), 0)


if __name__ == "__main__":
    if sys.argv[1] == "ranks":
        sys.exit(ranks(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]))
    elif sys.argv[1] == "all":
        main(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "hier":
        hierarchical(sys.argv[2])
    elif sys.argv[1] == "partition":
        sys.exit(partition(sys.argv[2]))
    else:
        raise SystemExit(f"unknown scenario {sys.argv[1]}")
