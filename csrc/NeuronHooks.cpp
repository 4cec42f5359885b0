// PrivateUse1 hooks: availability, device count, generators, pinned host memory,
// device of a pointer. Contracts: ATen/detail/PrivateUse1HooksInterface.h.
#include <ATen/detail/PrivateUse1HooksInterface.h>


#include <c10/core/DeviceGuard.h>

#include "Launch.h"
#include "NeuronCommon.h"
#include "NeuronAllocator.h"
#include "NeuronGenerator.h"

namespace torch_neuron {
namespace {

struct NeuronHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override {
    try {
      return neuron_rt::Runtime::visible_device_count() > 0;  // Note [Counting devices without starting the runtime]
    } catch (...) {
      return false;
    }
  }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return neuron_rt::Runtime::initialized(); }
  void init() const override { runtime(); }
  c10::DeviceIndex deviceCount() const override {
    try {
      return static_cast<c10::DeviceIndex>(neuron_rt::Runtime::visible_device_count());
    } catch (...) {
      return 0;
    }
  }
  void setCurrentDevice(c10::DeviceIndex device) const override {
    NEURON_RT_CALL(neuron_rt::Runtime::set_current_device_index(device));
  }
  c10::DeviceIndex getCurrentDevice() const override {
    return static_cast<c10::DeviceIndex>(neuron_rt::Runtime::current_device_index());
  }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    auto old = getCurrentDevice();
    setCurrentDevice(device);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    return exchangeDevice(device);
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device) const override {
    return default_generator(device);
  }
  at::Generator getNewGenerator(c10::DeviceIndex device) const override {
    return make_generator(device);
  }
  at::Device getDeviceFromPtr(void* data) const override {
    int device = neuron_rt::Runtime::device_of(data);
    TORCH_CHECK(device >= 0, "the pointer ", data, " is not in neuron device memory");
    return at::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device));
  }
  bool isPinnedPtr(const void* data) const override { return is_pinned_pointer(data); }
  c10::Allocator* getPinnedMemoryAllocator() const override { return pinned_host_allocator(); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t new_bytes) const override;
};

void NeuronHooks::resizePrivateUse1Bytes(const c10::Storage& storage, size_t new_bytes) const {
  auto* impl = storage.unsafeGetStorageImpl();
  TORCH_CHECK(impl->resizable(), "Trying to resize storage that is not resizable");
  c10::DeviceGuard guard(storage.device());  // the new memory is on the storage's core
  const size_t old_bytes = impl->nbytes();
  c10::DataPtr fresh = impl->allocator()->allocate(new_bytes);
  const size_t keep = std::min(old_bytes, new_bytes);
  if (keep > 0) {  // queued: the copy holds both buffers
    auto& stream = current_stream(storage.device().index());
    note_launch(LaunchPath::kCopy, "storage resize", storage.device().index(), &stream);
    NEURON_RT_CALL(neuron_rt::copy_device_to_device(stream, neuron_rt::BufferRef::share(buffer_of(fresh)), 0,
                                                    buffer_ref_of(storage), 0, keep, /*blocking=*/false));
  }
  impl->set_data_ptr_noswap(std::move(fresh));
  impl->set_nbytes(new_bytes);
}

struct RegisterHooks {
  RegisterHooks() { at::RegisterPrivateUse1HooksInterface(new NeuronHooks()); }
} g_register_hooks;

}  // namespace
}  // namespace torch_neuron
