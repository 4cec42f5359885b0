// An event: a marker recorded on a stream, done when the stream reaches it.
//
// Equivalent to: cudaEvent_t. Each record() starts a new version; query(),
// synchronize() and wait() refer to the latest version recorded. An event never
// recorded counts as done. Timing is always on (host steady clock, at the time
// the stream reaches the marker).
//
// Thread safety: all methods may be called from any thread at once.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

namespace neuron_rt {

class Stream;

class Event {
 public:
  Event();
  void record(Stream& stream);
  // Makes `stream` wait (without blocking the caller) until this event is done.
  void wait(Stream& stream) const;
  bool query() const;
  void synchronize() const;
  // Milliseconds from this event to `end`; both must be recorded and done.
  double elapsed_ms(const Event& end) const;
  bool recorded() const;
  int device() const;

 private:
  struct State {
    std::mutex mutex;
    std::condition_variable done;
    uint64_t recorded_version = 0;
    uint64_t completed_version = 0;
    int device = -1;
    std::chrono::steady_clock::time_point time;
  };
  std::shared_ptr<State> state_;
};

}  // namespace neuron_rt
