// The _C module: what the thin Python layer needs from the bridge and runtime.
#include <torch/csrc/Generator.h>
#include <torch/extension.h>

#include "NeuronAllocator.h"
#include "NeuronCommon.h"
#include "NeuronGenerator.h"
#include "kernels/ZeroCopy.h"

namespace torch_neuron {
namespace {

py::dict device_properties(int device) {
  auto& rt = runtime();
  NEURON_RT_CALL(rt.check_device(device));
  const auto& topology = rt.topology();
  const auto& core = topology.visible[device];
  py::dict properties;
  properties["name"] = "AWS " + std::string(topology.platform_name() == "trn1" ? "Trainium" : "Trainium2") +
                       " NeuronCore (simulated)";
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
  neuron_rt::MemoryStats s = NEURON_RT_CALL(runtime().memory(device).stats());
  py::dict stats;
  stats["allocated_bytes.all.current"] = s.allocated_bytes;
  stats["allocated_bytes.all.peak"] = s.peak_allocated_bytes;
  stats["reserved_bytes.all.current"] = s.reserved_bytes;
  stats["reserved_bytes.all.peak"] = s.peak_reserved_bytes;
  stats["active_bytes.all.current"] = s.allocated_bytes;
  stats["active_bytes.all.peak"] = s.peak_allocated_bytes;
  stats["requested_bytes.all.current"] = s.requested_bytes;
  stats["allocation.all.allocated"] = s.allocations;
  stats["allocation.all.freed"] = s.frees;
  stats["allocation.all.current"] = s.active_blocks;
  stats["segment.all.current"] = s.segments;
  stats["num_ooms"] = s.ooms;
  stats["num_alloc_retries"] = 0;
  stats["budget_bytes"] = s.budget_bytes;
  return stats;
}

}  // namespace
}  // namespace torch_neuron

PYBIND11_MODULE(_C, m) {
  using namespace torch_neuron;
  install_redirecting_cpu_allocator();
  m.doc() = "torch-neuron-sim: bridge between PyTorch and the simulated Neuron runtime";
  m.def("_init", [] { runtime(); });
  m.def("_is_in_bad_fork", [] { return neuron_rt::Runtime::in_bad_fork(); });
  m.def("_is_initialized", [] { return neuron_rt::Runtime::initialized(); });
  m.def("device_count", [] {
    try {
      return neuron_rt::Runtime::get().device_count();
    } catch (const neuron_rt::Error& error) {
      if (error.code() == neuron_rt::ErrorCode::kBadFork) rethrow_runtime_error(error);
      PyErr_WarnEx(PyExc_UserWarning, error.what(), 1);
      return 0;
    }
  });
  m.def("current_device", [] { return runtime().current_device(); });
  m.def("set_device", [](int device) { NEURON_RT_CALL(runtime().set_current_device(device)); });
  m.def("exchange_device", [](int device) {
    auto& rt = runtime();
    int old = rt.current_device();
    if (device >= 0) NEURON_RT_CALL(rt.set_current_device(device));
    return old;
  });
  m.def("synchronize", [](int device) {
    py::gil_scoped_release release;
    NEURON_RT_CALL(runtime().synchronize(device));
  });
  m.def("launch_blocking", [] { return runtime().launch_blocking(); });
  m.def("computes_64bit_as_32bit", [] { return compute_64bit_as_32bit(); });
  m.def("_set_computes_64bit_as_32bit", [](bool value) { set_compute_64bit_as_32bit(value); });
  m.def("device_properties", &device_properties);
  m.def("memory_stats", &memory_stats);
  m.def("empty_cache", [] { neuron_allocator_empty_cache(); });
  m.def("reset_peak_memory_stats", [](int device) { NEURON_RT_CALL(runtime().memory(device).reset_peak_stats()); });
  m.def("reset_accumulated_memory_stats",
        [](int device) { NEURON_RT_CALL(runtime().memory(device).reset_accumulated_stats()); });
  m.def("mem_get_info", [](int device) {
    neuron_rt::MemoryStats s = NEURON_RT_CALL(runtime().memory(device).stats());
    return py::make_tuple(s.budget_bytes - s.reserved_bytes, s.budget_bytes);
  });
  m.def("default_generator", [](int device) {
    return py::reinterpret_steal<py::object>(
        THPGenerator_initDefaultGenerator(default_generator(static_cast<c10::DeviceIndex>(device))));
  });
  m.def("executed_ops", [] { return executed_ops(); });
  m.def("fallback_ops", [] { return fallback_ops(); });
  m.def("reset_op_counts", [] { reset_op_counts(); });
  m.def("topology", [] {
    const auto& topology = runtime().topology();
    return py::make_tuple(topology.platform_name(), topology.chips, topology.logical_nc_config,
                          topology.total_logical_cores());
  });
}
