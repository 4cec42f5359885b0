#include "NeuronAllocator.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/CachingDeviceAllocator.h>

#include "NeuronCommon.h"

namespace torch_neuron {

void rethrow_runtime_error(const neuron_rt::Error& error) {
  switch (error.code()) {
    case neuron_rt::ErrorCode::kOutOfMemory:
      TORCH_CHECK_WITH(OutOfMemoryError, false, error.what());
    case neuron_rt::ErrorCode::kInvalidDevice:
      TORCH_CHECK_INDEX(false, error.what());
    default:
      TORCH_CHECK(false, error.what());
  }
}

void neuron_allocator_empty_cache() {
  auto& rt = runtime();
  NEURON_RT_CALL(rt.synchronize());
  for (int d = 0; d < rt.device_count(); ++d) rt.memory(d).empty_cache();
}

void free_device_block(void* ptr) { neuron_rt::Runtime::get().free(ptr); }

neuron_rt::Stream& current_stream(c10::DeviceIndex device) {
  auto& rt = runtime();
  return NEURON_RT_CALL(rt.stream(device, rt.current_stream(device)));
}

namespace {

using c10::CachingDeviceAllocator::DeviceStats;
using c10::CachingDeviceAllocator::StatType;

class NeuronDeviceAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t bytes) override {
    auto& rt = runtime();
    const int device = rt.current_device();
    void* ptr = NEURON_RT_CALL(rt.memory(device).allocate(bytes, rt.current_stream(device)));
    return {ptr, ptr, &free_device_block,
            c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device))};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_device_block; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    auto& stream = current_stream(static_cast<c10::DeviceIndex>(runtime().current_device()));
    NEURON_RT_CALL(neuron_rt::copy_device_to_device(stream, dest, src, count, true));
  }
  bool initialized() override { return neuron_rt::Runtime::initialized(); }
  void emptyCache(c10::MempoolId_t) override { neuron_allocator_empty_cache(); }
  void recordStream(const c10::DataPtr&, c10::Stream) override {
    // Frees are ordered after every stream of the device (runtime/device.h).
  }
  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    neuron_rt::MemoryStats s = NEURON_RT_CALL(runtime().memory(device).stats());
    DeviceStats stats;
    auto set = [](c10::CachingDeviceAllocator::StatArray& array, uint64_t current, uint64_t peak,
                  uint64_t allocated, uint64_t freed) {
      auto& stat = array[static_cast<size_t>(StatType::AGGREGATE)];
      stat.current = int64_t(current);
      stat.peak = int64_t(peak);
      stat.allocated = int64_t(allocated);
      stat.freed = int64_t(freed);
    };
    set(stats.allocated_bytes, s.allocated_bytes, s.peak_allocated_bytes, s.allocated_bytes_total, s.freed_bytes_total);
    set(stats.active_bytes, s.allocated_bytes, s.peak_allocated_bytes, s.allocated_bytes_total, s.freed_bytes_total);
    set(stats.reserved_bytes, s.reserved_bytes, s.peak_reserved_bytes, s.reserved_bytes_total, s.released_bytes_total);
    set(stats.requested_bytes, s.requested_bytes, s.requested_bytes, 0, 0);
    set(stats.allocation, s.active_blocks, s.active_blocks, s.allocations, s.frees);
    set(stats.active, s.active_blocks, s.active_blocks, s.allocations, s.frees);
    set(stats.segment, s.segments, s.segments, 0, 0);
    stats.num_ooms = int64_t(s.ooms);
    stats.num_alloc_retries = 0;
    return stats;
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    NEURON_RT_CALL(runtime().memory(device).reset_accumulated_stats());
  }
  void resetPeakStats(c10::DeviceIndex device) override {
    NEURON_RT_CALL(runtime().memory(device).reset_peak_stats());
  }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    neuron_rt::MemoryStats s = NEURON_RT_CALL(runtime().memory(device).stats());
    return {size_t(s.budget_bytes - s.reserved_bytes), size_t(s.budget_bytes)};
  }
};

NeuronDeviceAllocator g_device_allocator;
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_device_allocator);

thread_local int t_redirect_device = -1;

void free_redirected_block(void* ptr) { neuron_rt::Runtime::get().free(ptr); }

c10::DeleterFnPtr g_base_raw_deleter = nullptr;

// raw_allocate() (not virtual) calls allocate(), so a raw allocation made under a
// redirect comes from device memory; raw_deallocate() then calls raw_deleter() on
// it. This deleter serves both kinds.
void free_raw_block(void* ptr) {
  if (ptr && neuron_rt::Runtime::initialized() && neuron_rt::Runtime::get().device_of(ptr) >= 0) {
    neuron_rt::Runtime::get().free(ptr);
  } else if (g_base_raw_deleter) {
    g_base_raw_deleter(ptr);
  }
}

class RedirectingCPUAllocator final : public c10::Allocator {
 public:
  explicit RedirectingCPUAllocator(c10::Allocator* base) : base_(base) {}
  c10::DataPtr allocate(size_t bytes) override {
    if (t_redirect_device < 0) return base_->allocate(bytes);
    auto& rt = runtime();
    void* ptr = NEURON_RT_CALL(
        rt.memory(t_redirect_device).allocate(bytes, rt.current_stream(t_redirect_device)));
    return {ptr, ptr, &free_redirected_block, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return g_base_raw_deleter ? &free_raw_block : nullptr;
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

 private:
  c10::Allocator* base_;
};

RedirectingCPUAllocator* g_redirecting_allocator = nullptr;

}  // namespace

c10::Allocator* neuron_allocator() { return &g_device_allocator; }

AllocationRedirect::AllocationRedirect(c10::DeviceIndex device) : previous_(t_redirect_device) {
  t_redirect_device = device;
}
AllocationRedirect::~AllocationRedirect() { t_redirect_device = previous_; }

bool is_redirected_allocation(const c10::DataPtr& data_ptr) {
  return data_ptr.get_deleter() == &free_redirected_block;
}

c10::Allocator* redirecting_cpu_allocator() { return g_redirecting_allocator; }

void install_redirecting_cpu_allocator() {
  if (g_redirecting_allocator) return;
  c10::Allocator* base = c10::GetCPUAllocator();
  g_base_raw_deleter = base->raw_deleter();
  g_redirecting_allocator = new RedirectingCPUAllocator(base);
  c10::SetCPUAllocator(g_redirecting_allocator, /*priority=*/100);
}

}  // namespace torch_neuron
