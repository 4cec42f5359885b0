// Copies between host memory and device memory, ordered with a stream.
//
// Equivalent to: cudaMemcpyAsync. Host->device and device->device copies are
// enqueued on `stream`; with `blocking` the caller also waits for them (the
// source host buffer may be reused at once). Device->host copies always wait for
// the stream first, so they see every earlier task (this is where the device
// syncs with the host, as .cpu(), .item() and printing do).
#pragma once

#include <cstddef>

namespace neuron_rt {

class Stream;

void copy_host_to_device(Stream& stream, void* device_dst, const void* host_src, size_t bytes,
                         bool blocking);
void copy_device_to_host(Stream& stream, void* host_dst, const void* device_src, size_t bytes);
void copy_device_to_device(Stream& stream, void* dst, const void* src, size_t bytes,
                           bool blocking);

}  // namespace neuron_rt
