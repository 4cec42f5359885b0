// PrivateUse1 hooks: availability, device count, generators, pinned host memory,
// device of a pointer. Contracts: ATen/detail/PrivateUse1HooksInterface.h.
#include <ATen/detail/PrivateUse1HooksInterface.h>

#include <cstdlib>
#include <mutex>
#include <unordered_set>

#include "NeuronCommon.h"
#include "NeuronGenerator.h"

namespace torch_neuron {
namespace {

// Pinned host memory: page-locked on the real device; here ordinary host memory
// registered so that is_pinned() can tell it apart.
class PinnedHostAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t bytes) override {
    void* ptr = bytes ? std::aligned_alloc(64, (bytes + 63) / 64 * 64) : nullptr;
    TORCH_CHECK_WITH(OutOfMemoryError, !bytes || ptr, "could not allocate ", bytes,
                     " bytes of pinned host memory");
    if (ptr) {
      std::lock_guard<std::mutex> lock(mutex());
      pinned().insert(ptr);
    }
    return {ptr, ptr, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
  static bool is_pinned(const void* ptr) {
    std::lock_guard<std::mutex> lock(mutex());
    return pinned().count(const_cast<void*>(ptr)) > 0;
  }

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::unordered_set<void*>& pinned() {
    static auto* set = new std::unordered_set<void*>();
    return *set;
  }
  static void release(void* ptr) {
    {
      std::lock_guard<std::mutex> lock(mutex());
      pinned().erase(ptr);
    }
    std::free(ptr);
  }
};

PinnedHostAllocator g_pinned_allocator;

struct NeuronHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override {
    try {
      return neuron_rt::Runtime::get().device_count() > 0;
    } catch (...) {
      return false;
    }
  }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return neuron_rt::Runtime::initialized(); }
  void init() const override { runtime(); }
  c10::DeviceIndex deviceCount() const override {
    try {
      return static_cast<c10::DeviceIndex>(neuron_rt::Runtime::get().device_count());
    } catch (...) {
      return 0;
    }
  }
  void setCurrentDevice(c10::DeviceIndex device) const override {
    NEURON_RT_CALL(runtime().set_current_device(device));
  }
  c10::DeviceIndex getCurrentDevice() const override {
    return static_cast<c10::DeviceIndex>(runtime().current_device());
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
    int device = runtime().device_of(data);
    TORCH_CHECK(device >= 0, "the pointer ", data, " is not in neuron device memory");
    return at::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device));
  }
  bool isPinnedPtr(const void* data) const override { return PinnedHostAllocator::is_pinned(data); }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &g_pinned_allocator; }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t new_bytes) const override;
};

void NeuronHooks::resizePrivateUse1Bytes(const c10::Storage& storage, size_t new_bytes) const {
  auto* impl = storage.unsafeGetStorageImpl();
  TORCH_CHECK(impl->resizable(), "Trying to resize storage that is not resizable");
  const size_t old_bytes = impl->nbytes();
  c10::DataPtr fresh = impl->allocator()->allocate(new_bytes);
  const size_t keep = std::min(old_bytes, new_bytes);
  if (keep > 0) {
    auto& stream = current_stream(storage.device().index());
    NEURON_RT_CALL(neuron_rt::copy_device_to_device(stream, fresh.get(), impl->data(), keep, false));
  }
  impl->set_data_ptr_noswap(std::move(fresh));
  impl->set_nbytes(new_bytes);
}

struct RegisterHooks {
  RegisterHooks() { at::RegisterPrivateUse1HooksInterface(new NeuronHooks()); }
} g_register_hooks;

}  // namespace
}  // namespace torch_neuron
