#include "event.h"

#include <algorithm>

#include "error.h"
#include "stream.h"

namespace neuron_rt {

Event::Event() : state_(std::make_shared<State>()) {}

void Event::record(Stream& stream) {
  uint64_t version;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    version = ++state_->recorded_version;
    state_->device = stream.device();
    state_->stream = &stream;
    state_->device_ns = stream.timeline().issue_ns();
  }
  auto state = state_;
  stream.enqueue_marker([state, version](const std::string* failure) {
    {
      std::lock_guard<std::mutex> lock(state->mutex);
      if (version > state->completed_version) {
        state->completed_version = version;
        state->time = std::chrono::steady_clock::now();
        state->failure = failure ? *failure : std::string();
      }
    }
    state->done.notify_all();
  });
}

void Event::wait(Stream& stream) const {
  uint64_t version;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    version = state_->recorded_version;
    stream.timeline().wait_until(state_->device_ns);  // issue order, whether or not the event is done
    if (state_->completed_version >= version && state_->failure.empty()) return;  // already done
  }
  auto state = state_;
  stream.enqueue([state, version] {
    std::unique_lock<std::mutex> lock(state->mutex);
    Stream* recorded_on = state->stream;
    while (state->completed_version < version && !(recorded_on && recorded_on->aborted())) {
      state->done.wait_for(lock, std::chrono::milliseconds(100));  // polls for an abort of the other stream
    }
    if (state->completed_version < version) {
      throw Error(ErrorCode::kAborted, "a waited-on event's stream was aborted");
    }
    if (!state->failure.empty()) {
      throw Error(ErrorCode::kAsyncFailure, "a waited-on event failed: " + state->failure);
    }
  });
}

void Event::throw_if_failed_locked(uint64_t version) const {
  if (state_->completed_version < version) {
    throw Error(ErrorCode::kAborted, "the event's stream was aborted before it reached the event");
  }
  if (!state_->failure.empty()) {
    throw Error(ErrorCode::kAsyncFailure, "the event's stream failed: " + state_->failure);
  }
}

bool Event::query() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  const uint64_t version = state_->recorded_version;
  if (state_->completed_version < version && !(state_->stream && state_->stream->aborted())) return false;
  throw_if_failed_locked(version);
  return true;
}

bool Event::wait_for(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(state_->mutex);
  const uint64_t version = state_->recorded_version;
  Stream* recorded_on = state_->stream;
  auto done = [&] { return state_->completed_version >= version || (recorded_on && recorded_on->aborted()); };
  // Polls: an abort of the recording stream does not notify this event.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    auto slice = std::chrono::steady_clock::duration(std::chrono::milliseconds(100));
    if (timeout.count() >= 0) {
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return false;
      slice = std::min(slice, deadline - now);
    }
    state_->done.wait_for(lock, slice);
  }
  throw_if_failed_locked(version);
  return true;
}

void Event::synchronize() const { wait_for(std::chrono::milliseconds(-1)); }

bool Event::recorded() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->recorded_version > 0;
}

int Event::device() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->device;
}

void Event::check_timed(const Event& end) const {
  if (!recorded() || !end.recorded()) {
    throw Error(ErrorCode::kInvalidArgument,
                "elapsed time needs both events recorded first (call record() on each)");
  }
  if (!query() || !end.query()) {
    throw Error(ErrorCode::kInvalidArgument,
                "elapsed time needs both events completed; synchronize the end event first");
  }
}

uint64_t Event::device_time_ns() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->device_ns;
}

double Event::device_elapsed_ms(const Event& end) const {
  check_timed(end);
  // Each device has its own clock (timeline.h): times of two devices are not comparable.
  const int start_device = device(), end_device = end.device();
  if (start_device != end_device) {
    throw Error(ErrorCode::kInvalidArgument,
                "elapsed time needs both events recorded on the same device, but the start event is on neuron:" +
                    std::to_string(start_device) + " and the end event on neuron:" + std::to_string(end_device) +
                    "; time each device with its own pair of events");
  }
  return (double(end.device_time_ns()) - double(device_time_ns())) / 1e6;
}

double Event::elapsed_ms(const Event& end) const {
  check_timed(end);
  std::chrono::steady_clock::time_point start_time, end_time;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    start_time = state_->time;
  }
  {
    std::lock_guard<std::mutex> lock(end.state_->mutex);
    end_time = end.state_->time;
  }
  return std::chrono::duration<double, std::milli>(end_time - start_time).count();
}

}  // namespace neuron_rt
