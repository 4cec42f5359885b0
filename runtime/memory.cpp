#include "memory.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>

#include "error.h"
#include "stream.h"

namespace neuron_rt {

namespace {
constexpr size_t kPage = 4096;
constexpr size_t kSmallRequest = 1u << 20;     // requests up to 1 MiB use the small pool
constexpr size_t kSmallSegment = 2u << 20;     // ... whose segments are 2 MiB
constexpr size_t kMediumRequest = 10u << 20;   // requests up to 10 MiB share 20 MiB segments
constexpr size_t kMediumSegment = 20u << 20;
constexpr size_t kLargeSplit = 1u << 20;       // a large block is split when 1 MiB or more is left

size_t round_up(size_t value, size_t unit) { return (value + unit - 1) / unit * unit; }
size_t round_down(size_t value, size_t unit) { return value / unit * unit; }

// The ranges of every DeviceMemory made, for device_of_address (no lock: entries are
// written before they are published by `g_range_count`, and cleared by their owner).
constexpr int kMaxRanges = 4096;
struct RangeEntry {
  std::atomic<uintptr_t> begin{0};
  std::atomic<uintptr_t> end{0};
  std::atomic<int> device{-1};
};
RangeEntry g_ranges[kMaxRanges];
std::atomic<int> g_range_count{0};
std::atomic<bool> g_guard_enabled{false};

int register_range(uintptr_t begin, uintptr_t end, int device) {
  int index = g_range_count.fetch_add(1);
  if (index >= kMaxRanges) return -1;
  g_ranges[index].device.store(device);
  g_ranges[index].begin.store(begin);
  g_ranges[index].end.store(end, std::memory_order_release);
  return index;
}

std::string system_error(const char* what) { return std::string(what) + ": " + std::strerror(errno); }
}  // namespace

int device_of_address(const void* ptr) noexcept {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  const int count = std::min(g_range_count.load(std::memory_order_acquire), kMaxRanges);
  for (int i = 0; i < count; ++i) {
    const uintptr_t end = g_ranges[i].end.load(std::memory_order_acquire);
    if (address < end && address >= g_ranges[i].begin.load(std::memory_order_relaxed)) {
      return g_ranges[i].device.load(std::memory_order_relaxed);
    }
  }
  return -1;
}

// ---- DeviceMemory ----------------------------------------------------------------------------

DeviceMemory::DeviceMemory(int device, uint64_t budget_bytes, MemoryBacking backing, bool guard,
                           std::vector<Stream*> streams)
    : device_(device),
      budget_(budget_bytes),
      backing_(backing),
      guard_(guard),
      granule_(guard ? kPage : 512),
      streams_(std::move(streams)) {
  stats_.budget_bytes = budget_bytes;
  range_ = 2 * round_up(std::max<uint64_t>(budget_bytes, kPage), kPage);  // holes left by freed segments
  // Segment sizes scale down for small budgets, so that a few small tensors do not hold a
  // large part of the budget.
  small_segment_ = std::clamp(round_down(budget_bytes / 32, kPage), kPage, kSmallSegment);
  small_request_ = std::min(kSmallRequest, small_segment_ / 2);
  medium_segment_ = std::clamp(round_down(budget_bytes / 8, kPage), kPage, kMediumSegment);
  medium_request_ = std::min(kMediumRequest, medium_segment_ / 2);
  const int protection = guard ? PROT_NONE : PROT_READ | PROT_WRITE;
  void* start = MAP_FAILED;
  if (backing == MemoryBacking::kSharedFile) {
    fd_ = memfd_create(("neuron-sim-hbm-" + std::to_string(device)).c_str(), MFD_CLOEXEC);
    if (fd_ < 0 || ftruncate(fd_, off_t(range_)) != 0) {
      throw Error(ErrorCode::kOutOfMemory, "neuron:" + std::to_string(device) + ": " +
                                               system_error("cannot make the shared-memory file of its HBM"));
    }
    start = mmap(nullptr, range_, protection, MAP_SHARED | MAP_NORESERVE, fd_, 0);
  } else {
    start = mmap(nullptr, range_, protection, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  }
  if (start == MAP_FAILED) {
    if (fd_ >= 0) close(fd_);
    throw Error(ErrorCode::kOutOfMemory,
                "neuron:" + std::to_string(device) + ": " +
                    system_error(("cannot reserve " + format_bytes(range_) + " of address space for its HBM").c_str()));
  }
  base_ = reinterpret_cast<uintptr_t>(start);
  free_ranges_[base_] = range_;
  if (guard) g_guard_enabled.store(true);
  register_range(base_, base_ + range_, device);
}

DeviceMemory::~DeviceMemory() {
  // Only tests destroy a DeviceMemory (the runtime's live for the process): forget the
  // range first, so that no pointer into it is taken for device memory any more.
  const int count = std::min(g_range_count.load(), kMaxRanges);
  for (int i = 0; i < count; ++i) {
    if (g_ranges[i].begin.load() == base_) {
      g_ranges[i].end.store(0);
      g_ranges[i].begin.store(0);
    }
  }
  for (auto& pool : free_) {
    for (Block* block : pool) delete block;
  }
  for (auto& pending : pending_) delete pending.block;
  munmap(reinterpret_cast<void*>(base_), range_);
  if (fd_ >= 0) close(fd_);
}

uintptr_t DeviceMemory::reserve_range_locked(size_t size) {
  auto best = free_ranges_.end();
  for (auto it = free_ranges_.begin(); it != free_ranges_.end(); ++it) {
    if (it->second >= size && (best == free_ranges_.end() || it->second < best->second)) best = it;
  }
  if (best == free_ranges_.end()) return 0;
  const uintptr_t address = best->first;
  const size_t left = best->second - size;
  free_ranges_.erase(best);
  if (left) free_ranges_[address + size] = left;
  return address;
}

void DeviceMemory::return_range_locked(uintptr_t address, size_t size) {
  auto next = free_ranges_.lower_bound(address);
  if (next != free_ranges_.end() && next->first == address + size) {
    size += next->second;
    next = free_ranges_.erase(next);
  }
  if (next != free_ranges_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == address) {
      prev->second += size;
      return;
    }
  }
  free_ranges_[address] = size;
}

void DeviceMemory::release_pages(uintptr_t address, size_t size) {
  void* start = reinterpret_cast<void*>(address);
  if (backing_ == MemoryBacking::kSharedFile) {
    fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off_t(address - base_), off_t(size));
  } else {
    madvise(start, size, MADV_DONTNEED);
  }
}

DeviceMemory::Block* DeviceMemory::take_locked(size_t size, int pool) {
  Block key{0, size, 0, nullptr};
  auto it = free_[pool].lower_bound(&key);
  if (it == free_[pool].end()) return nullptr;
  Block* block = *it;
  free_[pool].erase(it);
  const size_t left = block->size - size;
  if (left >= (pool == 0 ? granule_ : std::max(kLargeSplit, granule_))) {
    Block* rest = new Block{block->address + size, left, 0, block->segment};
    rest->prev = block;
    rest->next = block->next;
    if (block->next) block->next->prev = rest;
    block->next = rest;
    block->size = size;
    free_[pool].insert(rest);
  }
  block->free = false;
  return block;
}

DeviceMemory::Block* DeviceMemory::new_segment_locked(size_t size, int pool) {
  size_t segment_size = pool == 0 ? small_segment_ : size <= medium_request_ ? medium_segment_ : round_up(size, kPage);
  uintptr_t address = 0;
  if (stats_.reserved_bytes + segment_size <= budget_) address = reserve_range_locked(segment_size);
  if (!address) {  // near the end of the budget: exactly what is needed
    segment_size = round_up(size, kPage);
    if (stats_.reserved_bytes + segment_size > budget_) return nullptr;
    address = reserve_range_locked(segment_size);
    if (!address) return nullptr;
  }
  auto segment = std::make_unique<Segment>(Segment{address, segment_size, pool});
  Block* block = new Block{address, segment_size, 0, segment.get()};
  segment->first = block;
  segments_[segment.get()] = std::move(segment);
  stats_.segments++;
  stats_.peak_segments = std::max(stats_.peak_segments, stats_.segments);
  stats_.reserved_bytes += segment_size;
  stats_.reserved_bytes_total += segment_size;
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  free_[pool].insert(block);
  return take_locked(size, pool);
}

void DeviceMemory::free_block_locked(Block* block) {
  const int pool = block->segment->pool;
  block->free = true;
  block->requested = 0;
  if (block->prev && block->prev->free) {
    Block* prev = block->prev;
    free_[pool].erase(prev);
    prev->size += block->size;
    prev->next = block->next;
    if (block->next) block->next->prev = prev;
    delete block;
    block = prev;
  }
  if (block->next && block->next->free) {
    Block* next = block->next;
    free_[pool].erase(next);
    block->size += next->size;
    block->next = next->next;
    if (next->next) next->next->prev = block;
    delete next;
  }
  free_[pool].insert(block);
}

size_t DeviceMemory::collect_pending_locked() {
  size_t collected = 0;
  for (size_t i = 0; i < pending_.size();) {
    bool done = true;
    for (auto& [stream, marker] : pending_[i].markers) done = done && stream->reached(marker);
    if (!done) {
      ++i;
      continue;
    }
    free_block_locked(pending_[i].block);
    pending_[i] = std::move(pending_.back());
    pending_.pop_back();
    stats_.pending_frees--;
    ++collected;
  }
  return collected;
}

size_t DeviceMemory::release_cached_locked() {
  size_t released = 0;
  for (auto& pool : free_) {
    for (auto it = pool.begin(); it != pool.end();) {
      Block* block = *it;
      if (block->prev || block->next) {  // part of a segment still in use
        ++it;
        continue;
      }
      it = pool.erase(it);
      Segment* segment = block->segment;
      release_pages(segment->address, segment->size);
      return_range_locked(segment->address, segment->size);
      stats_.reserved_bytes -= segment->size;
      stats_.released_bytes_total += segment->size;
      stats_.segments--;
      released += segment->size;
      segments_.erase(segment);
      delete block;
    }
  }
  return released;
}

void DeviceMemory::throw_oom_locked(size_t size) {
  stats_.ooms++;
  throw Error(ErrorCode::kOutOfMemory,
              "neuron:" + std::to_string(device_) + " is out of memory: tried to allocate " + format_bytes(size) +
                  "; the core has " + format_bytes(budget_) + " of HBM in total, " +
                  format_bytes(budget_ - stats_.reserved_bytes) + " free, " + format_bytes(stats_.allocated_bytes) +
                  " allocated by tensors" +
                  (stats_.reserved_bytes > stats_.allocated_bytes
                       ? ", " + format_bytes(stats_.reserved_bytes - stats_.allocated_bytes) +
                             " held in partly used segments (fragmentation)"
                       : std::string()) +
                  [&] {
                    size_t largest = 0;
                    for (const auto& range : free_ranges_) largest = std::max(largest, range.second);
                    return largest < size ? "; the largest contiguous free range is " + format_bytes(largest) +
                                                " (fragmentation)"
                                          : std::string();
                  }() +
                  ". Free tensors you no longer need, use smaller batches or shard the model across more cores");
}

Buffer* DeviceMemory::allocate(size_t bytes) {
  if (bytes == 0) return new Buffer(device_, nullptr, 0, 0, this, nullptr);
  if (bytes > budget_) {
    std::lock_guard<std::mutex> lock(mutex_);
    throw_oom_locked(bytes);
  }
  const size_t size = round_up(bytes, granule_);
  const int pool = size <= small_request_ ? 0 : 1;
  std::unique_lock<std::mutex> lock(mutex_);
  if (!pending_.empty()) collect_pending_locked();
  Block* block = take_locked(size, pool);
  if (!block) block = new_segment_locked(size, pool);
  if (!block) {
    stats_.alloc_retries++;
    // Queued work holds buffers that are freed once it has run: let it run (a stream's
    // worker waits for no stream, so that two workers never wait for each other).
    if (!Stream::current_worker() && !streams_.empty()) {
      lock.unlock();
      for (Stream* stream : streams_) {
        try {
          stream->wait_for(stream->marker(), std::chrono::milliseconds(-1));
        } catch (const Error&) {
          // a failed stream has skipped its work; its buffers are released all the same
        }
      }
      lock.lock();
    }
    collect_pending_locked();
    block = take_locked(size, pool);
    if (!block) block = new_segment_locked(size, pool);
    if (!block) {
      release_cached_locked();
      block = new_segment_locked(size, pool);
    }
    if (!block) throw_oom_locked(size);
  }
  block->requested = bytes;
  Buffer* buffer;
  try {
    buffer = new Buffer(device_, reinterpret_cast<void*>(block->address), block->size, bytes, this, block);
  } catch (...) {
    free_block_locked(block);
    throw;
  }
  block->buffer = buffer;
  stats_.allocated_bytes += block->size;
  stats_.allocated_bytes_total += block->size;
  stats_.requested_bytes += bytes;
  stats_.allocations++;
  stats_.active_blocks++;
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  stats_.peak_active_blocks = std::max(stats_.peak_active_blocks, stats_.active_blocks);
  stats_.peak_requested_bytes = std::max(stats_.peak_requested_bytes, stats_.requested_bytes);
  lock.unlock();
  if (guard_) {
    if (GuardScope* scope = GuardScope::current()) scope->add(buffer);
  }
  return buffer;
}

void DeviceMemory::reclaim(Buffer* buffer) noexcept {
  Block* block = static_cast<Block*>(buffer->block());
  try {
    const std::vector<Stream*> streams = buffer->recorded_streams();
    if (!block) {  // a zero-byte buffer
      delete buffer;
      return;
    }
    std::vector<std::pair<Stream*, uint64_t>> markers;
    for (Stream* stream : streams) {
      const uint64_t marker = stream->marker();
      if (!stream->reached(marker)) markers.emplace_back(stream, marker);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    block->buffer = nullptr;  // before the Buffer goes: share_buffer_at() must not find it
    delete buffer;
    stats_.allocated_bytes -= block->size;
    stats_.freed_bytes_total += block->size;
    stats_.requested_bytes -= block->requested;
    stats_.active_blocks--;
    stats_.frees++;
    if (markers.empty()) {
      free_block_locked(block);
    } else {
      pending_.push_back(Pending{block, std::move(markers)});
      stats_.pending_frees++;
    }
  } catch (...) {
    // out of host memory for bookkeeping: the block stays unusable (a leak, not a crash)
  }
}

Buffer* DeviceMemory::share_buffer_at(const void* ptr) {
  if (!owns(ptr)) return nullptr;
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& entry : segments_) {
    const Segment* segment = entry.first;
    if (address < segment->address || address >= segment->address + segment->size) continue;
    for (Block* block = segment->first; block; block = block->next) {
      if (address >= block->address && address < block->address + block->size) {
        return block->buffer && block->buffer->try_retain() ? block->buffer : nullptr;
      }
    }
  }
  return nullptr;
}

void DeviceMemory::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  collect_pending_locked();
  release_cached_locked();
}

MemoryStats DeviceMemory::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  MemoryStats stats = stats_;
  stats.cached_blocks = free_[0].size() + free_[1].size();
  for (const auto& range : free_ranges_) stats.largest_free_range = std::max<uint64_t>(stats.largest_free_range, range.second);
  return stats;
}

void DeviceMemory::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
  stats_.peak_active_blocks = stats_.active_blocks;
  stats_.peak_segments = stats_.segments;
  stats_.peak_requested_bytes = stats_.requested_bytes;
}

void DeviceMemory::reset_accumulated_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.allocations = stats_.frees = stats_.ooms = stats_.alloc_retries = 0;
  stats_.allocated_bytes_total = stats_.freed_bytes_total = 0;
  stats_.reserved_bytes_total = stats_.released_bytes_total = 0;
}

void DeviceMemory::guard_open(Buffer* root) {
  Block* block = static_cast<Block*>(root->block());
  if (!guard_ || !block) return;
  std::lock_guard<std::mutex> lock(guard_mutex_);
  if (block->guard_opens++ == 0) {
    mprotect(reinterpret_cast<void*>(block->address), block->size, PROT_READ | PROT_WRITE);
  }
}

void DeviceMemory::guard_close(Buffer* root) {
  Block* block = static_cast<Block*>(root->block());
  if (!guard_ || !block) return;
  std::lock_guard<std::mutex> lock(guard_mutex_);
  if (--block->guard_opens == 0) mprotect(reinterpret_cast<void*>(block->address), block->size, PROT_NONE);
}

// ---- GuardScope ------------------------------------------------------------------------------

namespace {
thread_local GuardScope* t_guard_scope = nullptr;
}

GuardScope::GuardScope() : outer_(t_guard_scope) { t_guard_scope = this; }

GuardScope::~GuardScope() {
  t_guard_scope = outer_;
  for (auto& held : held_) static_cast<DeviceMemory*>(held->owner())->guard_close(held.get());
}

GuardScope* GuardScope::current() { return t_guard_scope; }

void GuardScope::add(Buffer* buffer) {
  if (!g_guard_enabled.load(std::memory_order_relaxed) || !buffer || buffer->device() < 0) return;
  Buffer* root = buffer->root();
  for (auto& held : held_) {
    if (held.get() == root) return;
  }
  auto* memory = static_cast<DeviceMemory*>(root->owner());
  if (!memory->guarded()) return;
  memory->guard_open(root);
  held_.push_back(BufferRef::share(root));
}

// ---- HostMemory ------------------------------------------------------------------------------

HostMemory& HostMemory::get() {
  static HostMemory* memory = [] {
    auto* made = new HostMemory();
    // Fork-safety: the lock is held across fork(), so neither process finds it taken by a
    // thread that does not exist there.
    pthread_atfork([] { HostMemory::get().mutex_.lock(); }, [] { HostMemory::get().mutex_.unlock(); },
                   [] { HostMemory::get().mutex_.unlock(); });
    return made;
  }();
  return *memory;
}

Buffer* HostMemory::allocate(size_t bytes) {
  if (bytes == 0) return new Buffer(-1, nullptr, 0, 0, this, nullptr);
  const size_t size = round_up(bytes, 512);
  std::lock_guard<std::mutex> lock(mutex_);
  void* ptr = nullptr;
  size_t block_size = size;
  auto it = cached_.lower_bound(size);
  if (it != cached_.end() && it->first <= 2 * size) {
    ptr = it->second;
    block_size = it->first;
    cached_.erase(it);
  } else {
    ptr = std::aligned_alloc(64, size);
    if (!ptr) {
      for (auto& entry : cached_) {
        blocks_.erase(entry.second);
        stats_.reserved_bytes -= entry.first;
        std::free(entry.second);
      }
      cached_.clear();
      ptr = std::aligned_alloc(64, size);
    }
    if (!ptr) throw Error(ErrorCode::kOutOfMemory, "could not allocate " + format_bytes(size) + " of pinned host memory");
    blocks_[ptr] = size;
    stats_.reserved_bytes += size;
  }
  stats_.allocated_bytes += block_size;
  stats_.allocations++;
  // `block` carries the block's size (the Buffer keeps the requested size)
  auto* buffer = new Buffer(-1, ptr, block_size, bytes, this, reinterpret_cast<void*>(block_size));
  live_[ptr] = buffer;
  return buffer;
}

void HostMemory::reclaim(Buffer* buffer) noexcept {
  void* ptr = buffer->data();
  const size_t size = reinterpret_cast<size_t>(buffer->block());
  if (!ptr) {
    delete buffer;
    return;
  }
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    live_.erase(ptr);  // before the Buffer goes: share_live() must not find it
    delete buffer;
    stats_.allocated_bytes -= size;
    stats_.frees++;
    cached_.emplace(size, ptr);
  } catch (...) {
  }
}

void HostMemory::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& entry : cached_) {
    blocks_.erase(entry.second);
    stats_.reserved_bytes -= entry.first;
    std::free(entry.second);
  }
  cached_.clear();
}

HostMemory::Stats HostMemory::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

Buffer* HostMemory::share_live(const void* ptr) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(const_cast<void*>(ptr));
  if (it == live_.end() || !it->second->try_retain()) return nullptr;
  return it->second;
}

bool HostMemory::is_pinned(const void* ptr) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return blocks_.count(const_cast<void*>(ptr)) > 0;
}

}  // namespace neuron_rt
