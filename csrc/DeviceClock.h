// The device clock's bridge (Note [Device clock] in runtime/cost_model.h): a launch observer
// (Note [Launches]) that describes each launch in the cost model's terms (runtime::Work: its
// kind from the op's name, its number format, HBM bytes, elements, matmul dimensions) and
// appends the predicted duration to the timeline of the launch's stream.
//
// Switch: NEURON_SIM_DEVICE_CLOCK=1 (the default) or 0, read once at start. While it is on,
// Event.elapsed_time() is predicted device time, as a TorchNeuron user expects of
// elapsed_time on the real device; with 0 it is host time and device_time() raises.
// Platform: the runtime's (NEURON_SIM_PLATFORM, NEURON_LOGICAL_NC_CONFIG), its constants from
// the platform data file given to start_device_clock().
//
// What each launch path gives it: direct, generic and queued eager ops (kernels/), copies
// (Minimal.cpp) are costed from their operands (a copy launch without operands, the simulator
// adopting a kernel's host result, costs nothing); compiled programs (kProgram) and collectives
// (kCollective) pass the seam without operands yet and cost only their fixed launch cost
// until their phases of issue 25 describe them (compile/Executor.cpp: one Work per step with
// eager_launch = false plus one program launch; distributed/: bytes and ranks per algorithm).
//
// Thread safety: start_device_clock() once, at import; the rest from any thread.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <string>
#include <array>
#include <vector>

#include "Launch.h"
#include "runtime/cost_model.h"

namespace torch_neuron {

// Loads the platform data file at `path` (errors name its line) and, unless
// NEURON_SIM_DEVICE_CLOCK=0, starts the clock. The cost model is made at the first launch,
// for the runtime's platform (so importing makes no runtime).
void start_device_clock(const std::string& path);
bool device_clock_on();
// The predicted device time of `device`, in nanoseconds (the latest end of its streams).
uint64_t device_time_ns(c10::DeviceIndex device);

// What the clock makes of one launch: its parts (one for most ops; an attention is two
// matmuls and a softmax) and their cost. For tests and the later profiler track.
constexpr int kMaxLaunchParts = 3;
struct LaunchCost {
  std::array<neuron_rt::Work, kMaxLaunchParts> parts;
  int part_count = 0;
  neuron_rt::WorkCost cost;  // summed over the parts
};
LaunchCost cost_of(const Launch& launch);

// The dry run (python/torch_neuron_sim/dry_run.py): one op costed from its metadata only, with
// no tensor and no runtime. Its operands become storage-less tensors of those sizes and dtypes
// (on the neuron device unless `on_device` is false: a CPU scalar), and the launch goes
// through the same description as a live launch, costed by the cost model of `platform` and
// `logical_nc_config`, so a dry run and a real run of the same ops agree. `eager_launch` false
// leaves out the per-launch fixed cost (the ops of a compiled program).
struct OperandShape {
  std::vector<int64_t> sizes;
  c10::ScalarType dtype = c10::ScalarType::Float;
  bool on_device = true;
};
LaunchCost cost_of_shapes(const std::string& name, LaunchPath path, const std::vector<OperandShape>& inputs,
                          const std::vector<OperandShape>& outputs, const std::string& platform,
                          int logical_nc_config, bool eager_launch = true);

}  // namespace torch_neuron
