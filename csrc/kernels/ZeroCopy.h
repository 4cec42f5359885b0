// Note [Zero-copy kernels]
// The simulated NeuronCore computes with ATen's CPU kernels, on device memory:
//  1. each neuron input is replaced by a host view: a CPU tensor over the same
//     bytes (same sizes, strides, offset; no copy);
//  2. the CPU kernel runs under an AllocationRedirect (NeuronAllocator.h), so any
//     tensor it allocates is placed in the device's memory;
//  3. each output becomes a neuron tensor: a view of an input's storage when the
//     CPU kernel returned a view, the original argument for in-place and out=
//     results, or a fresh output adopted as is (its bytes are already in device
//     memory).
// Hot ops call the CPU kernels directly and unboxed (kernels/Hot.cpp); every
// other op goes through one boxed path (ZeroCopy.cpp), which is counted and
// warned once per op as a fallback.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <atomic>
#include <string>

namespace torch_neuron {

// A CPU tensor sharing the memory of neuron tensor `tensor`.
at::Tensor host_view(const at::Tensor& tensor);
// A neuron tensor over `storage` with the metadata (sizes, strides, offset,
// dtype, conj/neg bits) of `like`.
at::Tensor wrap_storage(c10::Storage storage, const at::Tensor& like);
// Makes `cpu` (computed under an AllocationRedirect for `device`) a neuron
// tensor without copying; copies only when its memory did not come from the device.
at::Tensor adopt_output(const at::Tensor& cpu, c10::DeviceIndex device);

// The device shared by the neuron tensors of an op; raises the error CUDA
// raises when a non-scalar CPU tensor or another device's tensor is mixed in.
struct DeviceCheck {
  c10::DeviceIndex device = -1;
  void add(const at::Tensor& tensor, const char* op_name, bool allow_cpu = false);
};

// Counts of executed ops, split into native kernels and the generic fallback.
class OpCounter {
 public:
  explicit OpCounter(const char* name);  // a native kernel's counter (static)
  void hit() { count_.fetch_add(1, std::memory_order_relaxed); }
  const char* name() const { return name_; }
  uint64_t count() const { return count_.load(); }
  void reset() { count_.store(0); }

 private:
  const char* name_;
  std::atomic<uint64_t> count_{0};
};
void record_fallback(const c10::OperatorHandle& op);
// name -> count, for ops run natively / through the fallback since the last reset.
std::vector<std::pair<std::string, uint64_t>> executed_ops();
std::vector<std::pair<std::string, uint64_t>> fallback_ops();
void reset_op_counts();

// Runs `op` (boxed, arguments on `stack`) with the zero-copy scheme above.
void run_zero_copy(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace torch_neuron
