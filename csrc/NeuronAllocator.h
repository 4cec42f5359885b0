// Allocators of the neuron backend.
//
// NeuronDeviceAllocator: the c10::DeviceAllocator of PrivateUse1; memory comes
// from the runtime's per-core caching allocator (runtime/memory.h), so stats,
// empty_cache and the HBM budget are the runtime's.
//
// AllocationRedirect: Note [Zero-copy kernels]. A kernel of the simulated
// NeuronCore is an ATen CPU kernel run on host views of device memory. While an
// AllocationRedirect is alive on a thread, every CPU allocation made on that
// thread is served from the device's memory instead, so the outputs a CPU kernel
// allocates already live in device memory and are adopted by neuron tensors
// without a copy (kernels/ZeroCopy.cpp).
#pragma once

#include <c10/core/Allocator.h>

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

// True when `data_ptr` was served from device memory by a redirect.
bool is_redirected_allocation(const c10::DataPtr& data_ptr);
// The CPU allocator installed by the backend (it forwards to the original one
// unless a redirect is active on the calling thread).
c10::Allocator* redirecting_cpu_allocator();
// Installs the redirecting CPU allocator; called once when the module loads.
void install_redirecting_cpu_allocator();

}  // namespace torch_neuron
