// The executor's collective steps (Note [Collectives in programs], below).
#include "Executor.h"

#include <ATen/core/stack.h>

#include <algorithm>

#include "ProgramValues.h"
#include "Step.h"
#include "../NeuronAllocator.h"
#include "../NeuronCommon.h"

namespace torch_neuron {

using neuron_rt::ProgramValue;

// Note [Collectives in programs]
// A compiled graph's functional collectives (tensor parallelism's all-reduces, DTensor's
// gathers) run inside its program, as TorchNeuron's NEFF holds its collectives: a decode step
// on 2 ranks is one program call, not a program per stretch between all-reduces with Python
// and the collectives' Python wrappers between them (Note [Graphs with collectives] keeps that
// cut for the collectives a program does not take). The lowering (compile/lowering.py) gives a
// collective its in-place form on memory another step defines: all_reduce(x) becomes a clone
// of x into the result's slot, then all_reduce_ on that slot; all_gather_into_tensor and
// reduce_scatter_tensor their _out forms writing the result's slot; wait_tensor waits on the
// slot. These steps run through the dispatcher on *device* tensors over the values' memory (the
// process group works on neuron tensors), one per value and call: the wait finds the
// collective's work by the tensor's storage, so a value's device tensor is made once per call
// and reused. The collective itself is the process group's, as in eager: its timeout, its fault
// handling, its device-clock cost (so the program's own cost leaves collective steps out).
// A program with collectives runs on the calling thread (it is not an ATen-only program),
// after the stream's earlier work, so its collectives are ordered as eager's.
const at::Tensor& ProgramExecutor::device_value(RunState& state, int id) {
  at::Tensor& made = state.device_values[id];
  if (made.defined()) return made;
  const auto& values = program_.values;
  const ProgramValue& value = values[id];
  const int root = root_[id];
  const ProgramValue& base = values[root];
  if (root != id) {
    const at::Tensor& device_base = device_value(state, root);
    made = view_of(device_base, rebased(value.spec, base.spec, device_base));
    return made;
  }
  if (base.kind == ProgramValue::Kind::kInput || base.kind == ProgramValue::Kind::kOutput) {
    made = state.device_roots[id];
    TORCH_CHECK(made.defined(), "program ", program_.name, ": value ", id, " has no device tensor in this call");
    return made;
  }
  TORCH_CHECK(base.kind == ProgramValue::Kind::kArena, "program ", program_.name, ": value ", id,
              " is not device memory a collective can use");
  // Its own storage over the arena (the whole buffer, holding a reference): the value's bytes at
  // its planned offset, in its own elements.
  const size_t element = c10::elementSize(scalar_type(value.spec.dtype));
  TORCH_CHECK(value.index % element == 0, "program ", program_.name, ": value ", id, " at arena offset ",
              value.index, " is not aligned to its elements");
  c10::Storage storage(c10::Storage::use_byte_size_t(), arena_->size(), device_data_ptr(arena_), nullptr, false);
  made = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                  c10::scalarTypeToTypeMeta(scalar_type(value.spec.dtype)));
  made.unsafeGetTensorImpl()->set_sizes_and_strides(value.spec.sizes, value.spec.strides,
                                                    int64_t(value.index / element) + value.spec.offset);
  return made;
}

void ProgramExecutor::run_collective(RunState& state, const Step& step) {
  torch::jit::Stack stack = step.arguments;
  for (const auto& slot : step.tensors) stack[slot.position] = device_value(state, slot.value);
  // The functional ops' own kernels (CompositeExplicitAutograd), past autograd: they call the
  // group's collective on these device tensors and register its work for the wait.
  step.op->redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), &stack);
  if (step.collective_writes >= 0) {
    state.in_flight.push_back(step.collective_writes);
  } else if (!step.tensors.empty()) {
    auto& pending = state.in_flight;
    pending.erase(std::remove(pending.begin(), pending.end(), step.tensors[0].value), pending.end());
  }
}

// A call that fails (a later step throws) leaves no collective running on its memory: the next
// call reuses the arena at once, and a collective still reading or writing it would mix one
// call's bytes into another's, on this rank and its peers (review 27, finding 1). Each collective
// issued and not waited for is waited for here (its group's timeout bounds the wait; its own
// failure is the group's and is not the error reported) before the step's error goes on.
void ProgramExecutor::settle_collectives(RunState& state) noexcept {
  static const auto wait = c10::Dispatcher::singleton().findSchemaOrThrow("_c10d_functional::wait_tensor", "");
  for (int id : state.in_flight) {
    try {
      torch::jit::Stack stack{device_value(state, id)};
      wait.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), &stack);
    } catch (...) {  // NOLINT(bugprone-empty-catch): the first error is the one the caller gets
    }
  }
  state.in_flight.clear();
}

}  // namespace torch_neuron
