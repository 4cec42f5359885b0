#include "copy.h"

#include <cstring>

#include "error.h"
#include "memory.h"
#include "stream.h"

namespace neuron_rt {

// Note [Simulated device memory]: the simulated NeuronCore's HBM is host memory (memory.h),
// so a DMA is a memcpy run by the stream, in stream order.

namespace {
char* at(const BufferRef& buffer, size_t offset) { return static_cast<char*>(buffer->data()) + offset; }
}  // namespace

void copy_host_to_device(Stream& stream, const BufferRef& dst, size_t dst_offset, const void* host_src,
                         const BufferRef& host_hold, size_t bytes, bool blocking) {
  if (bytes == 0) return;
  if (!blocking && !host_hold) {
    throw Error(ErrorCode::kInvalidArgument,
                "a non-blocking copy from host memory needs a held (pinned) host buffer");
  }
  auto copy = [dst, dst_offset, host_src, host_hold, bytes] {
    GuardScope scope;
    scope.add(dst.get());
    std::memcpy(at(dst, dst_offset), host_src, bytes);
  };
  if (blocking && !stream.launch_blocking() && stream.query() && !stream.failure()) {
    copy();  // nothing pending on the stream: no hand-off to its worker
    return;
  }
  stream.enqueue(std::move(copy));
  if (blocking) stream.synchronize();
}

void copy_device_to_host(Stream& stream, void* host_dst, const BufferRef& host_hold, const BufferRef& src,
                         size_t src_offset, size_t bytes, bool blocking) {
  if (!blocking && host_hold) {
    if (bytes == 0) return;
    stream.enqueue([host_dst, host_hold, src, src_offset, bytes] {
      GuardScope scope;
      scope.add(src.get());
      std::memcpy(host_dst, at(src, src_offset), bytes);
    });
    return;
  }
  stream.synchronize();
  if (bytes == 0) return;
  GuardScope scope;
  scope.add(src.get());
  std::memcpy(host_dst, at(src, src_offset), bytes);
}

void copy_device_to_device(Stream& stream, const BufferRef& dst, size_t dst_offset, const BufferRef& src,
                           size_t src_offset, size_t bytes, bool blocking) {
  if (bytes == 0) return;
  stream.enqueue([dst, dst_offset, src, src_offset, bytes] {
    GuardScope scope;
    scope.add(dst.get());
    scope.add(src.get());
    std::memmove(at(dst, dst_offset), at(src, src_offset), bytes);
  });
  if (blocking) stream.synchronize();
}

}  // namespace neuron_rt
