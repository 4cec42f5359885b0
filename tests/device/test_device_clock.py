"""The device clock (docs/device-clock.md; Note [Device clock] in runtime/cost_model.h): each
launch's predicted Trainium duration equals the value computed here by hand from the platform
data file, streams and events order the device timeline, Event.elapsed_time() reads it, and a
model's eager timeline is the same on every run and on every launch path. Nothing here measures
host time."""
import json
import math
import os
import textwrap
import tomllib

import pytest
import torch

import torch_neuronx
from conftest import run_python

PLATFORMS_FILE = os.path.join(os.path.dirname(torch_neuronx._sim.__file__), "data", "platforms.toml")
with open(PLATFORMS_FILE, "rb") as file:
    PLATFORMS = tomllib.load(file)


class Hand:
    """The cost model's formulas, written out again from the data file's constants."""

    def __init__(self, platform="trn2", lnc=2):
        self.c = {name: entry["value"] for name, entry in PLATFORMS[platform].items()}
        self.lnc = lnc

    def hbm_per_ns(self):
        return self.c["hbm_chip_gbps"] / self.c["physical_cores_per_chip"] * self.lnc

    def eager(self, compute_ns, hbm_bytes):
        return math.floor(self.c["eager_launch_ns"] + max(compute_ns, hbm_bytes / self.hbm_per_ns()) + 0.5)

    def matmul(self, m, k, n, itemsize=2, tflops="tensor_bf16_tflops"):
        pad = lambda value, to: -(-value // int(to)) * int(to)  # noqa: E731
        compute = 2 * m * pad(k, self.c["systolic_array_rows"]) * pad(n, self.c["systolic_array_columns"]) / (
            self.c[tflops] * 1e3 * self.lnc * self.c["tensor_utilization"])
        return self.eager(compute, (m * k + k * n + m * n) * itemsize)

    def vector(self, elements, lanes, hbm_bytes):
        return self.eager(elements / (self.c[lanes] * self.c["vector_clock_ghz"] * self.lnc), hbm_bytes)

    def scalar(self, elements, lanes, hbm_bytes):
        return self.eager(elements / (self.c[lanes] * self.c["scalar_clock_ghz"] * self.lnc), hbm_bytes)

    def host_transfer(self, nbytes):
        return self.eager(nbytes / self.c["host_link_gbps"], nbytes)

    def device_copy(self, nbytes):
        dma = self.c["dma_chip_gbps"] / self.c["physical_cores_per_chip"] * self.lnc
        return self.eager(nbytes / dma, 2 * nbytes)


def predicted_ns(fn):
    """The predicted device time of `fn`'s launches on the current stream, in nanoseconds
    (events: other streams' timelines, left by other tests, do not enter)."""
    start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
    start.record()
    result = fn()
    end.record()
    end.synchronize()
    return round(start.elapsed_time(end) * 1e6), result


def test_every_constant_has_a_source_and_every_platform_the_same_constants():
    assert set(PLATFORMS) == {"trn1", "trn2", "trn3"}
    names = set(PLATFORMS["trn2"])
    for platform, constants in PLATFORMS.items():
        assert set(constants) == names, platform
        for name, entry in constants.items():
            assert set(entry) == {"value", "source"}, (platform, name)
            assert entry["value"] > 0 and entry["source"].strip(), (platform, name)
    # The fitted constants say what they were fitted to.
    assert PLATFORMS["trn2"]["eager_launch_ns"]["source"].startswith("fitted:")


def test_the_clock_is_on_by_default_on_trn2():
    assert torch_neuronx._sim._C._device_clock_on()
    assert torch.neuron.get_device_properties(0).platform == "trn2"


def test_one_matmul_costs_the_padded_tensor_work_or_its_hbm_traffic():
    a = torch.randn(300, 200, dtype=torch.bfloat16, device="neuron")
    b = torch.randn(200, 100, dtype=torch.bfloat16, device="neuron")
    cost, _ = predicted_ns(lambda: a @ b)
    assert cost == Hand().matmul(300, 200, 100)
    # compute-bound: a larger one; k and n pad to the 128 x 128 array
    a = torch.randn(2048, 1000, dtype=torch.bfloat16, device="neuron")
    b = torch.randn(1000, 1100, dtype=torch.bfloat16, device="neuron")
    cost, _ = predicted_ns(lambda: a @ b)
    assert cost == Hand().matmul(2048, 1000, 1100)
    hand = Hand()
    assert 2 * 2048 * 1024 * 1152 / (hand.c["tensor_bf16_tflops"] * 1e3 * 2 * hand.c["tensor_utilization"]) > \
        (2048 * 1000 + 1000 * 1100 + 2048 * 1100) * 2 / hand.hbm_per_ns()


def test_linear_in_float32_runs_at_the_float32_rate():
    x = torch.randn(4, 512, 1024, device="neuron")
    w = torch.randn(768, 1024, device="neuron")
    cost, _ = predicted_ns(lambda: torch.nn.functional.linear(x, w))
    assert cost == Hand().matmul(4 * 512, 1024, 768, itemsize=4, tflops="tensor_fp32_tflops")


def test_one_pointwise_op_costs_a_vector_pass_or_its_hbm_traffic():
    x = torch.randn(1024, 1024, device="neuron")
    y = torch.randn(1024, 1024, device="neuron")
    cost, _ = predicted_ns(lambda: x + y)
    assert cost == Hand().vector(1 << 20, "vector_lanes_other", 3 * 4 << 20)
    h = torch.randn(64, 64, dtype=torch.bfloat16, device="neuron")
    cost, _ = predicted_ns(lambda: torch.exp(h))  # ScalarE
    assert cost == Hand().scalar(64 * 64, "scalar_lanes_bf16", 2 * 64 * 64 * 2)
    cost, _ = predicted_ns(lambda: h.mul_(2))  # in place: reads and writes h
    assert cost == Hand().vector(64 * 64, "vector_lanes_bf16", 2 * 64 * 64 * 2)


def test_one_copy_costs_its_dma_or_host_link_time():
    n = 1 << 20
    host = torch.randn(n)
    cost, device = predicted_ns(lambda: host.to("neuron"))
    assert cost == Hand().host_transfer(4 * n)
    cost, _ = predicted_ns(lambda: device.cpu())
    assert cost == Hand().host_transfer(4 * n)
    other = torch.empty_like(device)
    cost, _ = predicted_ns(lambda: other.copy_(device))
    assert cost == Hand().device_copy(4 * n)


def test_a_scatter_in_place_moves_its_values_not_its_whole_destination():
    """Cost model v2: a KV cache's update (index_copy_ of one position into a 4096-position
    cache) moves the values and the index; v1 costed a copy of the whole cache. Out of place,
    the op writes a whole new tensor and costs that."""
    cache = torch.zeros(1, 8, 4096, 128, device="neuron")
    values = torch.randn(1, 8, 1, 128, device="neuron")
    index = torch.tensor([7], device="neuron")
    moved = values.nbytes + index.nbytes
    cost, _ = predicted_ns(lambda: cache.index_copy_(2, index, values))
    assert cost == Hand().device_copy(moved)
    table, row, rows = torch.zeros(4096, 128, device="neuron"), torch.randn(1, 128, device="neuron"), index
    cost, _ = predicted_ns(lambda: table.index_put_((rows,), row))
    assert cost == Hand().device_copy(row.nbytes + rows.nbytes)
    cost, _ = predicted_ns(lambda: torch.index_copy(cache, 2, index, values))
    assert cost == Hand().device_copy(cache.nbytes)
    assert torch.equal(cache[0, :, 7].cpu(), values[0, :, 0].cpu())


SCATTERS_IN_PLACE = {
    "index_copy_": lambda t, i, v, i2: t.index_copy_(0, i, v),
    "index_add_": lambda t, i, v, i2: t.index_add_(0, i, v),
    "index_reduce_": lambda t, i, v, i2: t.index_reduce_(0, i, v, "amax"),
    "scatter_": lambda t, i, v, i2: t.scatter_(0, i2, v),
    "scatter_.value": lambda t, i, v, i2: t.scatter_(0, i2, 2.0),
    "scatter_.reduce": lambda t, i, v, i2: t.scatter_(0, i2, v, reduce="add"),
    "scatter_add_": lambda t, i, v, i2: t.scatter_add_(0, i2, v),
    "scatter_reduce_": lambda t, i, v, i2: t.scatter_reduce_(0, i2, v, "sum"),
    "index_put_": lambda t, i, v, i2: t.index_put_((i,), v),
}


@pytest.mark.parametrize("name", list(SCATTERS_IN_PLACE))
def test_every_scatter_in_place_writes_its_rows_not_a_copy_of_its_destination(name):
    """The class of the KV cache's index_copy_: PyTorch's non-functional composite ran these as
    the functional op (a copy of the whole destination) and copy_ back; each now runs in place,
    equal to the CPU, and its device traffic is its values and indexes, not the destination."""
    args = (torch.zeros(4096, 64), torch.tensor([5, 9]), torch.randn(2, 64), torch.tensor([[5] * 64, [9] * 64]))
    expected = SCATTERS_IN_PLACE[name](*[a.clone() for a in args])
    on_device = [a.to("neuron") for a in args]
    torch.neuron.synchronize()
    before = torch_neuronx.device_counters()
    result = SCATTERS_IN_PLACE[name](*on_device)
    torch.neuron.synchronize()
    moved = (torch_neuronx.device_counters() - before).hbm_bytes
    assert result is on_device[0]
    assert torch.equal(result.cpu(), expected)
    assert moved <= 2 * (args[2].nbytes + args[3].nbytes), f"{name} moved {moved} bytes of a {args[0].nbytes}-byte table"


def test_elapsed_time_between_events_is_the_predicted_sum():
    a = torch.randn(300, 200, dtype=torch.bfloat16, device="neuron")
    b = torch.randn(200, 100, dtype=torch.bfloat16, device="neuron")
    x = torch.randn(1024, 1024, device="neuron")
    start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
    start.record()
    a @ b
    x + x
    end.record()
    end.synchronize()
    hand = Hand()
    expected = hand.matmul(300, 200, 100) + hand.vector(1 << 20, "vector_lanes_other", 3 * 4 << 20)
    assert start.elapsed_time(end) == pytest.approx(expected / 1e6, abs=1e-9)


TWO_STREAMS = textwrap.dedent("""
    import json, torch, torch_neuronx
    a = torch.randn(2048, 1024, dtype=torch.bfloat16, device="neuron")
    x = torch.randn(256, 256, device="neuron")
    torch.neuron.synchronize()
    s1, s2, s3 = torch.neuron.Stream(), torch.neuron.Stream(), torch.neuron.Stream()
    start = torch.neuron.Event(enable_timing=True)
    start.record(s1)
    with torch.neuron.stream(s1):
        a @ a.T                                   # long, on s1
    done1 = s1.record_event(torch.neuron.Event(enable_timing=True))
    with torch.neuron.stream(s3):
        x + x                                     # no wait: beside s1 (issued before s2's add)
    end3 = s3.record_event(torch.neuron.Event(enable_timing=True))
    s2.wait_event(done1)
    with torch.neuron.stream(s2):
        x + x                                     # after s1's matmul
    end2 = s2.record_event(torch.neuron.Event(enable_timing=True))
    torch.neuron.synchronize()
    print(json.dumps({"s1": start.elapsed_time(done1), "s2": start.elapsed_time(end2),
                      "s3": start.elapsed_time(end3), "device": torch_neuronx.device_time() * 1e6}))
""")


@pytest.mark.parametrize("blocking", ["1", "0"])
def test_an_event_wait_orders_two_streams_timelines(blocking):
    result = run_python(TWO_STREAMS, env={"NEURON_LAUNCH_BLOCKING": blocking})
    assert result.returncode == 0, result.stderr[-3000:]
    t = json.loads(result.stdout.strip().splitlines()[-1])
    hand = Hand()
    matmul = hand.matmul(2048, 1024, 2048)
    add = hand.vector(256 * 256, "vector_lanes_other", 3 * 256 * 256 * 4)
    assert t["s1"] == pytest.approx(matmul / 1e6, abs=1e-9)
    assert t["s2"] == pytest.approx((matmul + add) / 1e6, abs=1e-9)  # waited for s1
    # s3 waited for nothing: its add starts with s1's matmul (the device's issue frontier, not
    # s3's own old end) and ends long before it
    assert t["s3"] == pytest.approx(add / 1e6, abs=1e-9)
    assert round(t["device"]) >= matmul + add  # the device's time: the latest stream's


MODEL = textwrap.dedent("""
    import json, torch, torch_neuronx
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(1000, 256), torch.nn.Linear(256, 1024), torch.nn.GELU(),
                                torch.nn.Linear(1024, 256), torch.nn.LayerNorm(256),
                                torch.nn.Linear(256, 1000)).to("neuron", dtype=torch.bfloat16)
    tokens = torch.randint(0, 1000, (2, 64)).to("neuron")
    with torch.no_grad():
        model(tokens); torch.neuron.synchronize()   # warm: kernels and plans made
        start = torch.neuron.Event(enable_timing=True); end = torch.neuron.Event(enable_timing=True)
        before = torch_neuronx.device_time()
        start.record()
        logits = model(tokens).softmax(-1)
        end.record(); end.synchronize()
    print(json.dumps({"elapsed": start.elapsed_time(end), "device": torch_neuronx.device_time() - before,
                      "argmax": logits.argmax(-1).sum().item()}))
""")


def test_a_small_models_eager_timeline_is_positive_and_the_same_on_every_run_and_path():
    runs = []
    for env in ({"NEURON_LAUNCH_BLOCKING": "1"}, {"NEURON_LAUNCH_BLOCKING": "1"},
                {"NEURON_LAUNCH_BLOCKING": "0"}, {"NEURON_LAUNCH_BLOCKING": "0", "NEURON_SIM_INLINE_BYTES": "0"}):
        result = run_python(MODEL, env=env, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        runs.append(json.loads(result.stdout.strip().splitlines()[-1]))
    first = runs[0]
    # at least the six layers and the softmax, each paying the eager launch cost
    assert first["elapsed"] > 7 * Hand().c["eager_launch_ns"] / 1e6
    assert first["device"] == pytest.approx(first["elapsed"], abs=1e-9)
    for other in runs[1:]:
        assert other == first, runs  # direct, generic and queued paths cost the same


@pytest.mark.parametrize("platform, lnc", [("trn1", 1), ("trn3", 2), ("trn2", 1)])
def test_the_platform_and_lnc_choose_the_constants(platform, lnc):
    code = textwrap.dedent("""
        import torch, torch_neuronx
        a = torch.randn(300, 200, dtype=torch.bfloat16, device="neuron")
        b = torch.randn(200, 100, dtype=torch.bfloat16, device="neuron")
        before = torch_neuronx.device_time()
        a @ b
        print(round((torch_neuronx.device_time() - before) * 1e6))
    """)
    result = run_python(code, env={"NEURON_SIM_PLATFORM": platform, "NEURON_LOGICAL_NC_CONFIG": str(lnc)})
    assert result.returncode == 0, result.stderr[-3000:]
    assert int(result.stdout.split()[-1]) == Hand(platform, lnc).matmul(300, 200, 100)


def test_the_clock_can_be_switched_off():
    code = textwrap.dedent("""
        import torch, torch_neuronx
        assert not torch_neuronx._sim._C._device_clock_on()
        start = torch.neuron.Event(enable_timing=True); end = torch.neuron.Event(enable_timing=True)
        start.record(); torch.randn(64, 64, device="neuron").exp(); end.record(); end.synchronize()
        assert start.elapsed_time(end) >= 0   # host time
        try:
            torch_neuronx.device_time()
        except RuntimeError as error:
            print("raised:", "NEURON_SIM_DEVICE_CLOCK" in str(error))
    """)
    result = run_python(code, env={"NEURON_SIM_DEVICE_CLOCK": "0"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["raised:", "True"]
    bad = run_python("import torch_neuronx", env={"NEURON_SIM_DEVICE_CLOCK": "yes"})
    assert bad.returncode != 0 and "NEURON_SIM_DEVICE_CLOCK='yes'" in bad.stderr


def test_device_counters_count_flops_and_bytes_and_give_mfu_and_mbu():
    """MFU/MBU of a run (issue 25 §3): the matmul FLOPs and HBM bytes the clock costed, over the
    predicted time, against one logical core's peaks (hand-computed from the data file)."""
    import tomllib
    from torch_neuron_sim import dry_run
    a = torch.randn(256, 512, dtype=torch.bfloat16, device="neuron")
    b = torch.randn(512, 384, dtype=torch.bfloat16, device="neuron")
    start = torch_neuronx.device_counters()
    for _ in range(3):
        torch.mm(a, b)
    work = torch_neuronx.device_counters() - start
    assert work.flops == 3 * 2 * 256 * 512 * 384
    assert work.hbm_bytes == 3 * 2 * (256 * 512 + 512 * 384 + 256 * 384)
    with open(os.path.join(os.path.dirname(dry_run.__file__), "data", "platforms.toml"), "rb") as f:
        spec = tomllib.load(f)[work.platform]
    lnc = work.logical_nc_config
    peak_flops = spec["tensor_bf16_tflops"]["value"] * 1e12 * lnc
    peak_bytes = spec["hbm_chip_gbps"]["value"] * 1e9 / spec["physical_cores_per_chip"]["value"] * lnc
    assert work.mfu == pytest.approx(work.flops / (work.time_ms / 1e3) / peak_flops)
    assert work.mbu == pytest.approx(work.hbm_bytes / (work.time_ms / 1e3) / peak_bytes)
    assert 0 < work.mfu < 1 and 0 < work.mbu < 1


def test_device_counters_of_a_compiled_program_hold_its_steps_flops():
    a = torch.randn(64, 128, dtype=torch.bfloat16, device="neuron")
    b = torch.randn(128, 32, dtype=torch.bfloat16, device="neuron")
    f = torch.compile(lambda x, y: (x @ y).relu(), backend="neuron")
    f(a, b)
    start = torch_neuronx.device_counters()
    f(a, b)
    assert (torch_neuronx.device_counters() - start).flops == 2 * 64 * 128 * 32


def test_device_counters_refuse_a_device_that_does_not_exist():
    with pytest.raises(IndexError, match="out of range: valid indices"):
        torch_neuronx.device_counters(torch.neuron.device_count() + 5)


@pytest.mark.parametrize("blocking", ["1", "0"])
def test_in_place_ops_read_and_write_self_on_every_launch_path(blocking):
    """Review 25 finding 4: x.add_(y) run as add.out(x, y, out=x) (asynchronous mode) lost the
    read of x; every launch path counts reads of x and y and the write of x."""
    code = textwrap.dedent("""
        import torch, torch_neuronx
        x = torch.randn(256, 512, device="neuron"); y = torch.randn(256, 512, device="neuron")
        torch.neuron.synchronize()
        counts = []
        for op in (lambda: x.add_(y), lambda: x.mul_(y), lambda: x.sub_(1), lambda: x.exp_()):
            start = torch_neuronx.device_counters(); op(); torch.neuron.synchronize()
            counts.append((torch_neuronx.device_counters() - start).hbm_bytes)
        print(counts)
    """)
    done = run_python(code, env={"NEURON_LAUNCH_BLOCKING": blocking})
    assert done.returncode == 0, done.stderr
    size = 256 * 512 * 4
    assert done.stdout.strip() == str([3 * size, 3 * size, 2 * size, 2 * size])


def test_work_issued_later_on_another_stream_never_starts_earlier():
    """The device's issue frontier (runtime/timeline.h): streams share one time origin."""
    x = torch.randn(256, 256, device="neuron")
    side = torch.neuron.Stream()
    torch.neuron.synchronize()
    for _ in range(10):
        x @ x                                     # default stream
    start = torch.neuron.Event(enable_timing=True)
    start.record()                                # default stream, after the ten matmuls
    with torch.neuron.stream(side):               # an idle stream: its own timeline is far behind
        x @ x
        end = torch.neuron.Event(enable_timing=True)
        end.record()
    end.synchronize()
    assert start.elapsed_time(end) >= 0
    # The profiler's device track: the side stream's matmul is not drawn before the default
    # stream's ten, which were issued before it.
    C = torch_neuronx._sim._C
    C._device_track_start()
    for _ in range(10):
        x @ x
    with torch.neuron.stream(side):
        x @ x
    torch.neuron.synchronize()
    spans, _ = C._device_track_stop()
    assert [(span[1], span[4]) for span in spans] == [(0, "aten::mm")] * 10 + [(side.stream_id, "aten::mm")]
    starts = [span[2] for span in spans]
    assert starts == sorted(starts)


def test_after_a_host_synchronize_nothing_starts_before_the_synchronized_time():
    x = torch.randn(256, 256, device="neuron")
    side = torch.neuron.Stream()
    for _ in range(3):
        x @ x
    torch.neuron.synchronize()
    synchronized_ms = torch_neuronx.device_time()
    start = torch.neuron.Event(enable_timing=True)
    start.record()
    with torch.neuron.stream(side):
        matmul_ns, _ = predicted_ns(lambda: x @ x)
        x @ x
        end = torch.neuron.Event(enable_timing=True)
        end.record()
    end.synchronize()
    # the side stream's second matmul ends two matmuls after the synchronized time
    assert start.elapsed_time(end) == pytest.approx(2 * matmul_ns / 1e6, abs=1e-9)
    assert torch_neuronx.device_time() == pytest.approx(synchronized_ms + 2 * matmul_ns / 1e6, abs=1e-9)


def test_elapsed_time_between_events_of_two_devices_raises():
    if torch.neuron.device_count() < 2:
        pytest.skip("needs two neuron devices")
    start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
    start.record(torch.neuron.current_stream(0))
    end.record(torch.neuron.current_stream(1))
    end.synchronize()
    with pytest.raises(RuntimeError, match="same device.*neuron:0 and the end event on neuron:1"):
        start.elapsed_time(end)


@pytest.mark.parametrize("index", [256, 257, -2, -5, 1 << 40])
def test_device_time_and_counters_refuse_a_bad_index_instead_of_answering_for_another_device(index):
    with pytest.raises(IndexError, match=f"neuron device index {index} is out of range"):
        torch_neuronx.device_time(index)
    with pytest.raises(IndexError, match=f"neuron device index {index} is out of range"):
        torch_neuronx.device_counters(index)


def test_device_counters_name_their_device_and_refuse_to_subtract_two_devices():
    if torch.neuron.device_count() < 2:
        pytest.skip("needs two neuron devices")
    current = torch_neuronx.device_counters()
    assert current.device == torch.neuron.current_device()
    first, second = torch_neuronx.device_counters(0), torch_neuronx.device_counters(1)
    assert (first.device, second.device) == (0, 1)
    assert (first - torch_neuronx.device_counters(0)).device == 0
    with pytest.raises(ValueError, match="different devices"):
        first - second


@pytest.mark.parametrize("dense", [False, True], ids=["varlen", "dense"])
def test_flash_attention_costs_its_sequences_matmuls_forward_and_backward(dense):
    """FlashAttention's ops (varlen attention, Note [FlashAttention's ops on neuron]) are costed as
    attention per sequence: forward 2 matmuls of 2 L^2 D FLOPs per head and sequence, backward 5
    (N sequences of the average length L = total / N: a launch does not carry the offsets)."""
    from torch.nn.attention.varlen import varlen_attn
    heads, dim = 4, 16

    def flops(sequences, total=24):
        if dense:
            q, k, v = (torch.randn(sequences, total // sequences, heads, dim, device="neuron").requires_grad_()
                       for _ in range(3))
            call = lambda: torch.ops.aten._flash_attention_forward(q, k, v, None, None, 0, 0, 0.0, True, False)[0]  # noqa: E731
        else:
            q, k, v = (torch.randn(total, heads, dim, device="neuron").requires_grad_() for _ in range(3))
            cu = torch.linspace(0, total, sequences + 1).round().to(torch.int32).to("neuron")
            call = lambda: varlen_attn(q, k, v, cu, cu, total, total, window_size=(-1, 0))  # noqa: E731
        start = torch_neuronx.device_counters()
        out = call()
        forward = (torch_neuronx.device_counters() - start).flops
        grad = torch.ones_like(out)
        start = torch_neuronx.device_counters()
        out.backward(grad)
        return forward, (torch_neuronx.device_counters() - start).flops

    for sequences in (2, 4):
        length = 24 // sequences
        per_matmul = 2 * heads * sequences * length * length * dim
        assert flops(sequences) == (2 * per_matmul, 5 * per_matmul), sequences


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("gqa", [False, True], ids=["mha", "gqa"])
def test_attention_backward_costs_five_matmuls(compiled, gqa):
    """scaled_dot_product_attention's backward is costed as attention (the scores recomputed, dP,
    dV, dQ, dK: five matmuls of 2 L S D FLOPs per head), eager and compiled; it cost no FLOPs
    before (its launch was not recognised). The forward: two."""
    batch, heads, length, source, dim = 2, 4, 16, 24, 8
    kv_heads = 2 if gqa else heads
    q = torch.randn(batch, heads, length, dim, device="neuron", requires_grad=True)
    k, v = (torch.randn(batch, kv_heads, source, dim, device="neuron", requires_grad=True) for _ in range(2))

    def attention(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)

    fn = torch.compile(attention, backend="neuron") if compiled else attention
    fn(q, k, v).sum().backward()  # compiles both programs
    start = torch_neuronx.device_counters()
    out = fn(q, k, v)
    forward = (torch_neuronx.device_counters() - start).flops
    start = torch_neuronx.device_counters()
    out.backward(torch.ones_like(out))
    backward = (torch_neuronx.device_counters() - start).flops
    per_matmul = 2 * batch * heads * length * source * dim
    assert forward == 2 * per_matmul
    assert backward == 5 * per_matmul
