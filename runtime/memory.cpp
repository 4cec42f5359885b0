#include "memory.h"

#include <cstdlib>
#include <new>

#include "error.h"

namespace neuron_rt {

namespace {
constexpr size_t kRound = 512;
constexpr size_t kAlignment = 64;
size_t round_size(size_t bytes) { return (bytes + kRound - 1) / kRound * kRound; }
}  // namespace

DeviceMemory::DeviceMemory(int device, uint64_t budget_bytes)
    : device_(device), budget_(budget_bytes) {
  stats_.budget_bytes = budget_bytes;
}

DeviceMemory::~DeviceMemory() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked();
  // Blocks still in use at exit are owned by tensors that outlive the runtime
  // (static destructors); leave them to the process teardown.
}

void* DeviceMemory::allocate(size_t bytes, int stream) {
  if (bytes == 0) return nullptr;
  const size_t size = round_size(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  void* ptr = nullptr;
  auto it = cached_.lower_bound(size);
  if (it != cached_.end() && it->first - size <= size / 8) {
    ptr = it->second;
    const size_t cached_size = it->first;
    cached_.erase(it);
    stats_.cached_blocks--;
    active_[ptr] = Block{cached_size, bytes, stream};
  } else {
    if (stats_.reserved_bytes + size > budget_) release_cached_locked();
    if (stats_.reserved_bytes + size > budget_) {
      stats_.ooms++;
      throw Error(ErrorCode::kOutOfMemory,
                  "neuron:" + std::to_string(device_) + " is out of memory: tried to allocate " +
                      format_bytes(size) + "; the core has " + format_bytes(budget_) +
                      " of HBM in total, " + format_bytes(budget_ - stats_.reserved_bytes) +
                      " free, " + format_bytes(stats_.allocated_bytes) +
                      " allocated by tensors. Free tensors you no longer need, use smaller "
                      "batches or shard the model across more cores");
    }
    ptr = std::aligned_alloc(kAlignment, (size + kAlignment - 1) / kAlignment * kAlignment);
    if (!ptr) {
      stats_.ooms++;
      throw Error(ErrorCode::kOutOfMemory,
                  "neuron:" + std::to_string(device_) + ": the host could not back a " +
                      format_bytes(size) + " block of simulated HBM (host memory exhausted)");
    }
    stats_.reserved_bytes += size;
    stats_.reserved_bytes_total += size;
    stats_.segments++;
    if (stats_.reserved_bytes > stats_.peak_reserved_bytes) {
      stats_.peak_reserved_bytes = stats_.reserved_bytes;
    }
    active_[ptr] = Block{size, bytes, stream};
  }
  const Block& block = active_[ptr];
  stats_.allocated_bytes += block.size;
  stats_.allocated_bytes_total += block.size;
  stats_.requested_bytes += bytes;
  stats_.allocations++;
  stats_.active_blocks++;
  if (stats_.allocated_bytes > stats_.peak_allocated_bytes) {
    stats_.peak_allocated_bytes = stats_.allocated_bytes;
  }
  return ptr;
}

bool DeviceMemory::free(void* ptr) {
  if (!ptr) return true;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = active_.find(ptr);
  if (it == active_.end()) return false;
  stats_.allocated_bytes -= it->second.size;
  stats_.freed_bytes_total += it->second.size;
  stats_.requested_bytes -= it->second.requested;
  stats_.active_blocks--;
  stats_.frees++;
  stats_.cached_blocks++;
  cached_.emplace(it->second.size, ptr);
  active_.erase(it);
  return true;
}

bool DeviceMemory::owns(const void* ptr) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return active_.count(const_cast<void*>(ptr)) > 0;
}

bool DeviceMemory::contains(const void* ptr) const {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& entry : active_) {
    const auto start = reinterpret_cast<uintptr_t>(entry.first);
    if (address >= start && address < start + entry.second.size) return true;
  }
  return false;
}

void DeviceMemory::release_cached_locked() {
  for (auto& entry : cached_) {
    std::free(entry.second);
    stats_.reserved_bytes -= entry.first;
    stats_.released_bytes_total += entry.first;
    stats_.segments--;
  }
  cached_.clear();
  stats_.cached_blocks = 0;
}

void DeviceMemory::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked();
}

MemoryStats DeviceMemory::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void DeviceMemory::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

void DeviceMemory::reset_accumulated_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.allocations = 0;
  stats_.frees = 0;
  stats_.ooms = 0;
  stats_.allocated_bytes_total = stats_.freed_bytes_total = 0;
  stats_.reserved_bytes_total = stats_.released_bytes_total = 0;
}

}  // namespace neuron_rt
