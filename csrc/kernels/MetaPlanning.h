// The outputs of an op known before it runs, for the queued path of Note [Asynchronous
// kernels] (Generic.h): ATen's meta kernels run on meta tensors, cached per op and argument
// signature (sizes, strides, dtypes and the values that change dtypes or outputs). Internal to
// csrc/kernels/.
//
// Thread safety: as OpPlan's meta caches (its meta_mutex).
#pragma once

#include <memory>

#include "OpPlan.h"

namespace torch_neuron {

// The meta outputs of `op` on `arguments` (cached per signature); nullptr when an argument has
// no signature (the call then runs at the call).
std::shared_ptr<const MetaEntry> meta_for(const OpPlan& plan, const c10::OperatorHandle& op,
                                          const c10::IValue* arguments, size_t count);
// True when the results of a run at the call (on the stack from `begin`) are what `meta` said.
bool matches_meta(const OpPlan& plan, const MetaEntry& meta, const torch::jit::Stack& stack, size_t begin);

}  // namespace torch_neuron
