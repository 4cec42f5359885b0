#include "stream.h"

#include <string>

#include "error.h"

namespace neuron_rt {

Stream::Stream(int device, int id, bool launch_blocking)
    : device_(device), id_(id), launch_blocking_(launch_blocking) {}

Stream::~Stream() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void Stream::run_task(Task& task) {
  try {
    task();
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failure_) failure_ = std::current_exception();
  }
}

void Stream::enqueue(Task task) {
  if (launch_blocking_) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      enqueued_++;
    }
    struct Complete {  // also when the task throws: errors surface at the call that caused them
      Stream* stream;
      ~Complete() {
        {
          std::lock_guard<std::mutex> lock(stream->mutex_);
          stream->completed_++;
        }
        stream->work_done_.notify_all();  // other threads may be in synchronize()
      }
    } complete{this};
    task();
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!worker_.joinable()) worker_ = std::thread([this] { worker_loop(); });
    queue_.push_back(std::move(task));
    enqueued_++;
  }
  work_ready_.notify_one();
}

void Stream::worker_loop() {
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to run
      task = std::move(queue_.front());
      queue_.pop_front();
      if (failure_) task = nullptr;  // skip work after a failure until synchronize()
    }
    if (task) run_task(task);
    // Drop what the task holds (e.g. tensors, whose release may need the caller's
    // interpreter) before the task counts as done: synchronize() returns after it.
    task = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      completed_++;
    }
    work_done_.notify_all();
  }
}

void Stream::synchronize() {
  std::exception_ptr failure;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    work_done_.wait(lock, [this] { return completed_ == enqueued_; });
    failure = failure_;
    failure_ = nullptr;
  }
  if (!failure) return;
  try {
    std::rethrow_exception(failure);
  } catch (const std::exception& error) {
    throw Error(ErrorCode::kAsyncFailure,
                "an asynchronous task on neuron:" + std::to_string(device_) + " stream " +
                    std::to_string(id_) + " failed: " + error.what() +
                    " (set NEURON_LAUNCH_BLOCKING=1 to raise it where it happens)");
  }
}

bool Stream::query() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_ == enqueued_;
}

uint64_t Stream::tasks_run() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_;
}

}  // namespace neuron_rt
