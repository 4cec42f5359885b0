"""The device clock for collectives (docs/device-clock.md; Note [Device clock] in
runtime/cost_model.h): each collective is costed once with an alpha-beta model of its
algorithm over the group's ranks and link (two ranks on one host: NeuronLink). Two ranks under
torchrun; each writes the predicted device time of each collective, which must equal the value
computed here by hand from the platform data file, and the profiler's device track shows the
all-reduce as one span of that duration. Nothing here measures host time."""
import json
import math
import os
import socket
import subprocess
import sys
import textwrap
import tomllib

import torch_neuronx

PLATFORMS_FILE = os.path.join(os.path.dirname(torch_neuronx._sim.__file__), "data", "platforms.toml")
with open(PLATFORMS_FILE, "rb") as file:
    TRN2 = {name: entry["value"] for name, entry in tomllib.load(file)["trn2"].items()}

ELEMENTS = 1 << 18  # float32: 1 MiB

WORKER = textwrap.dedent(f"""
    import json, os, sys, torch, torch_neuronx
    import torch.distributed as dist

    dist.init_process_group(backend="neuron")
    rank, world = dist.get_rank(), dist.get_world_size()
    neuron = torch.device("neuron")
    t = torch.ones({ELEMENTS}, device=neuron)
    flat = torch.empty({ELEMENTS} * world, device=neuron)
    torch.neuron.synchronize()
    dist.barrier()

    def predicted_ns(fn):
        torch.neuron.synchronize()
        before = torch_neuronx.device_time()
        work = fn()
        if work is not None:
            work.wait()
        torch.neuron.synchronize()
        return round((torch_neuronx.device_time() - before) * 1e6)

    times = {{
        "platform": torch.neuron.get_device_properties(0).platform,
        "allreduce": predicted_ns(lambda: dist.all_reduce(t, async_op=True)),
        "broadcast": predicted_ns(lambda: dist.broadcast(t, src=0, async_op=True)),
        "allgather_into_tensor": predicted_ns(lambda: dist.all_gather_into_tensor(flat, t, async_op=True)),
        "reduce_scatter_tensor": predicted_ns(lambda: dist.reduce_scatter_tensor(t, flat, async_op=True)),
    }}
    # The profiler's device track: the all-reduce is one "CC" span of the clock's duration.
    torch_neuronx._sim._C._device_track_start()
    dist.all_reduce(t)
    torch.neuron.synchronize()
    spans, dropped = torch_neuronx._sim._C._device_track_stop()
    times["track"] = [[s[5], s[6], s[8], s[3] - s[2]] for s in spans] + [dropped]
    with open(os.path.join(sys.argv[1], f"rank{{rank}}.json"), "w") as out:
        json.dump(times, out)
    dist.destroy_process_group()
""")


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]



def run_two_ranks(tmp_path, source):
    """Runs `source` as a worker on 2 ranks under torchrun (trn2, the clock on); it writes its
    figures into tmp_path."""
    worker = tmp_path / "worker.py"
    worker.write_text(source)
    env = dict(os.environ, OMP_NUM_THREADS="1", TORCHELASTIC_ERROR_FILE="", NEURON_SIM_PLATFORM="trn2")
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                 "NEURON_RT_VISIBLE_CORES", "NEURON_SIM_DEVICE_CLOCK"):
        env.pop(name, None)
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", f"--master-port={free_port()}",
               str(worker), str(tmp_path)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-6000:]


def test_two_rank_collectives_cost_their_alpha_beta_model_over_neuronlink(tmp_path):
    run_two_ranks(tmp_path, WORKER)
    n, nbytes = 2, ELEMENTS * 4
    bandwidth, alpha = TRN2["neuronlink_chip_gbps"], TRN2["neuronlink_latency_ns"]
    rounded = lambda value: math.floor(value + 0.5)  # noqa: E731
    expected = {
        "platform": "trn2",
        # ring allreduce: 2(n-1)/n * bytes / B + 2(n-1) * alpha
        "allreduce": rounded(2 * (n - 1) / n * nbytes / bandwidth + 2 * (n - 1) * alpha),
        # broadcast (pipelined chain): bytes / B + (n-1) * alpha
        "broadcast": rounded(nbytes / bandwidth + (n - 1) * alpha),
        # ring allgather / reduce-scatter over the whole buffer (n * the shard): (n-1)/n
        "allgather_into_tensor": rounded((n - 1) / n * n * nbytes / bandwidth + (n - 1) * alpha),
        "reduce_scatter_tensor": rounded((n - 1) / n * n * nbytes / bandwidth + (n - 1) * alpha),
    }
    expected["track"] = [["collective", "CC", nbytes, expected["allreduce"]], 0]  # path, engine, bytes, ns; dropped
    for rank in (0, 1):
        assert json.loads((tmp_path / f"rank{rank}.json").read_text()) == expected, rank


ORDERED_WORKER = textwrap.dedent("""
    import json, os, sys, torch, torch_neuronx
    import torch.distributed as dist

    dist.init_process_group(backend="neuron")
    rank = dist.get_rank()
    t = torch.ones(1 << 20, device="neuron")
    torch.neuron.synchronize()
    dist.barrier()

    def predicted_ns(fn):
        torch.neuron.synchronize()
        before = torch_neuronx.device_time()
        fn()
        torch.neuron.synchronize()
        return round((torch_neuronx.device_time() - before) * 1e6)

    def loop():
        for _ in range(5):
            dist.all_reduce(t)   # work.wait() inside
            t.mul_(0.5)          # reads the all-reduced t

    def waited_work():
        dist.all_reduce(t, async_op=True).wait()
        t.mul_(0.5)

    def synchronized_work():
        dist.all_reduce(t, async_op=True).synchronize()
        t.mul_(0.5)

    def waited_future():
        dist.all_reduce(t, async_op=True).get_future().wait()
        t.mul_(0.5)

    def events_around_loop():
        start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
        start.record(); loop(); end.record(); end.synchronize()
        return round(start.elapsed_time(end) * 1e6)

    times = {"allreduce": predicted_ns(lambda: dist.all_reduce(t)), "mul": predicted_ns(lambda: t.mul_(0.5)),
             "loop": predicted_ns(loop), "work.wait": predicted_ns(waited_work),
             "work.synchronize": predicted_ns(synchronized_work), "future.wait": predicted_ns(waited_future)}
    torch.neuron.synchronize()
    times["events"] = events_around_loop()
    with open(os.path.join(sys.argv[1], f"rank{rank}.json"), "w") as out:
        json.dump(times, out)
    dist.destroy_process_group()
""")


def test_work_issued_after_a_collective_waits_for_it_on_the_device_timeline(tmp_path):
    """As WorkNCCL::wait() makes the current stream wait for the collective's end: an op reading
    an all-reduced tensor starts after the all-reduce (review 25, collective_then_compute.py)."""
    run_two_ranks(tmp_path, ORDERED_WORKER)
    for rank in (0, 1):
        times = json.loads((tmp_path / f"rank{rank}.json").read_text())
        pair = times["allreduce"] + times["mul"]
        assert times["allreduce"] > 0 and times["mul"] > 0, times
        assert times["loop"] == 5 * pair, (rank, times)
        assert times["events"] == 5 * pair, (rank, times)  # the current stream's own time
        for way in ("work.wait", "work.synchronize", "future.wait"):
            assert times[way] == pair, (rank, way, times)
