#include "event.h"

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
  }
  auto state = state_;
  stream.enqueue([state, version] {
    {
      std::lock_guard<std::mutex> lock(state->mutex);
      if (version > state->completed_version) {
        state->completed_version = version;
        state->time = std::chrono::steady_clock::now();
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
    if (state_->completed_version >= version) return;  // already done
  }
  auto state = state_;
  stream.enqueue([state, version] {
    std::unique_lock<std::mutex> lock(state->mutex);
    state->done.wait(lock, [&] { return state->completed_version >= version; });
  });
}

bool Event::query() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->completed_version >= state_->recorded_version;
}

void Event::synchronize() const {
  std::unique_lock<std::mutex> lock(state_->mutex);
  const uint64_t version = state_->recorded_version;
  state_->done.wait(lock, [&] { return state_->completed_version >= version; });
}

bool Event::recorded() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->recorded_version > 0;
}

int Event::device() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->device;
}

double Event::elapsed_ms(const Event& end) const {
  if (!recorded() || !end.recorded()) {
    throw Error(ErrorCode::kInvalidArgument,
                "elapsed time needs both events recorded first (call record() on each)");
  }
  if (!query() || !end.query()) {
    throw Error(ErrorCode::kInvalidArgument,
                "elapsed time needs both events completed; synchronize the end event first");
  }
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
