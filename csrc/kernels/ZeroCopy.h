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
// other op goes through one boxed path (ZeroCopy.cpp). Both are tracked as Note
// [Op tracking] says.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/SmallVector.h>

#include <atomic>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../OpTracking.h"

namespace torch_neuron {

constexpr c10::DeviceType kNeuron = c10::DeviceType::PrivateUse1;

// A tensor of backend `key` over `storage` with the metadata (sizes, strides, offset,
// dtype, conj/neg bits) of `like`.
at::Tensor tensor_over(c10::Storage storage, c10::DispatchKey key, const at::Tensor& like);
// A CPU tensor sharing the memory of neuron tensor `tensor`.
at::Tensor host_view(const at::Tensor& tensor);
// A neuron tensor over `storage` with the metadata of `like`.
at::Tensor wrap_storage(c10::Storage storage, const at::Tensor& like);
// Makes `cpu` (computed under an AllocationRedirect for `device`) a neuron
// tensor without copying; copies only when its memory did not come from the device.
at::Tensor adopt_output(const at::Tensor& cpu, c10::DeviceIndex device);
// Device storage holding the bytes of `cpu_storage`: adopted when they came from
// a redirect (no copy), copied into device memory otherwise.
c10::Storage device_storage_for(c10::StorageImpl* cpu_storage, c10::DeviceIndex device);

// The device shared by the neuron tensors of an op; raises the error CUDA
// raises when a non-scalar CPU tensor or another device's tensor is mixed in.
struct DeviceCheck {
  c10::DeviceIndex device = -1;
  void add(const at::Tensor& tensor, const char* op_name, bool allow_cpu = false);
};

// Readies a kernel that runs on the calling thread: returns the op's device (the
// current one when no neuron tensor named it) and, in asynchronous mode, first
// drains that device's current stream so the kernel sees all earlier work.
c10::DeviceIndex run_here_on(c10::DeviceIndex device);


// Per call: host views of a kernel's neuron inputs, and where each came from; maps
// the CPU kernel's outputs back to neuron tensors (steps 1 and 3 of the Note).
struct HostCall {
  c10::DeviceIndex device = -1;
  c10::SmallVector<std::pair<c10::Storage, c10::Storage>, 4> views;  // view storage -> device storage
  c10::SmallVector<std::pair<c10::StorageImpl*, c10::Storage>, 2> adopted;  // cpu storage -> device storage

  at::Tensor to_host(const at::Tensor& tensor) {
    if (!tensor.defined() || tensor.device().type() != kNeuron) return tensor;
    for (auto& entry : views) {
      if (entry.second.unsafeGetStorageImpl() == tensor.storage().unsafeGetStorageImpl()) {
        return tensor_over(entry.first, c10::DispatchKey::CPU, tensor);  // one view storage per device storage
      }
    }
    at::Tensor view = host_view(tensor);
    views.emplace_back(view.storage(), tensor.storage());
    return view;
  }

  at::Tensor to_device(const at::Tensor& cpu) {
    if (!cpu.defined() || cpu.device().type() != c10::DeviceType::CPU) return cpu;
    auto* storage = cpu.storage().unsafeGetStorageImpl();
    for (auto& entry : views) {
      if (entry.first.unsafeGetStorageImpl() == storage) {
        sync_resized(entry);
        return wrap_storage(entry.second, cpu);
      }
    }
    for (auto& entry : adopted) {
      if (entry.first == storage) return wrap_storage(entry.second, cpu);
    }
    adopted.emplace_back(storage, device_storage_for(storage, device));
    return wrap_storage(adopted.back().second, cpu);
  }

  // A CPU kernel that resized an out= argument gave its view storage new memory
  // (from the redirect, so in device memory): move it into the device storage.
  static void sync_resized(std::pair<c10::Storage, c10::Storage>& entry) {
    auto* view_storage = entry.first.unsafeGetStorageImpl();
    auto* device_storage = entry.second.unsafeGetStorageImpl();
    if (view_storage->data() == device_storage->data() &&
        view_storage->nbytes() == device_storage->nbytes()) {
      return;
    }
    c10::DataPtr data = view_storage->set_data_ptr(c10::DataPtr(
        view_storage->mutable_data(), c10::Device(c10::DeviceType::CPU)));  // the view keeps a borrowed pointer
    data.unsafe_set_device(device_storage->device());
    device_storage->set_data_ptr_noswap(std::move(data));
    device_storage->set_nbytes(view_storage->nbytes());
  }

  void sync_argument(const at::Tensor& original, const at::Tensor& view) {
    if (!original.defined() || original.device().type() != kNeuron) return;
    for (auto& entry : views) {
      if (entry.second.unsafeGetStorageImpl() == original.storage().unsafeGetStorageImpl()) {
        sync_resized(entry);
        break;
      }
    }
    auto* impl = original.unsafeGetTensorImpl();
    if (impl->sizes() != view.sizes() || impl->strides() != view.strides() ||
        impl->storage_offset() != view.storage_offset()) {
      impl->set_sizes_and_strides(view.sizes(), view.strides(), view.storage_offset());
    }
  }
};


// Note [64-bit as 32-bit]
// The real NeuronCore stores float64 and int64 tensors but computes them in 32
// bits; outputs keep their dtype. We do the same by default: a kernel gets
// float32 / int32 copies of its 64-bit inputs (not of index arguments, which are
// addresses, not values), and its float32 / int32 results are widened back into
// 64-bit outputs. Values beyond the 32-bit range wrap as they would on the device.
// NEURON_SIM_NATIVE_64BIT=1 turns this off (64-bit math, as on the CPU).
bool compute_64bit_as_32bit();
// Changes the setting at run time (for tests and the conformance sweep).
void set_compute_64bit_as_32bit(bool value);
inline bool is_64bit(at::ScalarType type) { return type == at::kDouble || type == at::kLong; }
inline at::ScalarType narrow_64bit(at::ScalarType type) {
  return type == at::kDouble ? at::kFloat : type == at::kLong ? at::kInt : type;
}

// Runs `op` (boxed, arguments on `stack`) with the zero-copy scheme above.
void run_zero_copy(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace torch_neuron
