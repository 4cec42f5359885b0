#include "copy.h"

#include <cstring>

#include "stream.h"

namespace neuron_rt {

// Note [Simulated device memory]: the simulated NeuronCore's HBM is backed by
// host memory, so a DMA is a memcpy run by the stream, in stream order.

void copy_host_to_device(Stream& stream, void* device_dst, const void* host_src, size_t bytes,
                         bool blocking) {
  if (bytes == 0) return;
  stream.enqueue([=] { std::memcpy(device_dst, host_src, bytes); });
  if (blocking) stream.synchronize();
}

void copy_device_to_host(Stream& stream, void* host_dst, const void* device_src, size_t bytes) {
  stream.synchronize();
  if (bytes == 0) return;
  std::memcpy(host_dst, device_src, bytes);
}

void copy_device_to_device(Stream& stream, void* dst, const void* src, size_t bytes,
                           bool blocking) {
  if (bytes == 0) return;
  stream.enqueue([=] { std::memmove(dst, src, bytes); });
  if (blocking) stream.synchronize();
}

}  // namespace neuron_rt
