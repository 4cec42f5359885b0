"""The profiler's device track (torch_neuronx.profiling; csrc/DeviceTrack.h; docs/device-clock.md):
with ProfileMode.DEVICE the Chrome trace holds, beside the host's ATen ops, one track per
(device, stream) with each launch's predicted span: the same duration the device clock gives
Event.elapsed_time, its engine and launch path. RUNTIME alone has no device track, DEVICE with the
clock off raises, a capacity bounds the recording, and launches from several threads all show."""
import json
import textwrap
import threading

import pytest
import torch

import torch_neuronx
from conftest import QUEUED_RUN, every_op_queued, run_python
from torch_neuronx.profiling import NeuronConfig, NeuronProfiler, ProfileMode

C = torch_neuronx._sim._C
CPU = [torch.profiler.ProfilerActivity.CPU]

pytestmark = pytest.mark.skipif(not C._device_clock_on(), reason="the device clock is off (NEURON_SIM_DEVICE_CLOCK=0)")


def profile(fn, tmp_path, modes=(ProfileMode.DEVICE,)):
    """Runs fn under torch.profiler with NeuronProfiler(cfg).export_trace as on_trace_ready;
    returns the trace written, as a dict."""
    config = NeuronConfig(modes=list(modes), profile_output_dir=str(tmp_path / "traces"))
    profiler = NeuronProfiler(config)
    with torch.profiler.profile(activities=CPU, experimental_config=config, on_trace_ready=profiler.export_trace):
        fn()
    (path,) = profiler.traces
    with open(path) as file:
        return json.load(file)


def device_spans(trace):
    """The device track's kernel events: the "X" events of the device processes."""
    devices = {e["pid"] for e in trace["traceEvents"]
               if e.get("ph") == "M" and e["name"] == "process_name" and e["args"]["name"].startswith("neuron:")}
    return [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("pid") in devices]


def op(name):
    """The op of a launch's name, whichever overload its launch path names ("aten::add.Tensor")."""
    return name.split(".")[0]


def host_ops(trace):
    return [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"]


def thread_names(trace):
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
            if e.get("ph") == "M" and e["name"] == "thread_name"}


def timed(fn, into):
    """Runs fn between two timing events; appends the predicted ns between them to `into`."""
    start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
    start.record()
    result = fn()
    end.record()
    end.synchronize()
    into.append(round(start.elapsed_time(end) * 1e6))
    return result


@pytest.fixture(autouse=True)
def _empty_track():
    C._device_track_stop()  # nothing left from another test's recording
    yield


def test_a_matmul_a_pointwise_op_and_copies_have_the_clocks_durations(tmp_path):
    a = torch.randn(300, 200, dtype=torch.bfloat16, device="neuron")
    b = torch.randn(200, 100, dtype=torch.bfloat16, device="neuron")
    host = torch.randn(1 << 16)
    predicted = []

    def work():
        c = timed(lambda: a @ b, predicted)
        d = timed(lambda: torch.exp(c), predicted)
        timed(lambda: d.cpu(), predicted)
        timed(lambda: host.to("neuron"), predicted)
    trace = profile(work, tmp_path)
    spans = device_spans(trace)
    assert [op(s["name"]) for s in spans] == ["aten::mm", "aten::exp", "aten::copy_", "aten::copy_"]
    assert [s["args"]["end_ns"] - s["args"]["start_ns"] for s in spans] == predicted
    assert [s["dur"] for s in spans] == pytest.approx([ns / 1e3 for ns in predicted], abs=1e-3)
    assert [s["args"]["engine"] for s in spans] == ["TensorE", "ScalarE", "DMA", "DMA"]
    assert {s["args"]["path"] for s in spans[:2]} <= {"direct", "generic", "queued"}  # eager ops, on any path
    assert [s["args"]["path"] for s in spans[2:]] == ["copy", "copy"]
    assert [s["args"]["work"] for s in spans[2:]] == ["device to host", "host to device"]
    assert spans[0]["args"]["flops"] == 2 * 300 * 200 * 100
    assert spans[0]["args"]["bytes"] == (300 * 200 + 200 * 100 + 300 * 100) * 2
    assert spans[3]["args"]["bytes"] == 4 << 16
    assert "predicted" in spans[0]["args"]["time"]
    # one stream's spans follow each other on its timeline
    assert all(x["args"]["end_ns"] <= y["args"]["start_ns"] for x, y in zip(spans, spans[1:]))
    # beside the host's ATen ops; the first span starts at the first host event
    ops = host_ops(trace)
    assert {"aten::mm", "aten::exp"} <= {host_op["name"] for host_op in ops}
    host_start = min(e["ts"] for e in trace["traceEvents"] if e.get("ph") == "X" and isinstance(e["pid"], int)
                     and e not in spans)
    assert spans[0]["ts"] == pytest.approx(host_start, abs=1e-3)
    assert spans[0]["pid"] not in {host_op["pid"] for host_op in ops}
    name = thread_names(trace)[(spans[0]["pid"], spans[0]["tid"])]
    assert name == f"neuron:0 stream {spans[0]['tid']} (predicted Trainium)"
    assert trace["neuronDeviceTrack"]["dropped"] == 0


def test_two_streams_give_two_tracks(tmp_path):
    x = torch.randn(256, 256, device="neuron")
    s1, s2 = torch.neuron.Stream(), torch.neuron.Stream()

    def work():
        with torch.neuron.stream(s1):
            x + x
        with torch.neuron.stream(s2):
            x * x
        torch.neuron.synchronize()
    spans = device_spans(profile(work, tmp_path))
    assert [(op(s["name"]), s["tid"]) for s in spans] == [("aten::add", s1.stream_id), ("aten::mul", s2.stream_id)]
    assert s1.stream_id != s2.stream_id
    names = thread_names(profile(work, tmp_path / "again"))
    assert {names[(spans[0]["pid"], s.stream_id)] for s in (s1, s2)} == {
        f"neuron:0 stream {s1.stream_id} (predicted Trainium)", f"neuron:0 stream {s2.stream_id} (predicted Trainium)"}


def test_a_compiled_program_is_one_program_span(tmp_path, fresh_dynamo):
    a, b = torch.randn(64, 64, device="neuron"), torch.randn(64, device="neuron")
    compiled = torch.compile(lambda a, b: torch.relu(a @ a + b) * 2, backend="neuron")
    compiled(a, b)  # compiled outside the profile
    predicted = []
    spans = device_spans(profile(lambda: timed(lambda: compiled(a, b), predicted), tmp_path))
    programs = [s for s in spans if s["args"]["path"] == "program"]
    assert len(programs) == 1 and programs[0]["args"]["engine"] == "program"
    assert programs[0]["args"]["end_ns"] - programs[0]["args"]["start_ns"] == predicted[0]
    assert not [s for s in spans if s["args"]["path"] in ("direct", "generic", "queued")]


def test_runtime_mode_alone_has_no_device_track(tmp_path):
    x = torch.randn(64, device="neuron")
    trace = profile(lambda: (x + 1).cpu(), tmp_path, modes=[ProfileMode.RUNTIME])
    assert not device_spans(trace) and "neuronDeviceTrack" not in trace
    assert "aten::add" in {host_op["name"] for host_op in host_ops(trace)}
    assert C._device_track_stop() == ([], 0)  # nothing was recorded


def test_the_older_context_manager_records_the_device_track(tmp_path):
    x = torch.randn(64, device="neuron")
    with NeuronProfiler(neuron_output_dir=str(tmp_path)) as prof:
        (x + 1).sum().item()
    assert any(e.key == "aten::sum" for e in prof.key_averages())
    (path,) = tmp_path.iterdir()
    names = [op(s["name"]) for s in device_spans(json.loads(path.read_text()))]
    assert names[:2] == ["aten::add", "aten::sum"]


def test_device_mode_with_the_clock_off_says_how_to_turn_it_on():
    code = textwrap.dedent("""
        import torch, torch_neuronx
        from torch_neuronx.profiling import NeuronConfig, NeuronProfiler, ProfileMode
        for call in (lambda: NeuronConfig(modes=[ProfileMode.DEVICE]), torch_neuronx._sim._C._device_track_start):
            try:
                call()
                print("no error")
            except RuntimeError as error:
                print("raised:", "NEURON_SIM_DEVICE_CLOCK" in str(error) and "set it to 1" in str(error))
        NeuronConfig(modes=[ProfileMode.RUNTIME])
        print("device track:", NeuronProfiler().device_track)   # the older form: host only
    """)
    result = run_python(code, env={"NEURON_SIM_DEVICE_CLOCK": "0"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == ["raised: True", "raised: True", "device track: False"]


def test_the_capacity_keeps_the_first_spans_and_counts_the_dropped(tmp_path):
    x = torch.randn(64, device="neuron")
    previous = C._set_device_track_capacity(2)
    try:
        with pytest.warns(UserWarning, match="dropped 3"):
            trace = profile(lambda: [x + i for i in range(5)], tmp_path)
    finally:
        C._set_device_track_capacity(previous)
    assert len(device_spans(trace)) == 2
    assert trace["neuronDeviceTrack"] == {"spans": 2, "dropped": 3, "time": "predicted (device clock)"}


def test_threads_launching_at_once_lose_no_spans():
    threads, ops = 4, 200
    x = torch.randn(16, device="neuron")
    barrier = threading.Barrier(threads)

    def launch():
        barrier.wait()
        for _ in range(ops):
            x.add(1)
    C._device_track_start()
    workers = [threading.Thread(target=launch) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    spans, dropped = C._device_track_stop()
    adds = sorted((s[2], s[3]) for s in spans if op(s[4]) == "aten::add")
    assert len(adds) == threads * ops and dropped == 0
    # every thread's launches on the one default stream: disjoint spans, as the timeline placed them
    assert all(end <= next_start for (_, end), (next_start, _) in zip(adds, adds[1:]))


@pytest.mark.skipif(QUEUED_RUN, reason="this is the run with every op queued")
def test_the_device_track_with_every_op_queued():
    every_op_queued(__file__)
