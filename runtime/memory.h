// Device memory of one logical NeuronCore, and pinned host memory.
//
// DeviceMemory. Equivalent to: the CUDA caching allocator of one device, over a fixed HBM
// budget. At start a range of virtual address space twice the core's HBM budget is reserved;
// pages are backed by host memory only when touched. So:
//  - segments are accounted against the budget: nothing can be allocated beyond it; freed
//    segments leave holes in the range, which the spare half absorbs (as cudaMalloc maps
//    pages wherever they are), so a request fits whenever the budget has room;
//  - "is this pointer device memory, and of which core" is a range comparison
//    (device_of_address), with no lock and no look-up: safe in deleters and forked children;
//  - backing is pluggable (MemoryBacking): private anonymous memory, or a shared-memory file
//    that other processes can map (zero-copy collectives; export_fd()).
// The range is cut into segments (2 MiB for requests up to 1 MiB, 20 MiB for requests up
// to 10 MiB, the page-rounded size above; smaller for small budgets, at most 1/32 and 1/8 of
// the budget), segments into blocks (512-byte granules), with best-fit reuse, splitting
// and coalescing per segment, as CUDA's allocator does.
// `reserved` is the bytes of the segments held; empty_cache() gives every wholly free
// segment's pages back to the host.
//
// Out of memory. When a request does not fit: memory waiting for streams (Note [Buffers]:
// stream-ordered reuse) is collected, then the device's streams are waited for (queued
// work holds buffers that will be freed when it has run), then cached segments are
// released; only then does allocate() throw Error(kOutOfMemory) naming the requested, free
// and total sizes. Nothing already allocated is touched.
//
// Memory guard (NEURON_SIM_MEMORY_GUARD=1, a debug mode; Note [Memory guard]): device
// memory is mapped inaccessible (PROT_NONE) except while a GuardScope that holds it is
// open (kernels and copies open one); a host access that bypasses the runtime faults at
// the access. Blocks are then page-granular.
//
// HostMemory. Pinned host memory (equivalent to cudaHostAlloc): a caching allocator of
// host buffers, by size class. A non-blocking copy from or to a pinned buffer holds a
// reference to it until the copy has run, so freeing the tensor at once is safe. Fork-safe:
// its lock is taken around fork() (pthread_atfork), so a child finds it consistent.
//
// Thread safety: every method may be called from any thread at once. Buffers return
// memory from any thread without blocking.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "buffer.h"

namespace neuron_rt {

class Stream;

struct MemoryStats {
  uint64_t allocated_bytes = 0;       // bytes in blocks handed out now
  uint64_t reserved_bytes = 0;        // bytes of segments held (blocks in use + cached)
  uint64_t peak_allocated_bytes = 0;  // highest allocated_bytes since reset
  uint64_t peak_reserved_bytes = 0;   // highest reserved_bytes since reset
  uint64_t requested_bytes = 0;       // bytes asked for (before rounding) now in use
  uint64_t allocations = 0;           // allocate() calls that succeeded
  uint64_t frees = 0;                 // blocks given back
  uint64_t active_blocks = 0;         // blocks handed out now
  uint64_t cached_blocks = 0;         // free blocks kept for reuse
  uint64_t segments = 0;              // segments held
  uint64_t ooms = 0;                  // requests refused for lack of HBM
  uint64_t alloc_retries = 0;         // requests that waited for streams or emptied the cache first
  uint64_t peak_active_blocks = 0;    // highest active_blocks since reset
  uint64_t peak_segments = 0;         // highest segments since reset
  uint64_t peak_requested_bytes = 0;  // highest requested_bytes since reset
  uint64_t largest_free_range = 0;    // the largest contiguous unreserved part of the address range
  uint64_t pending_frees = 0;         // blocks waiting for recorded streams
  uint64_t budget_bytes = 0;          // the HBM budget of this core
  // Accumulated since the last reset_accumulated_stats():
  uint64_t allocated_bytes_total = 0;  // bytes handed out
  uint64_t freed_bytes_total = 0;      // bytes given back
  uint64_t reserved_bytes_total = 0;   // bytes of segments taken
  uint64_t released_bytes_total = 0;   // bytes of segments released
};

// Where the pages of a device's range come from.
enum class MemoryBacking {
  kAnonymous,   // private anonymous memory
  kSharedFile,  // a memfd, mapped shared: other processes may map it (export_fd())
};

class DeviceMemory final : public BufferOwner {
 public:
  // Reserves the range. `streams` are the device's streams (waited for when memory runs
  // out). Throws Error(kOutOfMemory) when the host cannot reserve the range.
  DeviceMemory(int device, uint64_t budget_bytes, MemoryBacking backing, bool guard,
               std::vector<Stream*> streams = {});
  ~DeviceMemory() override;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  // A buffer of at least `bytes` (one reference, owned by the caller); a zero-byte request
  // gets a buffer of size 0. Throws Error(kOutOfMemory) (see above).
  Buffer* allocate(size_t bytes);
  void reclaim(Buffer* buffer) noexcept override;
  // A new reference to the buffer in use whose memory holds `ptr` (for memory that reached
  // the bridge without its Buffer, e.g. through DLPack), or nullptr.
  Buffer* share_buffer_at(const void* ptr);
  // Gives every wholly free segment back to the host (collecting finished pending frees first).
  void empty_cache();

  int device() const { return device_; }
  uint64_t budget() const { return budget_; }
  bool owns(const void* ptr) const {
    auto address = reinterpret_cast<uintptr_t>(ptr);
    return address >= base_ && address < base_ + range_;
  }
  // The shared-memory file of a kSharedFile range (-1 otherwise); offsets in it are
  // offsets from range_start().
  int export_fd() const { return fd_; }
  void* range_start() const { return reinterpret_cast<void*>(base_); }
  uint64_t range_bytes() const { return range_; }
  MemoryBacking backing() const { return backing_; }
  bool guarded() const { return guard_; }

  MemoryStats stats() const;
  void reset_peak_stats();
  void reset_accumulated_stats();

  // Note [Memory guard]: opens (count 0 -> 1) or closes (1 -> 0) host access to a buffer.
  void guard_open(Buffer* root);
  void guard_close(Buffer* root);

 private:
  struct Segment;
  struct Block {
    uintptr_t address;
    size_t size;
    size_t requested = 0;
    Segment* segment;
    Block* prev = nullptr;  // address neighbours in the segment
    Block* next = nullptr;
    bool free = true;
    int guard_opens = 0;
    Buffer* buffer = nullptr;  // the buffer using it (cleared before the Buffer goes)
  };
  struct Segment {
    uintptr_t address;
    size_t size;
    int pool;
    Block* first = nullptr;  // the block at the segment's start (never merged away)
  };
  struct BySize {
    bool operator()(const Block* a, const Block* b) const {
      return a->size != b->size ? a->size < b->size : a->address < b->address;
    }
  };
  struct Pending {
    Block* block;
    std::vector<std::pair<Stream*, uint64_t>> markers;
  };

  Block* take_locked(size_t size, int pool);
  Block* new_segment_locked(size_t size, int pool);
  void free_block_locked(Block* block);
  size_t collect_pending_locked();
  size_t release_cached_locked();
  uintptr_t reserve_range_locked(size_t size);
  void return_range_locked(uintptr_t address, size_t size);
  void release_pages(uintptr_t address, size_t size);
  [[noreturn]] void throw_oom_locked(size_t size);

  const int device_;
  const uint64_t budget_;
  const MemoryBacking backing_;
  const bool guard_;
  const size_t granule_;
  size_t small_request_, small_segment_, medium_request_, medium_segment_;
  std::vector<Stream*> streams_;
  uintptr_t base_ = 0;
  size_t range_ = 0;
  int fd_ = -1;

  mutable std::mutex mutex_;
  std::set<Block*, BySize> free_[2];            // free blocks per pool (small, large)
  std::map<uintptr_t, size_t> free_ranges_;     // unused parts of the range, by address
  std::vector<Pending> pending_;                // blocks waiting for recorded streams
  std::unordered_map<Segment*, std::unique_ptr<Segment>> segments_;
  MemoryStats stats_;
  std::mutex guard_mutex_;
};

class HostMemory final : public BufferOwner {
 public:
  // The process's pinned host memory (made on first use, never destroyed).
  static HostMemory& get();
  // A pinned host buffer of at least `bytes`; throws Error(kOutOfMemory).
  Buffer* allocate(size_t bytes);
  void reclaim(Buffer* buffer) noexcept override;
  void empty_cache();
  struct Stats {
    uint64_t allocated_bytes = 0, reserved_bytes = 0, allocations = 0, frees = 0;
  };
  Stats stats() const;
  // True for a pointer at the start of a pinned buffer in use or cached.
  bool is_pinned(const void* ptr) const;
  // A new reference to the pinned buffer in use that starts at `ptr`, or nullptr.
  Buffer* share_live(const void* ptr);

 private:
  HostMemory() = default;
  mutable std::mutex mutex_;
  std::multimap<size_t, void*> cached_;            // free blocks by size
  std::unordered_map<void*, size_t> blocks_;        // every block held, in use or cached
  std::unordered_map<void*, Buffer*> live_;         // blocks in use
  Stats stats_;
};

// Device memory of every core made so far, for address -> device questions that must not
// lock (deleters, forked children). Never throws.
int device_of_address(const void* ptr) noexcept;

// Note [Memory guard]: host access to the buffers it holds, for as long as it lives. Buffers
// allocated on this thread while a scope is open join the innermost one. Does nothing
// unless the memory guard is on.
class GuardScope {
 public:
  GuardScope();
  ~GuardScope();
  GuardScope(const GuardScope&) = delete;
  GuardScope& operator=(const GuardScope&) = delete;
  void add(Buffer* buffer);
  static GuardScope* current();

 private:
  GuardScope* outer_;
  std::vector<BufferRef> held_;
};

}  // namespace neuron_rt
