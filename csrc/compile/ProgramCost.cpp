// A program's predicted device time (Note [Device clock] in DeviceClock.h): the device clock's
// view of its nodes, and the executor's cost per call.
#include "Executor.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "ProgramValues.h"
#include "../DeviceClock.h"
#include "../NeuronCommon.h"

namespace torch_neuron {

using neuron_rt::ProgramArg;

namespace {
// A tensor with `spec`'s sizes and dtype on `device` and no memory: what the device clock reads
// of a program value (its sizes, dtype and device), never its data.
at::Tensor shape_of(const neuron_rt::TensorSpec& spec, c10::Device device) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, c10::DataPtr(nullptr, device), nullptr, false);
  const c10::DispatchKey key = device.is_cpu() ? c10::DispatchKey::CPU : c10::DispatchKey::PrivateUse1;
  auto tensor = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(key),
                                                         c10::scalarTypeToTypeMeta(scalar_type(spec.dtype)));
  tensor.unsafeGetTensorImpl()->set_sizes_contiguous(spec.sizes);
  return tensor;
}
}  // namespace

// Each node is the eager op it is, with stand-ins for its values (the program has all their
// specs: inputs, outputs and dynamic values have fixed sizes).
std::vector<ProgramStepOperands> program_step_operands(const neuron_rt::ProgramDesc& program, c10::DeviceIndex device) {
  const auto& values = program.values;
  std::vector<at::Tensor> shapes(values.size());
  auto shape = [&](int64_t id) -> const at::Tensor& {
    if (!shapes[id].defined()) {
      shapes[id] = shape_of(values[id].spec, values[id].on_host ? c10::Device(c10::kCPU) : c10::Device(kNeuron, device));
    }
    return shapes[id];
  };
  std::vector<ProgramStepOperands> steps;
  steps.reserve(program.nodes.size());
  for (const auto& node : program.nodes) {
    ProgramStepOperands step{node.op.c_str(), {}, {}};
    for (const ProgramArg& arg : node.args) {
      if (arg.kind == ProgramArg::Kind::kValue && arg.integer >= 0 && size_t(arg.integer) < values.size()) {
        step.inputs.push_back(shape(arg.integer));
      } else if (arg.kind == ProgramArg::Kind::kValueList) {
        for (int64_t id : arg.list) {
          if (id >= 0 && size_t(id) < values.size()) step.inputs.push_back(shape(id));
        }
      }
    }
    for (int32_t id : node.outputs) {
      if (id >= 0 && size_t(id) < values.size()) step.outputs.push_back(shape(id));
    }
    steps.push_back(std::move(step));
  }
  return steps;
}

// The steps' costs without the eager launch cost, summed, and one program launch are the
// program's cost per call (DeviceClock.h, cost_of_program).
void ProgramExecutor::describe_cost() {
  cost_ = std::make_unique<neuron_rt::WorkCost>(cost_of_program(program_step_operands(program_, device_)));
  cost_within_graph_ = std::make_unique<neuron_rt::WorkCost>(*cost_);
  const uint64_t launch = uint64_t(std::llround(cost_->fixed_ns));
  cost_within_graph_->ns -= std::min(launch, cost_within_graph_->ns);
  cost_within_graph_->fixed_ns = 0;
}

}  // namespace torch_neuron
