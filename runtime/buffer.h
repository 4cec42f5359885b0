// Note [Buffers]
// A Buffer is a refcounted region of device memory (or of pinned host memory), the unit
// the runtime hands across its boundary. Equivalent to: iree_hal_buffer_t,
// ggml_backend_buffer_t.
//
// Ownership. Whoever uses the memory holds a reference: a tensor's storage (through its
// DataPtr context), a task queued on a stream (it holds the buffers its kernel reads and
// writes, so their memory lives until it has run), a slice (it holds its parent). The
// memory returns to its allocator when the last reference goes; nothing is looked up by
// address on that path.
//
// Stream-ordered reuse. A buffer remembers the streams recorded on it (record_stream, as
// tensor.record_stream does). When the last reference goes, its memory is reused only after
// each of those streams has finished the work enqueued before that moment (memory.h). This
// covers work that touches the memory without holding a reference (raw pointers handed
// to a library, e.g. a collective engine).
//
// Slices and arenas. slice() makes a buffer over part of another; Arena hands out slices
// of one large buffer at fixed offsets (the compiler's static memory plan).
//
// Thread safety: references may be taken and dropped from any thread; release() never
// throws and never blocks on a stream. record_stream() may be called from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace neuron_rt {

class Stream;
class Buffer;

// The allocator a buffer's memory came from.
class BufferOwner {
 public:
  virtual ~BufferOwner() = default;
  // Takes back the memory of `buffer` (its last reference is gone). Never throws.
  virtual void reclaim(Buffer* buffer) noexcept = 0;
};

class Buffer {
 public:
  int device() const { return device_; }  // -1 for pinned host memory
  void* data() const { return data_; }
  size_t size() const { return size_; }
  // Bytes the user asked for (the size may be rounded up).
  size_t requested() const { return requested_; }
  bool is_slice() const { return parent_ != nullptr; }
  // The buffer that owns the memory (itself, or the root of a slice's parents).
  Buffer* root() { return parent_ ? parent_->root() : this; }

  void retain() noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }
  // Adds a reference unless the last one is already gone (for allocators' look-ups).
  bool try_retain() noexcept {
    int refs = refs_.load(std::memory_order_relaxed);
    while (refs > 0 && !refs_.compare_exchange_weak(refs, refs + 1, std::memory_order_acq_rel)) {
    }
    return refs > 0;
  }
  void release() noexcept;
  int use_count() const { return refs_.load(std::memory_order_relaxed); }

  // Remembers that `stream` uses the memory (recorded on the root for a slice).
  void record_stream(Stream& stream);
  // The streams recorded so far (for the allocator, when the buffer is reclaimed).
  std::vector<Stream*> recorded_streams() const;

  // Allocator's bookkeeping: its block, and the allocator (null for a slice).
  void* block() const { return block_; }
  BufferOwner* owner() const { return owner_; }

 private:
  friend class DeviceMemory;
  friend class HostMemory;
  friend class BufferRef;
  Buffer(int device, void* data, size_t size, size_t requested, BufferOwner* owner, void* block)
      : device_(device), data_(data), size_(size), requested_(requested), owner_(owner), block_(block) {}
  Buffer(Buffer* parent, size_t offset, size_t size);
  ~Buffer() = default;

  const int device_;
  void* const data_;
  const size_t size_;
  const size_t requested_;
  BufferOwner* const owner_;  // null for a slice
  void* const block_;
  Buffer* const parent_ = nullptr;  // a slice's parent (referenced)
  std::atomic<int> refs_{1};
  mutable std::atomic_flag streams_lock_ = ATOMIC_FLAG_INIT;
  std::vector<Stream*> streams_;  // guarded by streams_lock_

 public:
  // A new buffer over [offset, offset + size) of `parent`, holding a reference to it.
  // Throws Error(kInvalidArgument) when the range is outside the parent.
  static Buffer* make_slice(Buffer* parent, size_t offset, size_t size);
};

// A counted reference to a Buffer (null allowed).
class BufferRef {
 public:
  BufferRef() = default;
  // Takes over one reference the caller owns (as returned by an allocator).
  static BufferRef adopt(Buffer* buffer) {
    BufferRef ref;
    ref.buffer_ = buffer;
    return ref;
  }
  // Adds a reference to `buffer`.
  static BufferRef share(Buffer* buffer) {
    if (buffer) buffer->retain();
    return adopt(buffer);
  }
  BufferRef(const BufferRef& other) : buffer_(other.buffer_) {
    if (buffer_) buffer_->retain();
  }
  BufferRef(BufferRef&& other) noexcept : buffer_(std::exchange(other.buffer_, nullptr)) {}
  BufferRef& operator=(BufferRef other) noexcept {
    std::swap(buffer_, other.buffer_);
    return *this;
  }
  ~BufferRef() {
    if (buffer_) buffer_->release();
  }
  Buffer* get() const { return buffer_; }
  Buffer* operator->() const { return buffer_; }
  explicit operator bool() const { return buffer_ != nullptr; }
  // Gives up the reference without releasing it.
  Buffer* leak() { return std::exchange(buffer_, nullptr); }
  BufferRef slice(size_t offset, size_t size) const { return adopt(Buffer::make_slice(buffer_, offset, size)); }

 private:
  Buffer* buffer_ = nullptr;
};

// Fixed-offset slices of one buffer: the backing store of a static memory plan.
class Arena {
 public:
  explicit Arena(BufferRef base) : base_(std::move(base)) {}
  // The slot [offset, offset + size); throws Error(kInvalidArgument) outside the arena.
  BufferRef slot(size_t offset, size_t size) const { return base_.slice(offset, size); }
  size_t size() const { return base_ ? base_->size() : 0; }
  const BufferRef& base() const { return base_; }

 private:
  BufferRef base_;
};

}  // namespace neuron_rt
