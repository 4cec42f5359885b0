// Copies between host memory and device memory, ordered with a stream.
//
// Equivalent to: cudaMemcpyAsync. A copy is a task of `stream`: it runs after the work
// enqueued before it and holds the buffers it reads and writes (Note [Buffers]), so they
// may be released by their users at once.
//  - Host -> device and device -> device: enqueued; with `blocking` the caller also waits
//    for it (then a plain host pointer may be reused at once); a blocking host -> device
//    copy to an asynchronous stream with nothing pending is done by the caller (no hand-off
//    to the worker; the order of work is the same). A non-blocking copy from
//    host memory must name the host buffer that holds the source (`host_hold`: pinned
//    memory), which the task keeps alive.
//  - Device -> host: the caller waits for the stream first and copies itself (this is
//    where the device syncs with the host, as .cpu(), .item() and printing do), unless it
//    is non-blocking into a held (pinned) host buffer.
// A failed stream (Note [Sticky stream errors]) makes every blocking copy throw.
#pragma once

#include <cstddef>

#include "buffer.h"

namespace neuron_rt {

class Stream;

void copy_host_to_device(Stream& stream, const BufferRef& dst, size_t dst_offset, const void* host_src,
                         const BufferRef& host_hold, size_t bytes, bool blocking);
void copy_device_to_host(Stream& stream, void* host_dst, const BufferRef& host_hold, const BufferRef& src,
                         size_t src_offset, size_t bytes, bool blocking);
void copy_device_to_device(Stream& stream, const BufferRef& dst, size_t dst_offset, const BufferRef& src,
                           size_t src_offset, size_t bytes, bool blocking);

}  // namespace neuron_rt
