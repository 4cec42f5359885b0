// The _C module: what the thin Python layer needs from the bridge and runtime.
#include <torch/csrc/Generator.h>
#include <torch/extension.h>
#include <pybind11/stl.h>

#include <chrono>
#include <map>
#include <thread>

#include "NeuronAllocator.h"
#include "NeuronCommon.h"
#include "NeuronGenerator.h"
#include "DeviceClock.h"
#include "DeviceTrack.h"
#include "Dtype64.h"
#include "OpTracking.h"
#include "HostViews.h"
#include "Launch.h"
#include "runtime/metrics.h"

namespace torch_neuron {
namespace {

// The dry run's cost of one op from metadata (DeviceClock.h, cost_of_shapes): operands as
// (sizes, dtype, on_device) tuples; returns (ns, fixed_ns, compute_ns, memory_ns).
void bind_dry_run(py::module& m) {
  using Shapes = std::vector<std::tuple<std::vector<int64_t>, at::ScalarType, bool>>;
  m.def(
      "_cost_op",
      [](const std::string& name, const Shapes& inputs, const Shapes& outputs, const std::string& platform,
         int logical_nc_config, bool copy, bool eager_launch) {
        auto convert = [](const Shapes& shapes) {
          std::vector<OperandShape> result;
          for (const auto& [sizes, dtype, on_device] : shapes) result.push_back({sizes, dtype, on_device});
          return result;
        };
        const LaunchCost cost = cost_of_shapes(name, copy ? LaunchPath::kCopy : LaunchPath::kGeneric, convert(inputs),
                                               convert(outputs), platform, logical_nc_config, eager_launch);
        return py::make_tuple(cost.cost.ns, cost.cost.fixed_ns, cost.cost.compute_ns, cost.cost.memory_ns);
      },
      py::arg("name"), py::arg("inputs"), py::arg("outputs"), py::arg("platform"), py::arg("logical_nc_config"),
      py::arg("copy") = false, py::arg("eager_launch") = true);
  // One collective from its size (the cost model's alpha-beta model, as a live collective is
  // costed): algorithm "allreduce", "allgather", "reduce_scatter", "broadcast" or "send";
  // link "neuronlink" or "efa"; ranks_per_chip > 1 combines within chips first. Returns (ns, fixed_ns, compute_ns, memory_ns).
  m.def(
      "_cost_collective",
      [](const std::string& algorithm, uint64_t bytes, int ranks, const std::string& link, const std::string& platform,
         int logical_nc_config, int ranks_per_chip) {
        static const std::map<std::string, neuron_rt::CollectiveAlgorithm> algorithms = {
            {"allreduce", neuron_rt::CollectiveAlgorithm::kRingAllReduce},
            {"allgather", neuron_rt::CollectiveAlgorithm::kRingAllGather},
            {"reduce_scatter", neuron_rt::CollectiveAlgorithm::kRingReduceScatter},
            {"broadcast", neuron_rt::CollectiveAlgorithm::kBroadcast},
            {"send", neuron_rt::CollectiveAlgorithm::kPointToPoint}};
        auto it = algorithms.find(algorithm);
        TORCH_CHECK(it != algorithms.end(), "_cost_collective: unknown algorithm '", algorithm,
                    "'; one of allreduce, allgather, reduce_scatter, broadcast, send");
        TORCH_CHECK(link == "neuronlink" || link == "efa", "_cost_collective: link '", link,
                    "' must be neuronlink or efa");
        neuron_rt::CollectiveWork work;
        work.algorithm = it->second;
        work.bytes = bytes;
        work.ranks = ranks;
        work.link = link == "efa" ? neuron_rt::CollectiveLink::kEFA : neuron_rt::CollectiveLink::kNeuronLink;
        work.ranks_per_chip = ranks_per_chip;
        const auto cost = cost_model_for(platform, logical_nc_config).cost(work);
        return py::make_tuple(cost.ns, cost.fixed_ns, cost.compute_ns, cost.memory_ns);
      },
      py::arg("algorithm"), py::arg("bytes"), py::arg("ranks"), py::arg("link"), py::arg("platform"),
      py::arg("logical_nc_config"), py::arg("ranks_per_chip") = 1);
  // One logical core's peaks (MFU/MBU denominators): (BF16 FLOP/s, HBM bytes/s).
  m.def(
      "_peak_rates",
      [](const std::string& platform, int logical_nc_config) {
        const auto& model = cost_model_for(platform, logical_nc_config);
        return py::make_tuple(model.tensor_flops_per_ns(neuron_rt::NumberFormat::kBF16) * 1e9,
                              model.hbm_bytes_per_ns() * 1e9);
      },
      py::arg("platform"), py::arg("logical_nc_config"));
}

// The profiler's device track (DeviceTrack.h). _device_track_stop() returns (spans, dropped),
// each span a tuple (device, stream, start_ns, end_ns, name, path, engine, work, bytes, flops,
// fixed_ns, compute_ns, memory_ns); torch_neuronx.profiling names the fields.
void bind_device_track(py::module& m) {
  register_device_track_profiler();
  m.def("_check_device_track", &check_device_track_available);
  m.def("_device_track_start", &start_device_track);
  m.def("_device_track_stop", [] {
    neuron_rt::DeviceTrack::Recording recording = stop_device_track();
    py::list spans(recording.spans.size());
    for (size_t i = 0; i < recording.spans.size(); ++i) {
      const neuron_rt::DeviceSpan& s = recording.spans[i];
      spans[i] = py::make_tuple(s.device, s.stream, s.start_ns, s.end_ns, s.name, s.path, neuron_rt::engine_name(s.engine),
                                s.work, s.bytes, s.flops, s.fixed_ns, s.compute_ns, s.memory_ns);
    }
    return py::make_tuple(std::move(spans), recording.dropped);
  });
  // Tests: the most spans one recording keeps (default DeviceTrack::kDefaultCapacity); returns the previous.
  m.def("_set_device_track_capacity", [](size_t capacity) {
    auto& track = neuron_rt::DeviceTrack::get();
    const size_t previous = track.capacity();
    track.set_capacity(capacity);
    return previous;
  }, py::arg("capacity"));
}

py::dict device_properties(int device) {
  // From the settings alone (Note [Counting devices without starting the runtime]).
  NEURON_RT_CALL(neuron_rt::Runtime::check_visible_device(device));
  const auto& topology = NEURON_RT_CALL(neuron_rt::Runtime::environment_topology());
  const auto& core = topology.visible[device];
  py::dict properties;
  // `name` is the instance type as the real package reports it ("trn1", "trn2", "trn3"), the
  // string tools match on (torchtitan's get_peak_flops); that the core is simulated is said by
  // `is_simulated`, never inside the name.
  properties["name"] = topology.platform_name();
  properties["is_simulated"] = true;
  properties["platform"] = topology.platform_name();
  properties["total_memory"] = core.hbm_bytes;
  properties["logical_nc_config"] = topology.logical_nc_config;
  properties["physical_cores"] = core.physical_cores;
  properties["chip"] = core.chip;
  properties["global_core_index"] = core.global_index;
  properties["chips"] = topology.chips;
  return properties;
}

py::dict memory_stats(int device) {
  const neuron_rt::MemoryStats s =
      neuron_memory_in_use(device) ? NEURON_RT_CALL(runtime().memory(device).stats()) : neuron_rt::MemoryStats{};
  py::dict stats;
  auto put = [&](const char* kind, uint64_t current, uint64_t peak, uint64_t allocated, uint64_t freed) {
    const std::string prefix = std::string(kind) + ".all.";
    stats[(prefix + "current").c_str()] = current;
    stats[(prefix + "peak").c_str()] = peak;
    stats[(prefix + "allocated").c_str()] = allocated;
    stats[(prefix + "freed").c_str()] = freed;
  };
  // One block per allocation: active memory is allocated memory.
  put("allocated_bytes", s.allocated_bytes, s.peak_allocated_bytes, s.allocated_bytes_total, s.freed_bytes_total);
  put("active_bytes", s.allocated_bytes, s.peak_allocated_bytes, s.allocated_bytes_total, s.freed_bytes_total);
  put("reserved_bytes", s.reserved_bytes, s.peak_reserved_bytes, s.reserved_bytes_total, s.released_bytes_total);
  put("allocation", s.active_blocks, s.peak_active_blocks, s.allocations, s.frees);
  put("segment", s.segments, s.peak_segments, 0, 0);
  stats["requested_bytes.all.current"] = s.requested_bytes;
  stats["requested_bytes.all.peak"] = s.peak_requested_bytes;
  stats["largest_free_range"] = s.largest_free_range;
  stats["num_ooms"] = s.ooms;
  stats["num_alloc_retries"] = s.alloc_retries;
  stats["pending_frees"] = s.pending_frees;
  stats["budget_bytes"] = s.budget_bytes;
  return stats;
}

}  // namespace
}  // namespace torch_neuron

namespace torch_neuron {
void bind_programs(pybind11::module& m);      // compile/Bindings.cpp
void bind_distributed(pybind11::module& m);  // distributed/Bindings.cpp
}

PYBIND11_MODULE(_C, m) {
  using namespace torch_neuron;
  bind_programs(m);
  bind_distributed(m);
  install_redirecting_cpu_allocator();
  m.doc() = "torch-neuron-sim: bridge between PyTorch and the simulated Neuron runtime";
  m.def("_init", [] { runtime(); });
  // Note [Launches]: tests count what passes the seam, per path.
  m.def("_count_launches", &count_launches, py::arg("on"));
  m.def("_launch_counts", [] {
    const auto counts = launch_counts();
    py::dict result;
    for (int i = 0; i < kLaunchPaths; ++i) result[launch_path_name(LaunchPath(i))] = counts[i];
    return result;
  });
  // Note [Device clock] (DeviceClock.h).
  m.def("_start_device_clock", &start_device_clock, py::arg("platform_file"));
  m.def("_device_clock_on", &device_clock_on);
  m.def("_enter_program_steps", &enter_program_steps);
  m.def("_leave_program_steps", &leave_program_steps);
  m.def("_device_time_ns", [](int64_t device) { return device_time_ns(device); }, py::arg("device") = -1);
  m.def("_device_work", [](int64_t device) { return device_work(device); }, py::arg("device") = -1);
  bind_dry_run(m);
  bind_device_track(m);
  m.def("_is_in_bad_fork", [] { return neuron_rt::Runtime::in_bad_fork(); });
  m.def("_is_initialized", [] { return neuron_rt::Runtime::initialized(); });
  m.def("_quiesce_for_exit", &quiesce_for_exit, py::call_guard<py::gil_scoped_release>(),
        "Python's atexit: the threads that may still drop Python-owned objects finish before finalization");
  m.def("device_count", [] {
    try {
      // Note [Counting devices without starting the runtime] (runtime/device.h)
      return neuron_rt::Runtime::visible_device_count();
    } catch (const neuron_rt::Error& error) {
      PyErr_WarnEx(PyExc_UserWarning, error.what(), 1);
      return 0;
    }
  });
  m.def("current_device", [] { return neuron_rt::Runtime::current_device_index(); });
  m.def("set_device", [](int device) { NEURON_RT_CALL(neuron_rt::Runtime::set_current_device_index(device)); });
  m.def("exchange_device", [](int device) {
    int old = neuron_rt::Runtime::current_device_index();
    if (device >= 0) NEURON_RT_CALL(neuron_rt::Runtime::set_current_device_index(device));
    return old;
  });
  m.def("synchronize", [](int device) {
    end_concatenation_groups(device);  // Note [Adaptive Eager Execution]
    py::gil_scoped_release release;
    NEURON_RT_CALL(runtime().synchronize(device));
  });
  // A counter of every stream of every device, summed.
  static const auto all_streams = [](uint64_t (neuron_rt::Stream::*counter)() const) {
    auto& rt = runtime();
    uint64_t total = 0;
    for (int d = 0; d < rt.device_count(); ++d) {
      for (int id = 0; id < neuron_rt::kStreamCount; ++id) total += (rt.stream(d, id).*counter)();
    }
    return total;
  };
  m.def("stream_counters", [] {  // (tasks enqueued, host waits that blocked), all streams
    return py::make_tuple(all_streams(&neuron_rt::Stream::enqueued), all_streams(&neuron_rt::Stream::host_waits));
  });
  // Note [Adaptive Eager Execution]: (groups sent to the workers, ops they held), all streams;
  // whether concatenation is on for this thread now; the tests' switch (-1: the environment).
  m.def("concatenation_counters", [] {
    return py::make_tuple(all_streams(&neuron_rt::Stream::groups_flushed), all_streams(&neuron_rt::Stream::tasks_grouped));
  });
  m.def("concatenating", [] { return concatenating(); });
  m.def("concatenation_buffered", [] {  // ops buffered now on the current stream of the current device
    return current_stream(c10::DeviceIndex(runtime().current_device())).buffered();
  });
  m.def("_set_concatenation", [](int mode) { set_concatenation(mode); }, py::arg("mode"));
  m.def("idle_poll_us", [] { return int64_t(runtime().stream(0, 0).idle_poll().count()); });  // Stream::kIdlePoll
  m.def("stream_wait_seconds", [] {  // time the host spent blocked in those waits, all streams
    return double(all_streams(&neuron_rt::Stream::host_wait_ns)) * 1e-9;
  });
  m.def("memory_guard", [] { return runtime().memory_guard(); });
  // Note [64-bit as 32-bit], for the compiler's pass: the rule of one op.
  m.def("narrowing_rule", [](const std::string& qualified_name) {
    const Narrowing& rule = narrowing_for(qualified_name);
    auto op = c10::Dispatcher::singleton().findSchemaOrThrow(
        qualified_name.substr(0, qualified_name.find('.')).c_str(),
        qualified_name.find('.') == std::string::npos ? "" : qualified_name.substr(qualified_name.find('.') + 1).c_str());
    py::list values;
    const auto& arguments = op.schema().arguments();
    for (size_t i = 0; i < arguments.size(); ++i) {
      if (rule.value_argument[i]) values.append(arguments[i].name());
    }
    py::dict result;
    result["exact"] = rule.exact;
    result["value_arguments"] = values;
    result["dtype_argument"] = rule.dtype_argument >= 0 ? py::object(py::str(arguments[rule.dtype_argument].name()))
                                                        : py::object(py::none());
    return result;
  });
  // Note [64-bit as 32-bit]: per op, how its calls with 64-bit values were computed.
  m.def("width64_counts", [] {
    py::dict result;
    for (const auto& [op, how, count] : width64_counts()) {
      py::str key(op);
      if (!result.contains(key)) result[key] = py::dict();
      result[key].cast<py::dict>()[py::str(how)] = count;
    }
    return result;
  });
  m.def("clear_width64_counts", [] { clear_width64_counts(); });
  m.def("_stream_sleep", [](int64_t nanoseconds) {
    auto& stream = current_stream(static_cast<c10::DeviceIndex>(runtime().current_device()));
    py::gil_scoped_release release;
    NEURON_RT_CALL(stream.enqueue([nanoseconds] { std::this_thread::sleep_for(std::chrono::nanoseconds(nanoseconds)); }));
  });
  m.def("launch_blocking", [] { return runtime().launch_blocking(); });
  m.def("computes_64bit_as_32bit", [] { return compute_64bit_as_32bit(); });
  m.def("_set_computes_64bit_as_32bit", [](bool value) { set_compute_64bit_as_32bit(value); });
  m.def("device_properties", &device_properties);
  m.def("memory_stats", &memory_stats);
  m.def("empty_cache", [] {
    py::gil_scoped_release release;
    neuron_allocator_empty_cache();
  });
  m.def("reset_peak_memory_stats", [](int device) {
    if (neuron_memory_in_use(device)) NEURON_RT_CALL(runtime().memory(device).reset_peak_stats());
  });
  m.def("reset_accumulated_memory_stats", [](int device) {
    if (neuron_memory_in_use(device)) NEURON_RT_CALL(runtime().memory(device).reset_accumulated_stats());
  });
  m.def("mem_get_info", [](int device) {
    neuron_rt::MemoryStats s = NEURON_RT_CALL(runtime().memory(device).stats());
    return py::make_tuple(s.budget_bytes - s.reserved_bytes, s.budget_bytes);
  });
  m.def("default_generator", [](int device) {
    return py::reinterpret_steal<py::object>(
        THPGenerator_initDefaultGenerator(default_generator(static_cast<c10::DeviceIndex>(device))));
  });
  // Note [Op tracking]
  m.def("_set_torchneuron_op_set", &set_torchneuron_op_set);
  m.def("executed_op_names", &executed_op_names);
  m.def("fallback_op_names", &fallback_op_names);
  m.def("clear_op_tracking", &clear_op_tracking);
  m.def("op_counts", [] {
    py::list result;
    for (const OpCount& op : op_counts()) {
      result.append(py::make_tuple(op.name, op.count, op.path == KernelPath::kHot ? "hot" : "generic",
                                   op.on_device));
    }
    return result;
  });
  // runtime/metrics.h, for torch_neuronx.metrics
  m.def("metrics_enabled", [] { return neuron_rt::Metrics::get().enabled(); });
  m.def("metrics_set_enabled", [](bool enabled) { neuron_rt::Metrics::get().set_enabled(enabled); });
  m.def("counter_names", [] { return neuron_rt::Metrics::get().counter_names(); });
  m.def("counter_value", [](const std::string& name) { return neuron_rt::Metrics::get().counter_value(name); });
  m.def("metric_names", [] { return neuron_rt::Metrics::get().metric_names(); });
  m.def("metric_data", [](const std::string& name) -> py::object {
    auto data = neuron_rt::Metrics::get().metric_data(name);
    if (!data) return py::none();
    py::dict result;
    result["count"] = data->count;
    result["sum"] = data->sum;
    result["min"] = data->min;
    result["max"] = data->max;
    result["samples"] = data->recent;
    return result;
  });
  m.def("metrics_report", [](const std::vector<std::string>& counters, const std::vector<std::string>& metrics) {
    return neuron_rt::Metrics::get().report(counters, metrics);
  });
  m.def("metrics_increment", [](const std::string& name, int64_t by) { neuron_rt::Metrics::get().increment(name, by); });
  m.def("metrics_record", [](const std::string& name, double value) { neuron_rt::Metrics::get().record(name, value); });
  m.def("clear_counters", [] { neuron_rt::Metrics::get().clear_counters(); });
  m.def("clear_metrics", [] { neuron_rt::Metrics::get().clear_metrics(); });
  m.def("topology", [] {
    const auto& topology = runtime().topology();
    return py::make_tuple(topology.platform_name(), topology.chips, topology.logical_nc_config,
                          topology.total_logical_cores());
  });
}
