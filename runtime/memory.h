// Device memory of one logical NeuronCore: a caching allocator accounted
// against the core's HBM budget.
//
// Equivalent to: the CUDA caching allocator for one device (block reuse, stats,
// empty_cache), in a much smaller form: blocks are rounded to 512 bytes, freed
// blocks are cached by size and reused best-fit (a cached block is used for a
// request when it wastes at most 1/8 of it), and never split.
//
// Budget: `reserved` (blocks in use + cached) never exceeds the HBM budget. When
// a request does not fit, the cache is released and the request retried; if it
// still does not fit, Error(kOutOfMemory) names the requested, free and total
// sizes and nothing already allocated is touched.
//
// Thread safety: every method may be called from any thread at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>

namespace neuron_rt {

struct MemoryStats {
  uint64_t allocated_bytes = 0;       // bytes in blocks handed out now
  uint64_t reserved_bytes = 0;        // bytes in blocks held (in use + cached)
  uint64_t peak_allocated_bytes = 0;  // highest allocated_bytes since reset
  uint64_t peak_reserved_bytes = 0;   // highest reserved_bytes since reset
  uint64_t requested_bytes = 0;       // bytes asked for (before rounding) now in use
  uint64_t allocations = 0;           // number of allocate() calls that succeeded
  uint64_t frees = 0;                 // number of blocks given back
  uint64_t active_blocks = 0;         // blocks handed out now
  uint64_t cached_blocks = 0;         // free blocks kept for reuse
  uint64_t segments = 0;              // host buffers held (blocks in use + cached)
  uint64_t ooms = 0;                  // requests refused for lack of HBM
  uint64_t budget_bytes = 0;          // the HBM budget of this core
  // Accumulated since the last reset_accumulated_stats():
  uint64_t allocated_bytes_total = 0;  // bytes handed out
  uint64_t freed_bytes_total = 0;      // bytes given back
  uint64_t reserved_bytes_total = 0;   // bytes of host buffers taken
  uint64_t released_bytes_total = 0;   // bytes of host buffers released
};

class DeviceMemory {
 public:
  DeviceMemory(int device, uint64_t budget_bytes);
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  // Returns a block of at least `bytes` (nullptr for 0 bytes). `stream` is the
  // stream the block is first used on (recorded for stream-ordered reuse).
  // Throws Error(kOutOfMemory) when the budget cannot hold it.
  void* allocate(size_t bytes, int stream = 0);
  // Gives a block back to the cache. Unknown pointers are ignored and reported false.
  bool free(void* ptr);
  // True when `ptr` is the start of a block of this device in use (a hash look-up).
  bool owns(const void* ptr) const;
  // True when `ptr` points anywhere into a block in use (a scan of the blocks).
  bool contains(const void* ptr) const;
  // Releases every cached (free) block back to the host.
  void empty_cache();

  MemoryStats stats() const;
  void reset_peak_stats();
  void reset_accumulated_stats();
  int device() const { return device_; }
  uint64_t budget() const { return budget_; }

 private:
  struct Block {
    size_t size;       // rounded size
    size_t requested;  // size asked for
    int stream;
  };
  void release_cached_locked();

  const int device_;
  const uint64_t budget_;
  mutable std::mutex mutex_;
  std::unordered_map<void*, Block> active_;     // handed out
  std::multimap<size_t, void*> cached_;         // free, by size
  MemoryStats stats_;
};

}  // namespace neuron_rt
