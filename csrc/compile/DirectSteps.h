// Note [Direct kernels] for programs: a step whose op has a direct kernel
// (kernels/DirectKernels.h) calls its out= form on the values, without the dispatcher.
// direct_kernel() gives a step that kernel, or nullptr where the step's arguments do not fit
// (it then runs through the dispatcher); program_direct_ops() (Executor.h) lists the ops.
#pragma once

#include <functional>
#include <string>

#include "Step.h"

namespace torch_neuron {

using Get = std::function<const at::Tensor&(int)>;
using Direct = std::function<void(const ProgramExecutor::Step&, const Get&)>;

Direct direct_kernel(const std::string& name, const ProgramExecutor::Step& step);
// The value a step's tensor argument at `position` reads (-1: not a value).
int value_at(const ProgramExecutor::Step& step, size_t position);

}  // namespace torch_neuron
