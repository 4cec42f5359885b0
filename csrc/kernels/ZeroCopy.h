// Note [Zero-copy kernels]
// The simulated NeuronCore computes with ATen's CPU kernels, on device memory:
//  1. each neuron input is replaced by a host view: a CPU tensor over the same bytes (same
//     sizes, strides, offset; no copy);
//  2. the CPU kernel runs under an AllocationRedirect (NeuronAllocator.h), so any tensor it
//     allocates is placed in the device's memory;
//  3. each output becomes a neuron tensor: a view of an input's storage when the CPU kernel
//     returned a view, the original argument for in-place and out= results, or a fresh
//     output adopted as is (its bytes are already in device memory).
// Hot ops call the CPU kernels directly and unboxed (kernels/Hot.cpp); every other op goes
// through one boxed path (ZeroCopy.cpp). Both are tracked as Note [Op tracking] says.
//
// Note [Asynchronous kernels]
// With NEURON_LAUNCH_BLOCKING=0 an op returns before its kernel has run:
//  - its outputs' metadata comes from ATen's meta kernels (run on meta tensors, cached per
//    op and argument signature), so shape and dtype errors are raised at the call;
//  - the outputs are allocated on the device, and a task on the current stream runs the
//    CPU kernel and copies its results into them (an out= variant is not used in their
//    place: some differ from their functional forms);
//  - the first call of each dtype signature (the dtypes, layouts and flags of the
//    arguments, not their sizes or numbers) runs inline and checks the meta kernel's outputs
//    against the CPU kernel's; a signature where they differ is never queued. The check
//    assumes that a meta kernel that agrees with the CPU kernel for one shape agrees for
//    all shapes of the same dtypes and memory formats;
//  - random ops reaching this path (ATen's have kernels of their own, kernels/Random.h, which
//    take their Philox words at the call and are queued) run inline after draining their
//    stream, drawing from a CPU generator seeded from the device's; so do ops that write an
//    argument sharing memory with another (overlap errors are raised at the call);
//  - a queued kernel's scratch is host memory (its outputs are preallocated), so it never
//    needs device memory the host may have taken meanwhile;
//  - the task holds the runtime buffers of every operand and fresh host views, never a
//    tensor owned by Python, so no task needs the GIL (HostWait.h);
//  - ops that cannot be described ahead run on the calling thread after the stream is
//    drained: ops whose outputs depend on data (nonzero, unique, ...) or that have no meta
//    kernel, ops returning plain values (.item()), views, and ops outside the aten
//    namespace (custom ops, whose code may be Python).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/SmallVector.h>

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../Dtype64.h"
#include "../NeuronAllocator.h"
#include "../OpTracking.h"
#include "runtime/buffer.h"
#include "runtime/memory.h"

namespace torch_neuron {

constexpr c10::DeviceType kNeuron = c10::DeviceType::PrivateUse1;

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
// `result` is a tensor the device cannot hold: quantized, or not strided (Unsupported.cpp).
void check_device_can_hold(const at::Tensor& result);

// The device shared by the neuron tensors of an op; raises the error CUDA raises when a
// non-scalar CPU tensor or another device's tensor is mixed in.
struct DeviceCheck {
  c10::DeviceIndex device = -1;
  void add(const at::Tensor& tensor, const char* op_name, bool allow_cpu = false);
};

// Readies a kernel that runs on the calling thread: returns the op's device (the current
// one when no neuron tensor named it) and, in asynchronous mode, first drains that device's
// current stream so the kernel sees the work queued before it (work of other streams is
// ordered by events, as with CUDA streams).
c10::DeviceIndex run_here_on(c10::DeviceIndex device);
// True with NEURON_LAUNCH_BLOCKING=0.
bool asynchronous();

// Note [Small ops on an idle stream]
// Handing an op to the stream's worker costs the calling thread about what running a small
// kernel costs (output metadata, fresh views, the task, a wake-up), and costs the worker a
// wake-up and frees of memory the calling thread allocated. For an op touching little
// memory, queued behind nothing, that is pure overhead (measured: decode of the demo model
// ran slower asynchronous than launch-blocking, much slower on a busy machine where the two
// threads share a core). In asynchronous mode such an op runs at the call instead, on the
// direct path where it has one: its stream has nothing pending, so the order of work is the
// same as queued; its errors are raised at the call, as with launch-blocking. Ops touching
// more memory, and every op while its stream has work, are queued. The estimate counts the
// operands (and, where the meta kernel gave them, the outputs); a broadcast of two small
// operands into a large output may run at the call, which changes where it runs, not what
// it computes. NEURON_SIM_INLINE_BYTES sets the limit (default 64 KiB; 0 queues every op
// that can be queued).
int64_t inline_bytes_limit();
// The bytes a tensor operand covers (0 when undefined), for that estimate.
inline int64_t bytes_of(const at::Tensor& t) { return t.defined() ? int64_t(t.nbytes()) : 0; }
// True when `bytes` is within the limit and the current stream of `device` has nothing
// pending and has not failed.
bool runs_at_call_when_idle(int64_t bytes, c10::DeviceIndex device);

// Per call on the calling thread: host views of the kernel's neuron inputs and where each
// came from; maps the CPU kernel's outputs back to neuron tensors (steps 1 and 3 of the
// Note). Its guard scope (Note [Memory guard]) opens the operands while the call lives.
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

// Queues `work` on the current stream of `call.device`. The task holds the buffers of every
// view the call made and opens them under the memory guard; `work` must hold host views
// and fresh CPU tensors only (no tensor Python owns).
void enqueue_views(HostCall& call, std::function<void()> work);

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

// Runs `op` (boxed, arguments on `stack`) with the zero-copy scheme above.
void run_zero_copy(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace torch_neuron
