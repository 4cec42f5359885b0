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
// tasks enqueued so far, and reached(m) is true once every task numbered up to m has
// finished (run or skipped), also in launch-blocking mode where tasks of several threads
// finish out of order. Memory freed while a stream still has work uses this (memory.h), as
// do events (event.h).
//
// Failure (Note [Sticky stream errors]). A task that throws puts its device in a failed
// state that never clears, like a CUDA context after a device-side error: the streams of a
// device share one FailureState. The first error's message is kept; later kernel tasks of
// every stream of the device are skipped (their outputs are never computed, so nothing may
// read them); every later synchronize() and wait_for() on any of those streams, every
// event recorded on them and every stream waiting on such an event fail with the original
// message. Skipped tasks are destroyed outside the stream's lock, so whatever they hold is
// released (memory returns to the allocator). abort() fails the device from outside
// (collective timeouts) and wakes this stream's waiters at once. In launch-blocking mode a
// task's exception propagates to the caller and fails nothing; once the device has failed
// (an abort), enqueue() throws instead of running the task.
//
// Note [Concatenation buffer] (Adaptive Eager Execution, csrc/Concatenation.h has the
// policy). In asynchronous mode a task enqueued with enqueue_fusable() is not handed to the
// worker at once: it waits in the stream's buffer with those enqueued after it, and the
// group goes to the worker as one entry (one hand-over, run in order, completing together)
// when the buffer is flushed: by any other enqueue or marker (so the stream's order is the
// order of enqueue, whatever kind of work), by a wait (synchronize, wait_for) on a task in
// it, at the buffer's limit, by flush(), or by the worker once no task has joined the buffer
// for its quiet interval, or, when the tasks ask for it (`starving`), by the worker as soon as
// it has nothing else to run. A buffered task has its sequence number when it is enqueued:
// marker(), query() and reached() count it as enqueued and not yet finished. In
// launch-blocking mode enqueue_fusable() is enqueue().
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
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "timeline.h"

namespace neuron_rt {

// The failure state shared by the streams of one device.
struct FailureState {
  std::mutex mutex;
  std::atomic<bool> failed{false};
  std::string message;  // guarded by mutex; set once
  bool aborted = false;  // guarded by mutex
};

class Stream {
 public:
  // Work: skipped once the stream has failed.
  using Task = std::function<void()>;
  // Work that always runs, told the stream's error (nullptr when healthy): event records,
  // cross-stream waits.
  using Marker = std::function<void(const std::string* failure)>;

  // `device_failure`, `device_frontier`: the failure state and the issue frontier (timeline.h)
  // shared with the device's other streams (ones of its own when null).
  Stream(int device, int id, bool launch_blocking, std::shared_ptr<FailureState> device_failure = nullptr,
         std::shared_ptr<IssueFrontier> device_frontier = nullptr);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  void enqueue(Task task);
  void enqueue_marker(Marker marker);
  // Note [Concatenation buffer]: buffers `task` (asynchronous mode), flushing the buffer when
  // it then holds `limit` tasks or when nothing joins it for `quiet`; with `starving` the worker
  // also takes the buffer as soon as it has nothing else to run. Returns true when the task
  // opened a new group (the buffer was empty).
  bool enqueue_fusable(Task task, size_t limit, std::chrono::microseconds quiet, bool starving = false);
  // Hands the buffered tasks, if any, to the worker as one group. Never throws but for
  // memory.
  void flush();
  // Tasks buffered now (tests).
  size_t buffered() const;
  // Groups handed to the worker so far, and the tasks they held (tests, benchmarks).
  uint64_t groups_flushed() const { return groups_flushed_.load(std::memory_order_relaxed); }
  uint64_t tasks_grouped() const { return tasks_grouped_.load(std::memory_order_relaxed); }

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
  // Time the host spent blocked in those waits, in nanoseconds.
  uint64_t host_wait_ns() const { return host_wait_ns_.load(std::memory_order_relaxed); }
  // True while a host thread is blocked in wait_for() on this stream: the core it runs on is
  // idle then, and a task may use it (the kernels' thread count follows this).
  bool host_waiting() const { return wake_at_.load(std::memory_order_relaxed) != kNobodyWaits; }

  int device() const { return device_; }
  int id() const { return id_; }
  // The predicted device time of this stream's work (Note [Device clock] in cost_model.h):
  // advanced by the clock at each launch's issue, not by running it (so also through a const
  // stream: the timeline annotates the stream, it is not its state).
  Timeline& timeline() const { return timeline_; }
  bool launch_blocking() const { return launch_blocking_; }
  // How long an idle worker polls its queue before it sleeps (Runtime sets it before any
  // work; see stream.cpp, kIdlePoll).
  void set_idle_poll(std::chrono::microseconds poll) { idle_poll_us_.store(poll.count(), std::memory_order_relaxed); }
  std::chrono::microseconds idle_poll() const { return std::chrono::microseconds(idle_poll_us_.load(std::memory_order_relaxed)); }
  static constexpr std::chrono::microseconds kIdlePoll{1000};
  static constexpr std::chrono::microseconds kSharedCoresIdlePoll{70};
  // True on this stream's own worker thread.
  bool is_current_worker() const;
  // The stream whose worker is the calling thread, or nullptr.
  static Stream* current_worker();

 private:
  struct Entry {
    Task task;
    Marker marker;
    uint64_t count = 1;  // sequence numbers it covers (a group: its tasks)
  };
  void push(Entry entry);
  bool flush_locked();  // returns whether the worker sleeps (and must be woken)
  void worker_loop();
  void finish(uint64_t count);
  void finish_blocking(uint64_t sequence);
  bool failed() const { return failure_state_->failed.load(std::memory_order_acquire); }
  void fail(const std::string& message, bool aborted) noexcept;
  [[noreturn]] void throw_failure() const;

  const int device_;
  const int id_;
  const bool launch_blocking_;
  std::atomic<int64_t> idle_poll_us_{kIdlePoll.count()};
  mutable std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  std::deque<Entry> queue_;
  std::atomic<uint64_t> enqueued_{0};
  // Note [Concatenation buffer]: the buffered tasks (guarded by mutex_), the sequence number
  // up to which tasks are in the queue or done (the rest are buffered), and when the group
  // falls due (steady-clock nanoseconds; 0 when the buffer is empty).
  std::vector<Task> group_;
  std::atomic<uint64_t> flushed_{0};
  std::atomic<int64_t> group_due_ns_{0};
  std::atomic<uint64_t> groups_flushed_{0};
  std::atomic<uint64_t> tasks_grouped_{0};
  std::atomic<uint64_t> completed_{0};
  std::shared_ptr<FailureState> failure_state_;
  std::set<uint64_t> finished_out_of_order_;  // launch-blocking: finished after a later one; guarded by mutex_
  std::atomic<bool> worker_sleeping_{false};
  // The markers of the threads blocked in a wait (guarded by mutex_), and the smallest of
  // them: the worker notifies only once completed_ reaches it.
  static constexpr uint64_t kNobodyWaits = ~uint64_t(0);
  std::multiset<uint64_t> awaited_;
  std::atomic<uint64_t> wake_at_{kNobodyWaits};
  std::atomic<uint64_t> host_waits_{0};
  std::atomic<uint64_t> host_wait_ns_{0};
  std::atomic<bool> aborted_{false};
  bool stopping_ = false;   // guarded by mutex_
  std::thread worker_;      // started on the first asynchronous enqueue
  mutable Timeline timeline_;
};

}  // namespace neuron_rt
