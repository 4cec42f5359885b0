// Kernels written as bodies: `body(host views...) -> CPU results`, run on neuron tensors at the
// call or queued (the accelerator-specific kernels of Accelerator.cpp, AcceleratorOnly.cpp,
// Recurrent.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

namespace torch_neuron {

// Runs a kernel written as `body(host views...) -> CPU results` on neuron tensors: inline
// (after draining, in asynchronous mode) or queued; the body itself, run on meta tensors,
// gives the outputs' metadata (checked against the CPU once per dtype signature). The
// 64-bit rule applies (its inputs narrowed, its results widened). Used by the
// accelerator-specific kernels (Accelerator.cpp); the body must capture by value. A body
// that draws random numbers passes `random`: it then always runs at the call, after its
// stream is drained, so draws happen in program order (as the generic path does).
using TensorBody = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>& inputs)>;
std::vector<at::Tensor> run_kernel(const char* name, const std::vector<at::Tensor>& inputs, const TensorBody& body,
                                   bool random = false);

}  // namespace torch_neuron
