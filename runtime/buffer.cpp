#include "buffer.h"

#include "error.h"

namespace neuron_rt {

namespace {
struct SpinLock {
  std::atomic_flag& flag;
  explicit SpinLock(std::atomic_flag& f) : flag(f) {
    while (flag.test_and_set(std::memory_order_acquire)) {
    }
  }
  ~SpinLock() { flag.clear(std::memory_order_release); }
};
}  // namespace

Buffer::Buffer(Buffer* parent, size_t offset, size_t size)
    : device_(parent->device_),
      data_(static_cast<char*>(parent->data_) + offset),
      size_(size),
      requested_(size),
      owner_(nullptr),
      block_(nullptr),
      parent_(parent) {
  parent->retain();
}

Buffer* Buffer::make_slice(Buffer* parent, size_t offset, size_t size) {
  if (!parent || offset > parent->size_ || size > parent->size_ - offset) {
    throw Error(ErrorCode::kInvalidArgument,
                "a slice [" + std::to_string(offset) + ", " + std::to_string(offset + size) +
                    ") is outside its buffer of " + std::to_string(parent ? parent->size_ : 0) + " bytes");
  }
  return new Buffer(parent, offset, size);
}

void Buffer::release() noexcept {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (parent_) {
    Buffer* parent = parent_;
    delete this;
    parent->release();
    return;
  }
  owner_->reclaim(this);  // deletes the Buffer object too
}

void Buffer::record_stream(Stream& stream) {
  Buffer* owner = root();
  SpinLock lock(owner->streams_lock_);
  for (Stream* recorded : owner->streams_) {
    if (recorded == &stream) return;
  }
  owner->streams_.push_back(&stream);
}

std::vector<Stream*> Buffer::recorded_streams() const {
  SpinLock lock(streams_lock_);
  return streams_;
}

}  // namespace neuron_rt
