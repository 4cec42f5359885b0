#include "NeuronAllocator.h"

#include <ATen/core/CachingHostAllocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/CachingDeviceAllocator.h>

#include <mutex>
#include <unordered_map>

#include "HostWait.h"
#include "NeuronCommon.h"
#include "NeuronLogging.h"
#include "OpTracking.h"

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

bool neuron_memory_in_use(int64_t device) {
  NEURON_RT_CALL(neuron_rt::Runtime::check_visible_device(device));
  return neuron_rt::Runtime::initialized() && !neuron_rt::Runtime::in_bad_fork();
}

void neuron_allocator_empty_cache() {
  // Nothing cached yet, or the parent's cache (a forked child): as CUDA's, starts nothing.
  if (!neuron_rt::Runtime::initialized() || neuron_rt::Runtime::in_bad_fork()) return;
  auto& rt = runtime();
  without_gil([&] { NEURON_RT_CALL(rt.synchronize()); });
  for (int d = 0; d < rt.device_count(); ++d) rt.memory(d).empty_cache();
  neuron_rt::HostMemory::get().empty_cache();
}

namespace {

// ---- device memory ---------------------------------------------------------------------------

void release_device_buffer(void* context) noexcept {
  if (neuron_rt::Runtime::in_bad_fork()) return;  // inherited from the parent: left alone
  static_cast<neuron_rt::Buffer*>(context)->release();
}

using c10::CachingDeviceAllocator::DeviceStats;
using c10::CachingDeviceAllocator::StatType;

class NeuronDeviceAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t bytes) override {
    auto& rt = runtime();
    const int device = rt.current_device();
    return device_data_ptr(neuron_rt::BufferRef::adopt(NEURON_RT_CALL(rt.memory(device).allocate(bytes))));
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }  // contexts are buffers, not pointers
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    // Raw pointers only: wait for the device, then copy on the host (the memory guard
    // cannot open raw pointers; this path is not used by the backend's own kernels).
    auto& rt = runtime();
    without_gil([&] { NEURON_RT_CALL(rt.synchronize()); });
    std::memmove(dest, src, count);
  }
  bool initialized() override { return neuron_rt::Runtime::initialized(); }
  void emptyCache(c10::MempoolId_t) override { neuron_allocator_empty_cache(); }
  void recordStream(const c10::DataPtr& data_ptr, c10::Stream stream) override {
    neuron_rt::Buffer* buffer = buffer_of(data_ptr);
    if (!buffer) return;
    auto& s = NEURON_RT_CALL(runtime().stream(stream.device_index(), static_cast<int>(stream.id())));
    NEURON_RT_CALL(buffer->record_stream(s));
  }
  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    const neuron_rt::MemoryStats s =
        neuron_memory_in_use(device) ? NEURON_RT_CALL(runtime().memory(device).stats()) : neuron_rt::MemoryStats{};
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
    set(stats.requested_bytes, s.requested_bytes, s.peak_requested_bytes, 0, 0);
    set(stats.allocation, s.active_blocks, s.peak_active_blocks, s.allocations, s.frees);
    set(stats.active, s.active_blocks, s.peak_active_blocks, s.allocations, s.frees);
    set(stats.segment, s.segments, s.peak_segments, 0, 0);
    stats.num_ooms = int64_t(s.ooms);
    stats.num_alloc_retries = int64_t(s.alloc_retries);
    return stats;
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    if (neuron_memory_in_use(device)) NEURON_RT_CALL(runtime().memory(device).reset_accumulated_stats());
  }
  void resetPeakStats(c10::DeviceIndex device) override {
    if (neuron_memory_in_use(device)) NEURON_RT_CALL(runtime().memory(device).reset_peak_stats());
  }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    neuron_rt::MemoryStats s = NEURON_RT_CALL(runtime().memory(device).stats());
    return {size_t(s.budget_bytes - s.reserved_bytes), size_t(s.budget_bytes)};
  }
};

NeuronDeviceAllocator g_device_allocator;
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_device_allocator);

// ---- the redirect ----------------------------------------------------------------------------

thread_local int t_redirect_device = -1;

// CPU DataPtrs served from device memory under a redirect keep the pointer as their
// context (raw_allocate requires it); this table maps them to their buffers until they
// are adopted or freed. It holds only the in-flight allocations of running kernels.
std::mutex g_redirected_mutex;
std::unordered_map<void*, neuron_rt::Buffer*>& redirected() {
  static auto* table = new std::unordered_map<void*, neuron_rt::Buffer*>();
  return *table;
}

neuron_rt::Buffer* take_redirected_pointer(void* ptr) {
  std::lock_guard<std::mutex> lock(g_redirected_mutex);
  auto it = redirected().find(ptr);
  if (it == redirected().end()) return nullptr;
  neuron_rt::Buffer* buffer = it->second;
  redirected().erase(it);
  return buffer;
}

void free_redirected(void* ptr) noexcept {
  if (neuron_rt::Runtime::in_bad_fork()) return;  // the parent's in-flight scratch: left alone
  if (neuron_rt::Buffer* buffer = take_redirected_pointer(ptr)) buffer->release();
}

// Memory lent to a kernel's output (LendOutputs): the list of the innermost LendOutputs.
struct Lent {
  void* data;
  size_t bytes;
  bool used;
};
thread_local std::vector<Lent>* t_lent = nullptr;

void free_lent(void*) noexcept {}  // the output's storage owns the memory

c10::DeleterFnPtr g_base_raw_deleter = nullptr;

// raw_allocate() calls allocate(), so a raw allocation made under a redirect is device
// memory; raw_deallocate() then calls raw_deleter() on it. This deleter serves both
// kinds: a range check (no lock, no look-up) tells them apart.
void free_raw_block(void* ptr) noexcept {
  if (neuron_rt::device_of_address(ptr) >= 0) {
    free_redirected(ptr);
  } else if (g_base_raw_deleter) {
    g_base_raw_deleter(ptr);
  }
}

class RedirectingCPUAllocator final : public c10::Allocator {
 public:
  explicit RedirectingCPUAllocator(c10::Allocator* base) : base_(base) {}
  c10::DataPtr allocate(size_t bytes) override {
    if (t_lent && bytes) {  // LendOutputs: also without a redirect (queued kernels)
      for (Lent& lent : *t_lent) {
        if (!lent.used && lent.bytes == bytes) {
          lent.used = true;
          return {lent.data, lent.data, &free_lent, c10::Device(c10::DeviceType::CPU)};
        }
      }
    }
    if (t_redirect_device < 0 || bytes == 0) return base_->allocate(bytes);
    auto& rt = runtime();
    neuron_rt::Buffer* buffer = NEURON_RT_CALL(rt.memory(t_redirect_device).allocate(bytes));
    void* ptr = buffer->data();
    {
      std::lock_guard<std::mutex> lock(g_redirected_mutex);
      redirected()[ptr] = buffer;
    }
    return {ptr, ptr, &free_redirected, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return g_base_raw_deleter ? &free_raw_block : nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

 private:
  c10::Allocator* base_;
};

RedirectingCPUAllocator* g_redirecting_allocator = nullptr;

// ---- pinned host memory ----------------------------------------------------------------------

void release_host_buffer(void* context) noexcept { static_cast<neuron_rt::Buffer*>(context)->release(); }

class NeuronHostAllocator final : public at::HostAllocator {
 public:
  c10::DataPtr allocate(size_t bytes) override {
    neuron_rt::Buffer* buffer = NEURON_RT_CALL(neuron_rt::HostMemory::get().allocate(bytes));
    return {buffer->data(), buffer, &release_host_buffer, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
  // The block is reused only after `stream` has run the work enqueued so far.
  bool record_event(void* ptr, void* context, c10::Stream stream) override {
    neuron_rt::BufferRef buffer = pinned_buffer_at(ptr);
    if (!buffer) return false;
    auto& s = NEURON_RT_CALL(runtime().stream(stream.device_index(), static_cast<int>(stream.id())));
    NEURON_RT_CALL(s.enqueue([buffer] {}));  // holds the buffer until the stream gets here
    return true;
  }
  void empty_cache() override { neuron_rt::HostMemory::get().empty_cache(); }
  at::HostStats get_stats() override {
    auto s = neuron_rt::HostMemory::get().stats();
    at::HostStats stats;
    stats.active_bytes.current = int64_t(s.allocated_bytes);
    stats.allocated_bytes.current = int64_t(s.reserved_bytes);
    stats.active_requests.allocated = int64_t(s.allocations);
    stats.active_requests.freed = int64_t(s.frees);
    return stats;
  }
  void reset_accumulated_stats() override {}
  void reset_peak_stats() override {}
};

NeuronHostAllocator g_host_allocator;
REGISTER_HOST_ALLOCATOR(at::kPrivateUse1, &g_host_allocator);

}  // namespace

c10::Allocator* neuron_allocator() { return &g_device_allocator; }
c10::Allocator* pinned_host_allocator() { return &g_host_allocator; }

c10::DataPtr device_data_ptr(neuron_rt::BufferRef buffer) {
  const int device = buffer->device();
  void* data = buffer->data();
  return {data, buffer.leak(), &release_device_buffer,
          c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device))};
}

neuron_rt::Buffer* buffer_of(const c10::DataPtr& data_ptr) {
  if (data_ptr.get_deleter() != &release_device_buffer) return nullptr;
  return static_cast<neuron_rt::Buffer*>(data_ptr.get_context());
}

neuron_rt::BufferRef buffer_ref_of(const c10::Storage& storage) {
  if (!storage) return {};
  if (neuron_rt::Buffer* buffer = buffer_of(storage.data_ptr())) return neuron_rt::BufferRef::share(buffer);
  const void* data = storage.data_ptr().get();
  if (!data) return {};
  // Memory that reached us without its Buffer (a tensor made by DLPack or from_blob over
  // device memory): the buffer that holds it, found by address.
  const int device = neuron_rt::device_of_address(data);
  TORCH_CHECK(device >= 0, "a neuron tensor whose memory (", data, ") is not neuron device memory: the neuron "
              "runtime cannot run work on it. Make the tensor with the neuron device's own allocator (e.g. "
              "torch.empty(..., device='neuron')) or copy it there");
  neuron_rt::Buffer* owner = NEURON_RT_CALL(runtime().memory(device).share_buffer_at(data));
  TORCH_CHECK(owner, "a neuron tensor over device memory (", data, ") that no live buffer holds (freed memory?)");
  return neuron_rt::BufferRef::adopt(owner);
}

neuron_rt::BufferRef take_redirected(c10::DataPtr& data_ptr) {
  if (data_ptr.get_deleter() != &free_redirected) return {};
  void* ptr = data_ptr.get();
  neuron_rt::Buffer* buffer = take_redirected_pointer(ptr);
  if (!buffer) return {};
  data_ptr.release_context();  // the table no longer knows it: the DataPtr must not free it
  data_ptr = c10::DataPtr(nullptr, c10::Device(c10::DeviceType::CPU));
  return neuron_rt::BufferRef::adopt(buffer);
}

neuron_rt::BufferRef pinned_buffer_at(const void* ptr) {
  if (!ptr) return {};
  if (auto* buffer = neuron_rt::HostMemory::get().share_live(ptr)) return neuron_rt::BufferRef::adopt(buffer);
  return {};
}

bool is_pinned_pointer(const void* ptr) { return ptr && neuron_rt::HostMemory::get().is_pinned(ptr); }

LendOutputs::LendOutputs(const std::vector<c10::Storage>& targets) : previous_(t_lent) {
  auto* lent = new std::vector<Lent>();
  for (const c10::Storage& storage : targets) {
    if (storage && storage.nbytes()) lent->push_back(Lent{storage.mutable_data(), storage.nbytes(), false});
  }
  t_lent = lent;
}
LendOutputs::LendOutputs(const std::vector<std::pair<void*, size_t>>& regions) : previous_(t_lent) {
  auto* lent = new std::vector<Lent>();
  for (const auto& [data, bytes] : regions) {
    if (data && bytes) lent->push_back(Lent{data, bytes, false});
  }
  t_lent = lent;
}
LendOutputs::~LendOutputs() {
  delete t_lent;
  t_lent = static_cast<std::vector<Lent>*>(previous_);
}

AllocationRedirect::AllocationRedirect(c10::DeviceIndex device) : previous_(t_redirect_device) {
  t_redirect_device = device;
}
AllocationRedirect::~AllocationRedirect() { t_redirect_device = previous_; }

c10::Allocator* redirecting_cpu_allocator() { return g_redirecting_allocator; }

void install_redirecting_cpu_allocator() {
  if (g_redirecting_allocator) return;
  c10::Allocator* base = c10::GetCPUAllocator();
  g_base_raw_deleter = base->raw_deleter();
  g_redirecting_allocator = new RedirectingCPUAllocator(base);
  c10::SetCPUAllocator(g_redirecting_allocator, /*priority=*/100);
}

}  // namespace torch_neuron
