// Note [Host views]
// The simulated NeuronCore computes with ATen's CPU kernels on device memory, without copies:
// a neuron tensor's bytes are host memory (the runtime's buffers), so a kernel is given a host
// view, a CPU tensor over the same bytes (same sizes, strides, offset), and its results become
// neuron tensors again: a view of an input's storage when the kernel returned a view, the
// original argument for in-place and out= results, or a fresh output adopted as it is (its bytes
// are already in device memory when the kernel allocated it under an AllocationRedirect,
// NeuronAllocator.h). This file has those conversions and HostCall, which makes them for one
// kernel call; every launch path uses them (kernels/, compile/, distributed/).
//
// Thread safety: the functions are pure but for the runtime's allocator; a HostCall belongs to
// one call on one thread.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>

#include <functional>
#include <utility>

#include "NeuronAllocator.h"
#include "NeuronCommon.h"
#include "runtime/buffer.h"
#include "runtime/memory.h"

namespace torch_neuron {

// A tensor of backend `key` over `storage` with the metadata (sizes, strides, offset,
// dtype, conj/neg bits) of `like`.
at::Tensor tensor_over(c10::Storage storage, c10::DispatchKey key, const at::Tensor& like);
// A CPU tensor sharing the memory of neuron tensor `tensor` (a fresh TensorImpl).
at::Tensor host_view(const at::Tensor& tensor);
// A neuron tensor over `storage` with the metadata of `like`.
at::Tensor wrap_storage(c10::Storage storage, const at::Tensor& like);
// Device storage holding the bytes of `cpu_storage`: adopted when they came from a
// redirect (no copy; `cpu_storage` is left empty), copied into device memory otherwise.
c10::Storage device_storage_for(const c10::Storage& cpu_storage, c10::DeviceIndex device);
// Makes `cpu` (computed under an AllocationRedirect for `device`) a neuron tensor.
at::Tensor adopt_output(const at::Tensor& cpu, c10::DeviceIndex device);
// Raises NotImplementedError, naming the running op and what to do, when a CPU kernel's
// `result` is a tensor the device cannot hold: quantized, or not strided (defined in
// kernels/Unsupported.cpp, with the fallbacks that refuse such tensors on the way in).
void check_device_can_hold(const at::Tensor& result);

// The device shared by the neuron tensors of an op; raises the error CUDA raises when a
// non-scalar CPU tensor or another device's tensor is mixed in.
struct DeviceCheck {
  c10::DeviceIndex device = -1;
  void add(const at::Tensor& tensor, const char* op_name, bool allow_cpu = false);
};

// Per call on the calling thread: host views of the kernel's neuron inputs and where each
// came from; maps the CPU kernel's outputs back to neuron tensors (Note [Host views]). Its guard scope (Note [Memory guard]) opens the operands while the call lives.
struct HostCall {
  c10::DeviceIndex device = -1;
  c10::SmallVector<std::pair<c10::Storage, c10::Storage>, 4> views;    // view storage -> device storage
  // CPU storage -> device storage. Keyed by held references: a temporary freed during the
  // call would otherwise lend its address to the next output.
  c10::SmallVector<std::pair<c10::Storage, c10::Storage>, 2> adopted;
  neuron_rt::GuardScope guard;

  at::Tensor to_host(const at::Tensor& tensor);
  at::Tensor to_device(const at::Tensor& cpu);
  // Gives `original` the metadata the kernel set on its view (a resize of an out=).
  void sync_argument(const at::Tensor& original, const at::Tensor& view);
};

// Queues `work` on the current stream of `call.device` (the caller notes the launch). The
// task holds the buffers of every view the call made and opens them under the memory guard;
// `work` must hold host views and fresh CPU tensors only (no tensor Python owns). With
// `fusable` (an op the concatenation heuristics admit, named `name`) and concatenation on
// (Note [Adaptive Eager Execution], Launch.h), the task joins the stream's concatenation
// buffer (the host's grouping; the clock's is the seam's, Launch.cpp), and an error it raises
// names the op.
void enqueue_views(HostCall& call, std::function<void()> work, const char* name = nullptr,
                         bool fusable = false);

}  // namespace torch_neuron
