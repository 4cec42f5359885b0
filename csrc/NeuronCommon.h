// Shared pieces of the bridge between PyTorch and the simulated runtime.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <c10/util/Exception.h>

#include "runtime/device.h"
#include "runtime/error.h"

namespace torch_neuron {

// Note [Runtime errors]: the runtime throws neuron_rt::Error; every call from the
// bridge into the runtime goes through NEURON_RT_CALL, which turns it into the
// matching PyTorch error (torch.OutOfMemoryError for kOutOfMemory, RuntimeError
// otherwise) with the runtime's message, which already names the device, the
// sizes and what to do.
[[noreturn]] void rethrow_runtime_error(const neuron_rt::Error& error);

#define NEURON_RT_CALL(...)                              \
  [&]() -> decltype(auto) {                              \
    try {                                                \
      return __VA_ARGS__;                                \
    } catch (const neuron_rt::Error& neuron_rt_error_) { \
      ::torch_neuron::rethrow_runtime_error(neuron_rt_error_); \
    }                                                    \
  }()

inline neuron_rt::Runtime& runtime() { return NEURON_RT_CALL(neuron_rt::Runtime::get()); }

// The stream currently selected for `device` on this thread.
neuron_rt::Stream& current_stream(c10::DeviceIndex device);
// Waits for `stream` (with the GIL released when the caller holds it and must wait);
// throws the stream's sticky error.
void synchronize_stream(neuron_rt::Stream& stream);

// Note [Kernel threads]: a queued kernel runs on the stream's worker thread, which shares the
// machine's cores with the host thread (the simulated device has no cores of its own). While
// the host runs Python, a kernel leaves it one core (`threads` - 1 OpenMP threads, at least
// one); while the host is blocked waiting for the stream (Stream::host_waiting()), the kernel
// takes all `threads`. `threads` is the setting of the thread that queued the kernel
// (torch.set_num_threads; for backward kernels, autograd's device thread), read at enqueue
// by kernel_threads_setting(); use_kernel_threads() applies it on the worker before the
// kernel. Limits (review 7c): decided when the kernel starts (one that starts a moment before
// the host blocks keeps the smaller count); MKL's matmuls keep MKL's own per-thread setting;
// a host blocked in Event.synchronize() does not count. Seen by hand (demo model, bf16
// decode, 2 cores, 2 threads; single runs): the host blocked 0.85 ms per token with every
// queued kernel at the full count (the worker's OpenMP team and the host took turns on the
// cores) and 0.29 ms with this rule.
int kernel_threads_setting();
void use_kernel_threads(const neuron_rt::Stream& stream, int threads);

// The allocator of neuron device memory (a c10::DeviceAllocator).
c10::Allocator* neuron_allocator();
// The allocator of pinned host memory (an at::HostAllocator).
c10::Allocator* pinned_host_allocator();
bool is_pinned_pointer(const void* ptr);

// Waits for all work, then releases every core's cached segments and the cached pinned
// host memory (torch.neuron.empty_cache).
void neuron_allocator_empty_cache();

// Python's atexit (called without the GIL): lets the threads that may still drop a Python-owned
// object (autograd's device threads, point-to-point completions, the collectives' releaser)
// finish before the interpreter finalizes (Note [The autograd device thread at exit]).
void quiesce_for_exit();

}  // namespace torch_neuron
