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
// adopting a kernel's host result, costs nothing); a compiled program (kProgram) passes the cost
// cost_of_program() made when it was built (LaunchOperands::cost); a collective (kCollective)
// passes its bytes, ranks, link and algorithm (LaunchOperands::collective). A program or
// collective launch with neither costs one eager launch's fixed cost.
//
// While the profiler's device track records (DeviceTrack.h), the observer hands it each
// launch's cost and the span its stream's timeline gave it.
//
// Thread safety: start_device_clock() once, at import; the rest from any thread.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <string>
#include <array>
#include <utility>
#include <vector>

#include "Launch.h"
#include "runtime/cost_model.h"

namespace torch_neuron {

// Loads the platform data file at `path` (errors name its line) and, unless
// NEURON_SIM_DEVICE_CLOCK=0, starts the clock. The cost model is made at the first launch,
// for the runtime's platform (so importing makes no runtime).
void start_device_clock(const std::string& path);
bool device_clock_on();
// `device`, in the two functions below: -1 for the current device, else a visible device's
// index (any other value raises IndexError, before any narrowing to c10::DeviceIndex).
// The predicted device time of `device`, in nanoseconds (the latest end of its streams).
uint64_t device_time_ns(int64_t device);
// The work `device` has done so far on the clock: (matmul FLOPs, HBM bytes read and written),
// for MFU and MBU (torch_neuronx.device_counters()). Devices past the 1024th count nothing.
std::pair<uint64_t, uint64_t> device_work(int64_t device);

// Note [Program steps run through the dispatcher]
// A compiled graph cut at an op no program step runs (an opaque custom op, Note [Graphs cut at
// opaque ops] in python/torch_neuron_sim/compile/segments.py) runs that op through the dispatcher
// between its programs; on the device the graph is one program that holds the op. While a thread
// is inside such an op (program_steps depth > 0), its eager launches are costed as the steps of a
// program: their work, without an eager launch's fixed cost. Returns the depth before the change.
int enter_program_steps();
void leave_program_steps();

// What the clock makes of one launch: its parts (one for most ops; an attention is two
// matmuls and a softmax) and their cost. For tests and the profiler's device track (DeviceTrack.h).
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

// The cost model of `platform` at `logical_nc_config` (made once, kept), without a runtime: the
// dry run's. Raises naming the platforms the data file has when it has no such table.
const neuron_rt::CostModel& cost_model_for(const std::string& platform, int logical_nc_config);

// One step of a compiled program, for cost_of_program(): its op ("aten::mm", "neuron::pointwise")
// and operands. Stand-ins with the values' sizes, dtypes and devices are enough (no data is read).
struct ProgramStepOperands {
  const char* name;
  std::vector<at::Tensor> inputs, outputs;
};
// A compiled program's cost on `device`'s platform, once, when it is built: program_launch_ns plus
// each step costed as the eager op it is, without the eager launch cost (a fused pointwise step
// is one VectorE pass over its operands). Only `ns` and the parts' sums are filled.
neuron_rt::WorkCost cost_of_program(const std::vector<ProgramStepOperands>& steps);
// The same on a given platform (the dry run: a lowered program never built, no runtime);
// `per_step`, when given, receives each step's cost.
neuron_rt::WorkCost cost_of_program(const std::vector<ProgramStepOperands>& steps, const std::string& platform,
                                    int logical_nc_config, std::vector<neuron_rt::WorkCost>* per_step = nullptr);

}  // namespace torch_neuron
