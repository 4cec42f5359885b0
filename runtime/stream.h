// A stream of one logical NeuronCore: tasks run in the order they were enqueued.
//
// Equivalent to: cudaStream_t; IREE's queue with its semaphore-style failure propagation.
//
// Modes, chosen when the stream is made:
//  - launch-blocking: enqueue() runs the task on the calling thread before it returns
//    (NEURON_LAUNCH_BLOCKING=1, the default). Tasks of one stream enqueued from several
//    threads may then run at the same time; each caller holds what its task uses.
//  - asynchronous: a worker thread of the stream runs the tasks in order; enqueue()
//    returns at once.
//
// Ordering points. Every enqueue gets the next sequence number; marker() is the number of
// tasks enqueued so far, and reached(m) is true once every task before m has finished (run
// or skipped). Memory freed while a stream still has work uses this (memory.h), as do
// events (event.h).
//
// Failure (Note [Sticky stream errors]). A task that throws puts the stream in a failed
// state that never clears, like a CUDA context after a device-side error: the error's
// message is kept; later kernel tasks are skipped (their outputs are never computed, so
// nothing may read them); every later synchronize(), wait_for() and every event recorded
// on the stream fails with the original message, and so does a stream that waits on such
// an event. Skipped tasks are destroyed outside the stream's lock, so whatever they hold
// is released (memory returns to the allocator). abort() fails a stream from outside
// (collective timeouts). In launch-blocking mode a task's exception propagates to the
// caller at once and the stream does not fail.
//
// Thread safety: any thread may enqueue, query, wait or abort at once. A task must not
// wait for its own stream (it would wait for itself).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace neuron_rt {

class Stream {
 public:
  // Work: skipped once the stream has failed.
  using Task = std::function<void()>;
  // Work that always runs, told the stream's error (nullptr when healthy): event records,
  // cross-stream waits.
  using Marker = std::function<void(const std::string* failure)>;

  Stream(int device, int id, bool launch_blocking);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  void enqueue(Task task);
  void enqueue_marker(Marker marker);

  // Sequence points (see above). Reading them never blocks.
  uint64_t marker() const { return enqueued_.load(std::memory_order_acquire); }
  bool reached(uint64_t marker) const { return completed_.load(std::memory_order_acquire) >= marker; }
  // True when every task enqueued so far has finished. Never throws.
  bool query() const { return reached(marker()); }

  // Blocks until every task enqueued before the call has finished; then throws
  // Error(kAsyncFailure or kAborted) naming the original error if the stream has failed.
  void synchronize();
  // As synchronize(), for the tasks before `marker`, giving up after `timeout`:
  // returns false on timeout (nothing thrown for that).
  bool wait_for(uint64_t marker, std::chrono::milliseconds timeout);
  // Fails the stream with `reason` (as a task failure would); pending work is skipped and
  // waiters are woken. Never throws.
  void abort(const std::string& reason) noexcept;
  // The sticky error's message, if the stream has failed.
  std::optional<std::string> failure() const;
  // True once abort() was called. Never blocks.
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }

  // Counters for tests and benchmarks: tasks enqueued, and waits that had to block.
  uint64_t enqueued() const { return enqueued_.load(std::memory_order_relaxed); }
  uint64_t host_waits() const { return host_waits_.load(std::memory_order_relaxed); }

  int device() const { return device_; }
  int id() const { return id_; }
  bool launch_blocking() const { return launch_blocking_; }
  // True on this stream's own worker thread.
  bool is_current_worker() const;
  // The stream whose worker is the calling thread, or nullptr.
  static Stream* current_worker();

 private:
  struct Entry {
    Task task;
    Marker marker;
  };
  void push(Entry entry);
  void worker_loop();
  void finish_one();
  void fail(const std::string& message, bool aborted) noexcept;
  [[noreturn]] void throw_failure() const;

  const int device_;
  const int id_;
  const bool launch_blocking_;
  mutable std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  std::deque<Entry> queue_;
  std::atomic<uint64_t> enqueued_{0};
  std::atomic<uint64_t> completed_{0};
  std::atomic<bool> failed_{false};
  std::atomic<bool> worker_sleeping_{false};
  std::atomic<int> waiters_{0};  // threads blocked in a wait (the worker notifies only then)
  std::atomic<uint64_t> host_waits_{0};
  std::string failure_;     // guarded by mutex_; set once
  std::atomic<bool> aborted_{false};
  bool stopping_ = false;   // guarded by mutex_
  std::thread worker_;      // started on the first asynchronous enqueue
};

}  // namespace neuron_rt
