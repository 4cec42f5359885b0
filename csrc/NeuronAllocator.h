// Allocators of the neuron backend.
//
// Device memory: the c10::DeviceAllocator of PrivateUse1. A neuron DataPtr's context is
// the runtime Buffer behind it (Note [Buffers] in runtime/buffer.h), holding one
// reference; its deleter drops that reference. So whatever holds a storage holds the
// memory, and finding the buffer of a tensor is O(1) (no address look-up).
//
// AllocationRedirect: Note [Zero-copy kernels]. A kernel of the simulated NeuronCore is an
// ATen CPU kernel run on host views of device memory. While an AllocationRedirect is alive
// on a thread, every CPU allocation made on that thread (the kernel's outputs and its
// scratch) is served from the device's memory, so outputs are adopted by neuron tensors
// without a copy. Only aten kernels run under a redirect: the code of a custom op may keep
// what it allocates, which must not become device memory.
//
// Pinned host memory: an at::HostAllocator over the runtime's HostMemory; copies that use a
// pinned buffer hold it until they have run.
//
// Fork: deleters never throw and take no runtime lock in a forked child (device memory a
// child inherited is left alone; CPU memory goes to the CPU allocator).
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Storage.h>

#include <vector>

#include "runtime/buffer.h"

namespace torch_neuron {

class AllocationRedirect {
 public:
  explicit AllocationRedirect(c10::DeviceIndex device);
  ~AllocationRedirect();
  AllocationRedirect(const AllocationRedirect&) = delete;
  AllocationRedirect& operator=(const AllocationRedirect&) = delete;

 private:
  int previous_;
};

// While alive on a thread (under an AllocationRedirect), CPU allocations of exactly the
// size of one of `targets` are served from that tensor's memory (each at most once): a
// queued functional kernel then computes its output directly in the output the caller
// already holds, with no second buffer and no copy. Frees of lent memory do nothing.
class LendOutputs {
 public:
  explicit LendOutputs(const std::vector<c10::Storage>& targets);
  // The same, for raw regions (pointer, bytes) the caller keeps alive.
  explicit LendOutputs(const std::vector<std::pair<void*, size_t>>& regions);
  ~LendOutputs();
  LendOutputs(const LendOutputs&) = delete;
  LendOutputs& operator=(const LendOutputs&) = delete;

 private:
  void* previous_;
};

// A neuron DataPtr owning one reference of `buffer`.
c10::DataPtr device_data_ptr(neuron_rt::BufferRef buffer);
// The runtime buffer behind a neuron DataPtr, or nullptr for any other DataPtr.
neuron_rt::Buffer* buffer_of(const c10::DataPtr& data_ptr);
// A reference to the buffer behind a neuron storage (null for storages without one).
neuron_rt::BufferRef buffer_ref_of(const c10::Storage& storage);
// Takes the device buffer out of a CPU DataPtr allocated under a redirect (the DataPtr is
// left empty); null when `data_ptr` is not such an allocation.
neuron_rt::BufferRef take_redirected(c10::DataPtr& data_ptr);
// A reference to the pinned host buffer starting at `ptr`, or null.
neuron_rt::BufferRef pinned_buffer_at(const void* ptr);

// The CPU allocator installed by the backend (it forwards to the original one unless a
// redirect is active on the calling thread).
c10::Allocator* redirecting_cpu_allocator();
// Installs the redirecting CPU allocator; called once when the module loads.
void install_redirecting_cpu_allocator();

}  // namespace torch_neuron
