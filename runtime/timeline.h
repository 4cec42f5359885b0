// The device timeline of one stream: the predicted Trainium time (Note [Device clock] in
// cost_model.h) at which the stream's last launch ends, in nanoseconds since the runtime
// started. Work is placed in issue order: a launch starts when the stream's previous work
// ends (and after every event the stream was made to wait for), and ends its predicted
// duration later. Host time plays no part, so the same program gives the same timeline on
// any machine and under any load.
//
// Equivalent to: the device-side timestamps of a CUDA stream's kernels (what cudaEvent
// timing and Kineto's GPU track show), predicted instead of measured.
//
// Thread safety: lock-free; any thread may append, wait or read at once. Launches appended
// by several threads at once are placed in the order their appends happen.
#pragma once

#include <atomic>
#include <cstdint>

namespace neuron_rt {

// A launch's place on its stream's timeline.
struct TimelineSpan {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
};

class Timeline {
 public:
  // The time the stream's work issued so far ends.
  uint64_t now_ns() const { return end_ns_.load(std::memory_order_acquire); }
  // Places a launch of `duration_ns` after the stream's work so far.
  TimelineSpan append(uint64_t duration_ns) {
    const uint64_t start = end_ns_.fetch_add(duration_ns, std::memory_order_acq_rel);
    return {start, start + duration_ns};
  }
  // Later work starts no earlier than `time_ns` (an event wait).
  void wait_until(uint64_t time_ns) {
    uint64_t current = end_ns_.load(std::memory_order_acquire);
    while (current < time_ns && !end_ns_.compare_exchange_weak(current, time_ns, std::memory_order_acq_rel)) {
    }
  }

 private:
  std::atomic<uint64_t> end_ns_{0};
};

}  // namespace neuron_rt
