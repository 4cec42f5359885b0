// One step of a program as the executor runs it (compile/Executor.cpp builds the steps,
// compile/DirectSteps.cpp gives a step its direct kernel), and the state of one call of the
// program (compile/Executor.cpp, compile/ProgramCollectives.cpp). Private to compile/.
//
// Thread safety: steps are built once by the executor's constructor, then read only; a
// RunState belongs to one call.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "Executor.h"

namespace torch_neuron {

struct ProgramExecutor::Step {
  std::string name;
  std::optional<c10::OperatorHandle> op;
  torch::jit::Stack arguments;           // constants filled in; tensors filled per call
  struct TensorSlot {
    size_t position;
    int list_index;  // -1: the argument itself; else an element of a tensor list
    int value;       // -1: None (in an optional list)
  };
  std::vector<TensorSlot> tensors;
  std::vector<size_t> generators;        // positions of Generator? arguments
  bool reads_generator = false;          // neuron::rng_state: runs in a HostDrawScope as random ops do
  std::vector<size_t> tensor_lists;      // positions of tensor-list arguments (rebuilt per call)
  std::vector<int> outputs;              // value per return, -1 when unused
  bool lend = false;                     // the single output's memory is lent to the kernel
  bool collective = false;               // Note [Collectives in programs]: on device tensors, in place
  int collective_writes = -1;            // the value a collective step writes (-1: a wait)
  // Fixed values (arena, constants, views of them) the step may change in place: its outputs
  // and the arguments its schema marks as written (Note [Fixed values keep their metadata]).
  std::vector<int> fixed_writes;
  // The direct path: an at::cpu::*_out kernel on the values (null: through the dispatcher).
  std::function<void(const ProgramExecutor::Step&, const std::function<const at::Tensor&(int)>&)> direct;
};

struct ProgramExecutor::RunState {
  std::vector<at::Tensor> values;  // host views of the values that change per call
  // Note [Collectives in programs]: the device tensors a collective step is given, made once per
  // value and call (a wait finds its collective's work by the tensor's storage), and the device
  // tensors of the inputs and outputs they are views of. Empty when the program has no collective.
  std::vector<at::Tensor> device_values;
  std::vector<at::Tensor> device_roots;
  std::vector<int> in_flight;  // values of collectives issued and not yet waited for, in issue order
};

}  // namespace torch_neuron
