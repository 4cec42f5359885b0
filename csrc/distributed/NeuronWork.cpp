// The Work of one collective: NeuronWork.h.
#include "NeuronWork.h"

#include <torch/csrc/python_headers.h>

#include <c10/util/Exception.h>

#include <cxxabi.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "../Launch.h"
#include "CompletionThreads.h"

namespace torch_neuron {

std::string message_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

std::exception_ptr backend_error(const std::string& message) {
  try {
    C10_THROW_ERROR(DistBackendError, message);
  } catch (...) {
    return std::current_exception();
  }
}

NeuronWork::NeuronWork(std::string what, int rank, c10d::OpType type, Clock::time_point deadline, Milliseconds limit,
                       c10::IValue value, std::vector<at::Tensor> outputs,
                       c10::intrusive_ptr<c10d::Work> transport_work, std::vector<std::function<void()>> finish_steps,
                       std::vector<c10::Device> devices)
    : c10d::Work(rank, type),
      what_(std::move(what)),
      deadline_(deadline),
      limit_(limit),
      value_(std::move(value)),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(value_.type(), std::move(devices))),
      transport_work_(std::move(transport_work)),
      finish_steps_(std::move(finish_steps)) {}

void NeuronWork::transport_finished(std::exception_ptr error) {
  if (!error) {
    try {
      for (auto& step : finish_steps_) step();
    } catch (...) {
      error = std::current_exception();
    }
  }
  finish_steps_.clear();  // drops the views the steps held
  complete(error ? backend_error(what_ + " failed: " + message_of(error)) : nullptr);
}

void NeuronWork::watch_transport() {
  transport_future_ = false;
  c10::intrusive_ptr<NeuronWork> self = c10::intrusive_ptr<NeuronWork>::reclaim_copy(this);
  CompletionThreads::get().post([self]() mutable {
    std::exception_ptr error;
    try {
      const auto left = std::chrono::duration_cast<Milliseconds>(self->deadline_ - Clock::now());
      if (!self->transport_work_->wait(std::max(left, Milliseconds(1)))) {
        self->time_out(false, Milliseconds(0));
        self->transport_work_->wait(kNoTimeout);
      }
    } catch (...) {
      error = std::current_exception();
    }
    self->transport_finished(error);
    release_off_transport(std::move(self));  // its outputs may be Python's (Note [Completions at exit])
  });
}

bool NeuronWork::wait(Milliseconds timeout) {
  const bool explicit_timeout = timeout != kNoTimeout;
  // A shared-memory collective fails at the deadline itself, naming the ranks it waited
  // for: give its error a moment to arrive.
  const Clock::time_point limit =
      explicit_timeout ? Clock::now() + timeout : deadline_ + (transport_work_ ? Milliseconds(0) : Milliseconds(500));
  if (lane_ && !explicit_timeout && !isCompleted()) lane_->run_until(ticket_);  // Note [Waiters run their collectives]
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!cv_.wait_until(lock, limit, [&] { return completed_; })) {
      lock.unlock();
      time_out(explicit_timeout, timeout);
    }
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (exception_) std::rethrow_exception(exception_);
  }
  order_current_stream();  // a stream wait as well, as WorkNCCL::wait()
  return true;
}

void NeuronWork::order_current_stream() const {
  if (device_ >= 0) current_stream(device_).timeline().wait_until(device_end_ns_);
}

void NeuronWork::abort() {
  try {
    if (transport_work_) transport_work_->abort();
  } catch (...) {
    // Gloo's collectives cannot be aborted; this Work ends anyway
  }
  complete(backend_error(what_ + " was aborted"));
}

void NeuronWork::release_resources() {
  value_ = c10::IValue();
  outputs_.clear();
  future_.reset();
  transport_work_.reset();
  finish_steps_.clear();
}

void NeuronWork::time_out(bool explicit_timeout, Milliseconds timeout) {
  const std::string when = explicit_timeout
                               ? "within the " + std::to_string(timeout.count()) + " ms given to wait()"
                               : std::to_string(limit_.count()) + " ms after it started (the process group's timeout)";
  complete(backend_error(what_ + " timed out: not finished " + when + "; a peer may have stopped or not called it"));
  try {
    if (transport_work_) transport_work_->abort();
  } catch (...) {
    // best effort: Gloo times out its transfers itself
  }
}

void NeuronWork::complete(std::exception_ptr error) {
  if (done_.exchange(true)) return;
  finish(error);
  {
    std::lock_guard<std::mutex> lock(signal_->mutex);
    signal_->done = true;
  }
  signal_->done_cv.notify_all();
  if (!transport_work_ || transport_future_) return;
  // Note [Completions at exit]: the future's callbacks and value are dropped on a completion
  // thread, counted for Python's atexit, never once Python finalizes.
  CompletionThreads::get().post_completion([future = future_, value = value_, error]() mutable {
    using Held = std::pair<c10::intrusive_ptr<c10::ivalue::Future>, c10::IValue>;
    if (!CompletionThreads::may_run()) {  // left to the exit
      new Held(std::move(future), std::move(value));
      return;
    }
    struct Gil {
      std::optional<PyGILState_STATE> state;
      ~Gil() {
        if (state) PyGILState_Release(*state);
      }
    } gil;
    if (CompletionThreads::get().exiting()) {
      // Past our atexit nothing waits for this completion before Python finalizes: the GIL
      // is taken first and held until all of it is dropped (finalizing waits for it). If
      // Python finalizes first, taking it ends this thread, and what `held` has is left to
      // the exit (its destructors would take the GIL again: std::terminate).
      auto* held = new Held(std::move(future), std::move(value));
      gil.state = PyGILState_Ensure();
      future = std::move(held->first);
      value = std::move(held->second);
      delete held;
    }
    try {
      if (error) {
        future->setError(error);
      } else {
        future->markCompleted(value);
      }
    } catch (abi::__forced_unwind&) {
      throw;
    } catch (...) {
      // completed already (by the user's set_result) or a callback threw: the future says so
    }
    future.reset();  // its callbacks and value go before it counts as ended
    value = c10::IValue();
  });
}

void NeuronWork::wait_on_stream() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!cv_.wait_until(lock, deadline_ + (transport_work_ ? Milliseconds(0) : Milliseconds(500)),
                      [&] { return completed_; })) {
    lock.unlock();
    time_out(false, Milliseconds(0));
  }
}

void NeuronWork::complete_future_at_issue() {
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (completed_) error = exception_;
  }
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(value_);
  }
}

}  // namespace torch_neuron
