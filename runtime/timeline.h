// The device timeline of one stream: the predicted Trainium time (Note [Device clock] in
// cost_model.h) at which the stream's last launch ends, in nanoseconds since the runtime
// started. Work is placed in issue order: a launch starts when the stream's previous work
// ends (and after every event the stream was made to wait for), but never before the device's
// issue frontier: the latest start of any launch issued before it on any stream of the device
// (and the device's time at its last host synchronize). So the streams of a device share one
// time origin: work issued later never starts earlier, while streams still overlap. It ends
// its predicted duration later. Host time plays no part, so the same program gives the same
// timeline on any machine and under any load.
//
// Equivalent to: the device-side timestamps of a CUDA stream's kernels (what cudaEvent
// timing and Kineto's GPU track show), predicted instead of measured.
//
// Thread safety: lock-free; any thread may append, wait or read at once. Launches appended
// by several threads at once are placed in the order their appends happen.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace neuron_rt {

// A launch's place on its stream's timeline.
struct TimelineSpan {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
};

// The issue frontier of one device, shared by its streams' timelines: a monotonic time.
class IssueFrontier {
 public:
  uint64_t now_ns() const { return time_ns_.load(std::memory_order_acquire); }
  // Raises the frontier to `time_ns` (an atomic max; earlier times change nothing).
  void advance_to(uint64_t time_ns) {
    uint64_t current = time_ns_.load(std::memory_order_acquire);
    while (current < time_ns && !time_ns_.compare_exchange_weak(current, time_ns, std::memory_order_acq_rel)) {
    }
  }

 private:
  std::atomic<uint64_t> time_ns_{0};
};

class Timeline {
 public:
  // `frontier`: the device's, shared with its other streams (one of its own when null).
  explicit Timeline(std::shared_ptr<IssueFrontier> frontier = nullptr)
      : frontier_(frontier ? std::move(frontier) : std::make_shared<IssueFrontier>()) {}

  // The time the stream's work issued so far ends.
  uint64_t now_ns() const { return end_ns_.load(std::memory_order_acquire); }
  // The earliest time work issued now on the stream can start: now_ns(), or the device's issue
  // frontier when later (an event recorded on an idle stream is at this time).
  uint64_t issue_ns() const {
    const uint64_t end = now_ns(), frontier = frontier_->now_ns();
    return end > frontier ? end : frontier;
  }
  // Places a launch of `duration_ns` after the stream's work so far and no earlier than the
  // device's issue frontier, which it then raises to its start.
  TimelineSpan append(uint64_t duration_ns) {
    const uint64_t frontier = frontier_->now_ns();
    uint64_t current = end_ns_.load(std::memory_order_acquire);
    uint64_t start;
    do {
      start = current > frontier ? current : frontier;
    } while (!end_ns_.compare_exchange_weak(current, start + duration_ns, std::memory_order_acq_rel));
    frontier_->advance_to(start);
    return {start, start + duration_ns};
  }
  // Later work starts no earlier than `time_ns` (an event wait).
  void wait_until(uint64_t time_ns) {
    uint64_t current = end_ns_.load(std::memory_order_acquire);
    while (current < time_ns && !end_ns_.compare_exchange_weak(current, time_ns, std::memory_order_acq_rel)) {
    }
  }
  IssueFrontier& frontier() const { return *frontier_; }

 private:
  std::atomic<uint64_t> end_ns_{0};
  const std::shared_ptr<IssueFrontier> frontier_;
};

}  // namespace neuron_rt
