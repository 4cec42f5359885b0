"""The compat face has AWS's surface: every name a script written for the real torch_neuronx
and torch.neuron can use (../shared/reference/torchneuron-facts.md, sections 2 and 5: AWS's
torch_neuronx/__init__.py, neuron.py, memory.py, metrics.py, streams.py, profiling.py)."""
import pytest
import torch
import torch_neuronx

TORCH_NEURONX = """
    device_count current_device set_device get_device_properties empty_cache synchronize
    current_stream default_stream set_stream stream StreamContext device Stream Event
    memory_stats memory_allocated max_memory_allocated memory_reserved max_memory_reserved
    reset_peak_memory_stats reset_accumulated_memory_stats memory_summary
    get_fallback_ops get_executed_ops clear_op_tracking get_dynamo_metrics reset_dynamo_metrics
    nki_op wrap_nki NeuronProfiler is_neuron_runtime_initialized metrics
""".split()
TORCH_NEURONX_METRICS = """
    is_enabled set_enabled get_counter_names get_counter_value get_metric_names get_metric_data
    report report_filtered clear_counters clear_metrics clear_all get_compilation_metrics
""".split()
TORCH_NEURONX_PROFILING = "NeuronConfig ProfileMode NeuronProfiler".split()
TORCH_NEURON = """
    is_initialized init current_device set_device device_count is_available get_device_name
    get_device_properties get_amp_supported_dtype is_bf16_supported manual_seed manual_seed_all
    seed seed_all initial_seed get_rng_state set_rng_state device Stream stream current_stream
    default_stream set_stream synchronize Event memory_stats memory_allocated
    max_memory_allocated memory_reserved max_memory_reserved reset_peak_memory_stats
    reset_accumulated_memory_stats memory_summary empty_cache _sleep get_dynamo_metrics
    reset_dynamo_metrics memory
""".split()
TORCH_NEURON_EXTRAS = "get_rng_state_all set_rng_state_all mem_get_info".split()  # ours, for Accelerate and DTensor
TORCH_NEURON_MEMORY = """
    memory_stats memory_allocated max_memory_allocated memory_reserved max_memory_reserved
    reset_peak_memory_stats reset_accumulated_memory_stats memory_summary empty_cache
""".split()
STREAM_METHODS = "wait_event wait_stream record_event query synchronize device".split()
EVENT_METHODS = "record wait query elapsed_time synchronize".split()


@pytest.mark.parametrize("module, names", [
    ("torch_neuronx", TORCH_NEURONX), ("torch_neuronx.metrics", TORCH_NEURONX_METRICS),
    ("torch_neuronx.profiling", TORCH_NEURONX_PROFILING), ("torch.neuron", TORCH_NEURON + TORCH_NEURON_EXTRAS),
    ("torch.neuron.memory", TORCH_NEURON_MEMORY)])
def test_every_name_of_the_real_package_exists(module, names):
    import importlib
    loaded = importlib.import_module(module)
    missing = [name for name in names if not hasattr(loaded, name)]
    assert not missing, f"{module} lacks {missing}"


def test_streams_and_events_have_the_real_methods():
    stream = torch_neuronx.Stream()
    event = torch_neuronx.Event(enable_timing=True)
    assert [m for m in STREAM_METHODS if not hasattr(stream, m)] == []
    assert [m for m in EVENT_METHODS if not hasattr(event, m)] == []
    default = torch.neuron.default_stream()
    assert default.device.type == "neuron" and default.stream_id == 0
    assert default == torch.neuron.default_stream(0)
    with torch_neuronx.stream(stream):
        assert torch.neuron.current_stream() == stream
        x = torch.ones(4, device="neuron") * 2
    assert torch.neuron.current_stream() == default
    torch.neuron.set_stream(stream)
    assert torch.neuron.current_stream() == stream
    torch.neuron.set_stream(default)
    event.record(stream)
    event.synchronize()
    assert event.query() and x.sum().item() == 8
    with torch_neuronx.StreamContext(None):  # None: no change
        assert torch.neuron.current_stream() == default


def test_tensor_and_module_methods():
    t = torch.ones(2).neuron()
    assert t.is_neuron and t.device.type == "neuron"
    m = torch.nn.Linear(2, 2).neuron()
    assert next(m.parameters()).device.type == "neuron"


def test_runtime_initialised_and_fallback_lists_are_unique_name_lists():
    torch.ones(1, device="neuron")
    assert torch_neuronx.is_neuron_runtime_initialized()
    torch_neuronx.clear_op_tracking()
    a = torch.ones(4, device="neuron")
    for _ in range(3):
        (a * 3).view(2, 2)
    executed = torch_neuronx.get_executed_ops()
    assert isinstance(executed, list) and len(executed) == len(set(executed))
    assert "aten::mul.Tensor" in executed and "aten::view" in executed


def test_memory_stats_have_both_key_styles_and_a_summary():
    x = torch.empty(1024, device="neuron")
    stats = torch.neuron.memory_stats()
    assert stats["allocated_bytes"]["current"] == stats["allocated_bytes.all.current"] >= 4096
    assert stats["allocated_bytes"]["allocated"] >= stats["allocated_bytes"]["current"]
    assert stats["reserved_bytes"]["peak"] >= stats["reserved_bytes"]["current"]
    assert stats["allocation_requests"] >= 1 and "num_tensor_frees" in stats
    summary = torch.neuron.memory_summary()
    assert "neuron:0 memory summary" in summary and "Allocated memory" in summary
    assert torch.neuron.memory.memory_allocated() == torch_neuronx.memory_allocated()
    del x


def test_dynamo_metrics_start_empty_and_reset():
    torch_neuronx.reset_dynamo_metrics()
    assert torch_neuronx.get_dynamo_metrics() == [] == torch.neuron.get_dynamo_metrics()


def test_metrics_module():
    from torch_neuronx import metrics
    metrics.set_enabled(True)
    assert metrics.is_enabled()
    metrics.clear_all()
    assert metrics.get_counter_names() == [] and metrics.get_metric_names() == []
    assert metrics.get_counter_value("CompilationCache.InMemoryHits") is None
    assert metrics.get_metric_data("CompilationCache.CompilationTime") is None
    compilation = metrics.get_compilation_metrics()
    assert compilation["CompilationCache.TotalCompilations"] == 0
    assert isinstance(metrics.report(), str) and metrics.report_filtered() == ""
    metrics.set_enabled(False)


def test_nki_entry_points_say_what_to_do():
    with pytest.raises(NotImplementedError, match="neuronx-cc.*custom_op"):
        torch_neuronx.nki_op("mylib::op")
    with pytest.raises(NotImplementedError, match="NKI kernels"):
        torch_neuronx.wrap_nki(lambda: None)


def test_profiler_writes_a_trace(tmp_path):
    from torch_neuronx.profiling import NeuronConfig, NeuronProfiler, ProfileMode
    config = NeuronConfig(modes=[ProfileMode.RUNTIME], profile_output_dir=str(tmp_path / "traces"))
    profiler = NeuronProfiler(config)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], experimental_config=config,
                                on_trace_ready=profiler.export_trace):
        (torch.ones(8, device="neuron") @ torch.ones(8, device="neuron")).item()
    assert len(profiler.traces) == 1 and "aten::" in open(profiler.traces[0]).read()
    with NeuronProfiler(neuron_output_dir=str(tmp_path / "ctx")) as prof:
        torch.ones(4, device="neuron").sum().item()
    assert any(e.key == "aten::sum" for e in prof.key_averages())
    assert list((tmp_path / "ctx").iterdir())
    with pytest.raises(TypeError, match="NeuronConfig"):
        NeuronProfiler("not a config")
