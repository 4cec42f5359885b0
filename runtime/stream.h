// A stream of one logical NeuronCore: tasks run in the order they were enqueued.
//
// Equivalent to: cudaStream_t. Two modes, chosen when the stream is made:
//  - launch-blocking: enqueue() runs the task on the calling thread before it
//    returns (NEURON_LAUNCH_BLOCKING=1, and the default);
//  - asynchronous: a worker thread of the stream runs tasks in order; enqueue()
//    returns at once. An exception thrown by a task is kept and rethrown, as
//    Error(kAsyncFailure), by the next synchronize() (sticky, like a CUDA error),
//    and later tasks of that stream are skipped until then.
//
// Thread safety: any thread may enqueue, query or synchronize at once.
// A task must not synchronize its own stream.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace neuron_rt {

class Stream {
 public:
  using Task = std::function<void()>;

  Stream(int device, int id, bool launch_blocking);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  void enqueue(Task task);
  // Blocks until every task enqueued so far has run; rethrows a task's failure.
  void synchronize();
  // True when every task enqueued so far has run.
  bool query() const;

  int device() const { return device_; }
  int id() const { return id_; }
  bool launch_blocking() const { return launch_blocking_; }
  uint64_t tasks_run() const;

 private:
  void worker_loop();
  void run_task(Task& task);

  const int device_;
  const int id_;
  const bool launch_blocking_;
  mutable std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  std::deque<Task> queue_;
  uint64_t enqueued_ = 0;
  uint64_t completed_ = 0;
  std::exception_ptr failure_;
  bool stopping_ = false;
  std::thread worker_;  // started on the first asynchronous enqueue
};

}  // namespace neuron_rt
