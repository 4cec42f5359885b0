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

// The device type the simulated device registers as (renamed "neuron" from Python).
constexpr c10::DeviceType kNeuron = c10::DeviceType::PrivateUse1;

// The allocator of neuron device memory (a c10::DeviceAllocator).
c10::Allocator* neuron_allocator();
// The allocator of pinned host memory (an at::HostAllocator).
c10::Allocator* pinned_host_allocator();
bool is_pinned_pointer(const void* ptr);

// Waits for all work, then releases every core's cached segments and the cached pinned
// host memory (torch.neuron.empty_cache).
// Whether this process's runtime holds device memory to report or reset: false before the
// runtime starts and in a child forked after the parent started it (statistics are then zero and
// resets no-ops, and neither starts the runtime, as torch.cuda's before CUDA is initialised and
// in a bad fork; Note [Counting devices without starting the runtime], runtime/device.h).
// Checks the index first.
bool neuron_memory_in_use(int64_t device);
void neuron_allocator_empty_cache();

// Python's atexit (called without the GIL): lets the threads that may still drop a Python-owned
// object (autograd's device threads, point-to-point completions, the collectives' releaser)
// finish before the interpreter finalizes (Note [The autograd device thread at exit]).
void quiesce_for_exit();

}  // namespace torch_neuron
