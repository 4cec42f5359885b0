// An event: a marker recorded on a stream, done when the stream reaches it.
//
// Equivalent to: cudaEvent_t, with the failure propagation of IREE's semaphores. Each
// record() starts a new version; query(), synchronize() and wait() refer to the latest
// version recorded. An event never recorded counts as done. Timing is always on, in two
// clocks: the host's steady clock at the time the stream reaches the marker (elapsed_ms), and
// the stream's predicted device time when the record is issued (device_elapsed_ms: the
// earliest start of work issued next on the stream, Timeline::issue_ns; Note [Device clock]
// in cost_model.h). wait() also orders the device timelines: the waiting
// stream's later work starts no earlier than the event's device time.
//
// Failure: an event recorded on a failed stream (Note [Sticky stream errors] in stream.h)
// completes in a failed state carrying the stream's message: synchronize() and query()
// throw Error(kAsyncFailure) with it, and a stream made to wait() on it fails with it too.
// A wait never hangs on a failed event, nor on one whose stream was aborted before
// reaching it (the wait then throws Error(kAborted)).
//
// Thread safety: all methods may be called from any thread at once.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

namespace neuron_rt {

class Stream;

class Event {
 public:
  Event();
  void record(Stream& stream);
  // Makes `stream` wait (without blocking the caller) until this event is done; if the
  // event fails, `stream` fails with its message.
  void wait(Stream& stream) const;
  // True when done; throws Error(kAsyncFailure) when done in a failed state.
  bool query() const;
  // Blocks until done; throws Error(kAsyncFailure) when failed.
  void synchronize() const;
  // As synchronize(), giving up after `timeout`: false on timeout.
  bool wait_for(std::chrono::milliseconds timeout) const;
  // Milliseconds from this event to `end`; both must be recorded and done.
  double elapsed_ms(const Event& end) const;
  // The same on the predicted device clock: the device time between the two records, which
  // must be on the same device (Error(kInvalidArgument) otherwise, as cudaEventElapsedTime).
  double device_elapsed_ms(const Event& end) const;
  // The device time of the latest record (0 when never recorded), in nanoseconds.
  uint64_t device_time_ns() const;
  bool recorded() const;
  int device() const;

 private:
  struct State {
    std::mutex mutex;
    std::condition_variable done;
    uint64_t recorded_version = 0;
    uint64_t completed_version = 0;
    std::string failure;  // set when the latest completed version failed
    int device = -1;
    Stream* stream = nullptr;  // the stream of the latest record
    std::chrono::steady_clock::time_point time;
    uint64_t device_ns = 0;  // the recording stream's device time when the latest record was issued
  };
  void check_timed(const Event& end) const;
  void throw_if_failed_locked(uint64_t version) const;
  std::shared_ptr<State> state_;
};

}  // namespace neuron_rt
