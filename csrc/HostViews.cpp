#include "HostViews.h"
#include "Launch.h"

#include <ATen/NestedTensorImpl.h>

#include <cstring>

namespace torch_neuron {

// ---- tensors over storages ------------------------------------------------------------------

at::Tensor tensor_over(c10::Storage storage, c10::DispatchKey key, const at::Tensor& like) {
  auto tensor = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(key),
                                                          like.dtype());
  tensor.unsafeGetTensorImpl()->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
  if (like.is_conj()) tensor._set_conj(true);
  if (like.is_neg()) tensor._set_neg(true);
  return tensor;
}

at::Tensor host_view(const at::Tensor& tensor) {
  auto* storage = tensor.storage().unsafeGetStorageImpl();
  c10::Storage view_storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), storage->nbytes(),
      c10::DataPtr(storage->mutable_data(), c10::Device(c10::DeviceType::CPU)), redirecting_cpu_allocator(),
      /*resizable=*/true));
  return tensor_over(std::move(view_storage), c10::DispatchKey::CPU, tensor);
}

at::Tensor wrap_storage(c10::Storage storage, const at::Tensor& like) {
  return tensor_over(std::move(storage), c10::DispatchKey::PrivateUse1, like);
}

namespace {
c10::Storage neuron_storage(neuron_rt::BufferRef buffer, size_t nbytes) {
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), nbytes,
                                                            device_data_ptr(std::move(buffer)), neuron_allocator(),
                                                            /*resizable=*/true));
}

neuron_rt::BufferRef allocate_buffer(c10::DeviceIndex device, size_t bytes) {
  return neuron_rt::BufferRef::adopt(NEURON_RT_CALL(runtime().memory(device).allocate(bytes)));
}
}  // namespace

c10::Storage device_storage_for(const c10::Storage& cpu_storage, c10::DeviceIndex device) {
  auto* impl = cpu_storage.unsafeGetStorageImpl();
  const size_t nbytes = impl->nbytes();
  c10::DataPtr data = impl->set_data_ptr(c10::DataPtr(nullptr, c10::Device(c10::DeviceType::CPU)));
  if (neuron_rt::BufferRef buffer = take_redirected(data)) return neuron_storage(std::move(buffer), nbytes);
  impl->set_data_ptr_noswap(std::move(data));  // not device memory: copied below
  neuron_rt::BufferRef buffer = allocate_buffer(device, nbytes);
  if (nbytes && !impl->data()) {  // a storage without memory (e.g. of a zero tensor)
    auto& stream = current_stream(device);
    note_launch(LaunchPath::kCopy, "zero-fill a host result", device, &stream);
    NEURON_RT_CALL(stream.enqueue([buffer, nbytes] {
      neuron_rt::GuardScope scope;
      scope.add(buffer.get());
      std::memset(buffer->data(), 0, nbytes);
    }));
  } else if (nbytes) {
    note_launch(LaunchPath::kCopy, "adopt a host result", device);
    NEURON_RT_CALL(neuron_rt::copy_host_to_device(current_stream(device), buffer, 0, impl->data(),
                                                  neuron_rt::BufferRef(), nbytes, /*blocking=*/true));
  }
  return neuron_storage(std::move(buffer), nbytes);
}

at::Tensor adopt_output(const at::Tensor& cpu, c10::DeviceIndex device) {
  if (!cpu.defined() || cpu.device().type() != c10::DeviceType::CPU) return cpu;
  check_device_can_hold(cpu);
  return wrap_storage(device_storage_for(cpu.storage(), device), cpu);
}

void DeviceCheck::add(const at::Tensor& tensor, const char* op_name, bool allow_cpu) {
  if (!tensor.defined()) return;
  const auto type = tensor.device().type();
  if (type == kNeuron) {
    const auto index = tensor.device().index();
    if (device < 0) {
      device = index;
    } else {
      TORCH_CHECK(device == index,
                  "Expected all tensors to be on the same device, but found at least two devices, "
                  "neuron:", int(device), " and neuron:", int(index), "! (when checking arguments for ", op_name,
                  "). Move them to one device with .to('neuron:N')");
    }
    return;
  }
  if (type == c10::DeviceType::CPU && (allow_cpu || tensor.dim() == 0)) return;
  TORCH_CHECK(false,
              "Expected all tensors to be on the same device, but found at least two devices, neuron:",
              int(device < 0 ? 0 : device), " and ", tensor.device(), "! (when checking arguments for ",
              op_name, "). Move the ", tensor.device().type() == c10::DeviceType::CPU ? "CPU" : "other",
              " tensor to the neuron device with .to('neuron')");
}

// ---- HostCall --------------------------------------------------------------------------------

at::Tensor HostCall::to_host(const at::Tensor& tensor) {
  if (!tensor.defined() || tensor.device().type() != kNeuron) return tensor;
  if (tensor.is_nested()) {  // Note [Nested tensors]: a CPU nested tensor over a host view of its buffer
    const auto* nested = at::native::get_nested_tensor_impl(tensor);
    return at::detail::make_tensor<at::native::NestedTensorImpl>(
        to_host(nested->get_unsafe_storage_as_tensor()), nested->get_nested_sizes(), nested->get_nested_strides(),
        nested->get_storage_offsets());
  }
  for (auto& entry : views) {
    if (entry.second.unsafeGetStorageImpl() == tensor.storage().unsafeGetStorageImpl()) {
      return tensor_over(entry.first, c10::DispatchKey::CPU, tensor);  // one view storage per device storage
    }
  }
  at::Tensor view = host_view(tensor);
  views.emplace_back(view.storage(), tensor.storage());
  guard.add(buffer_ref_of(tensor.storage()).get());
  return view;
}

namespace {
// A CPU kernel that resized an out= argument gave its view storage new memory (from the
// redirect, so in device memory): move it into the device storage.
void sync_resized(std::pair<c10::Storage, c10::Storage>& entry, c10::DeviceIndex device) {
  auto* view_storage = entry.first.unsafeGetStorageImpl();
  auto* device_storage = entry.second.unsafeGetStorageImpl();
  if (view_storage->data() == device_storage->data() && view_storage->nbytes() == device_storage->nbytes()) {
    return;
  }
  c10::DataPtr data = view_storage->set_data_ptr(
      c10::DataPtr(view_storage->mutable_data(), c10::Device(c10::DeviceType::CPU)));  // the view keeps a borrowed pointer
  neuron_rt::BufferRef buffer = take_redirected(data);
  if (!buffer) {  // not device memory (cannot happen under a redirect): copy it in
    buffer = allocate_buffer(device, view_storage->nbytes());
    neuron_rt::GuardScope scope;
    scope.add(buffer.get());
    std::memcpy(buffer->data(), view_storage->data(), view_storage->nbytes());
  }
  device_storage->set_data_ptr_noswap(device_data_ptr(std::move(buffer)));
  device_storage->set_nbytes(view_storage->nbytes());
}
}  // namespace

namespace {
// Makes `t`, a CPU tensor, hold host memory: a kernel's CPU allocations under the redirect
// come from device memory, which metadata the host keeps reading must not (Note [Memory
// guard] closes it outside kernels). Tensors in host memory are returned as they are.
const at::Tensor& in_host_memory(const at::Tensor& t) {
  auto* impl = t.storage().unsafeGetStorageImpl();
  c10::DataPtr data = impl->set_data_ptr(c10::DataPtr(nullptr, c10::Device(c10::DeviceType::CPU)));
  neuron_rt::BufferRef buffer = take_redirected(data);
  if (!buffer) {
    impl->set_data_ptr_noswap(std::move(data));
    return t;
  }
  const size_t nbytes = impl->nbytes();
  c10::DataPtr host = redirecting_cpu_allocator()->allocate(nbytes);  // no redirect here: host memory
  neuron_rt::GuardScope scope;
  scope.add(buffer.get());
  if (nbytes) std::memcpy(host.get(), buffer->data(), nbytes);
  impl->set_data_ptr_noswap(std::move(host));
  return t;
}
}  // namespace

at::Tensor HostCall::to_device(const at::Tensor& cpu) {
  if (!cpu.defined() || cpu.device().type() != c10::DeviceType::CPU) return cpu;
  if (cpu.is_nested()) {  // Note [Nested tensors]: its buffer comes back, its metadata stays on the host
    const auto* nested = at::native::get_nested_tensor_impl(cpu);
    return at::detail::make_tensor<at::native::NestedTensorImpl>(
        to_device(nested->get_unsafe_storage_as_tensor()), in_host_memory(nested->get_nested_sizes()),
        in_host_memory(nested->get_nested_strides()), in_host_memory(nested->get_storage_offsets()));
  }
  check_device_can_hold(cpu);
  auto* storage = cpu.storage().unsafeGetStorageImpl();
  for (auto& entry : views) {
    if (entry.first.unsafeGetStorageImpl() == storage) {
      sync_resized(entry, device);
      return wrap_storage(entry.second, cpu);
    }
  }
  for (auto& entry : adopted) {
    if (entry.first.unsafeGetStorageImpl() == storage) return wrap_storage(entry.second, cpu);
  }
  adopted.emplace_back(cpu.storage(), device_storage_for(cpu.storage(), device));
  return wrap_storage(adopted.back().second, cpu);
}

void HostCall::sync_argument(const at::Tensor& original, const at::Tensor& view) {
  if (!original.defined() || original.device().type() != kNeuron || original.is_nested()) return;
  for (auto& entry : views) {
    if (entry.second.unsafeGetStorageImpl() == original.storage().unsafeGetStorageImpl()) {
      sync_resized(entry, device);
      break;
    }
  }
  auto* impl = original.unsafeGetTensorImpl();
  if (impl->sizes() != view.sizes() || impl->strides() != view.strides() ||
      impl->storage_offset() != view.storage_offset()) {
    impl->set_sizes_and_strides(view.sizes(), view.strides(), view.storage_offset());
  }
}

void enqueue_views(HostCall& call, std::function<void()> work, const char* name, bool fusable) {
  std::vector<neuron_rt::BufferRef> buffers;
  for (auto& entry : call.views) buffers.push_back(buffer_ref_of(entry.second));
  // No redirect in a queued kernel: its outputs are preallocated (their memory lent to it),
  // and its scratch is host memory, so a queued kernel never needs device memory the
  // enqueuing thread may have taken meanwhile (it could not wait for it: Note [Buffers]).
  neuron_rt::Stream& stream = current_stream(call.device);
  const int threads = kernel_threads_setting();
  const bool concatenate = fusable && concatenating();
  auto task = [work = std::move(work), buffers = std::move(buffers), &stream, threads,
               name = concatenate ? name : nullptr]() mutable {
    use_kernel_threads(stream, threads);
    neuron_rt::GuardScope guard;
    for (auto& buffer : buffers) guard.add(buffer.get());
    // The stream keeps the message; in a concatenation group, it names the op that failed.
    auto named = [name](const char* what) {
      return std::runtime_error(name ? std::string(name) + " (in a fused group): " + what : std::string(what));
    };
    try {
      work();
    } catch (const c10::Error& error) {
      throw named(error.what_without_backtrace());
    } catch (const std::exception& error) {
      if (name) throw named(error.what());
      throw;
    }
    work = nullptr;  // the views it holds go before the buffers they borrow from
  };
  if (concatenate) {
    NEURON_RT_CALL(stream.enqueue_fusable(std::move(task), concatenation_limit(), concatenation_quiet(),
                                          concatenation_flush_when_idle()));
  } else {
    NEURON_RT_CALL(stream.enqueue(std::move(task)));
  }
}

}  // namespace torch_neuron
