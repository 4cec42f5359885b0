#include "stream.h"

#include "error.h"
#include "spin.h"

#include <algorithm>

namespace neuron_rt {

namespace {
thread_local Stream* t_current_worker = nullptr;

// Stream::kIdlePoll: how long an idle worker polls its queue before it sleeps. Work enqueued
// within this time of the last task is picked up without a wake-up (a system call on the
// enqueuing thread and a context switch, several microseconds each, paid per op when the
// worker sleeps between ops); Python between two ops of a forward, and between two decode
// steps, mostly takes less. Measured (make bench, asynchronous vs launch-blocking decode, one
// process on 2 cores): ~70 us of polling left ~60 wake-ups per decode step; 1 ms removed
// most, and the asynchronous side gained ~5-10%. Polling takes a core, though: with more
// processes on the host than half its cores (torchrun ranks on 2 cores), a polling worker
// takes the core another rank's host thread needs (tensor-parallel generate, 2 ranks on 2
// cores: 0.7x), so Runtime then keeps kSharedCoresIdlePoll (NEURON_SIM_IDLE_POLL_US sets it).

std::string describe(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an unknown exception";
  }
}
}  // namespace

Stream::Stream(int device, int id, bool launch_blocking, std::shared_ptr<FailureState> device_failure,
               std::shared_ptr<IssueFrontier> device_frontier)
    : device_(device),
      id_(id),
      launch_blocking_(launch_blocking),
      failure_state_(device_failure ? std::move(device_failure) : std::make_shared<FailureState>()),
      timeline_(std::move(device_frontier)) {}

Stream::~Stream() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    flush_locked();
    stopping_ = true;
  }
  work_ready_.notify_all();
  if (worker_.joinable()) worker_.join();
}

Stream* Stream::current_worker() { return t_current_worker; }
bool Stream::is_current_worker() const { return t_current_worker == this; }

// Wakes the blocked waiters only when the first of their markers is reached: a host wait
// behind a long queue must not cost the worker a wake-up (a system call and a context switch
// of the waiter) per task it drains.
void Stream::finish(uint64_t count) {
  const uint64_t completed = completed_.fetch_add(count, std::memory_order_seq_cst) + count;
  if (completed >= wake_at_.load(std::memory_order_seq_cst)) {
    { std::lock_guard<std::mutex> lock(mutex_); }  // a waiter is either before its check or asleep
    work_done_.notify_all();
  }
}

void Stream::push(Entry entry) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!worker_.joinable()) worker_ = std::thread([this] { worker_loop(); });
    flush_locked();  // Note [Concatenation buffer]: what was buffered before it runs before it
    queue_.push_back(std::move(entry));
    flushed_.store(enqueued_.fetch_add(1, std::memory_order_acq_rel) + 1, std::memory_order_release);
    wake = worker_sleeping_.load(std::memory_order_relaxed);
  }
  if (wake) work_ready_.notify_one();
}

// Note [Concatenation buffer]
bool Stream::flush_locked() {
  if (group_.empty()) return false;
  const uint64_t count = group_.size();
  Entry entry;
  entry.count = count;
  entry.task = [this, tasks = std::move(group_)]() mutable {
    for (Task& task : tasks) {
      if (failed()) return;  // a task of the group failed: the rest are skipped, as later tasks are
      task();
      task = nullptr;  // what it holds goes now, not with the group
    }
  };
  group_.clear();
  queue_.push_back(std::move(entry));
  flushed_.store(enqueued_.load(std::memory_order_acquire), std::memory_order_release);
  group_due_ns_.store(0, std::memory_order_relaxed);
  groups_flushed_.fetch_add(1, std::memory_order_relaxed);
  tasks_grouped_.fetch_add(count, std::memory_order_relaxed);
  return worker_sleeping_.load(std::memory_order_relaxed);
}

void Stream::flush() {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    wake = flush_locked();
  }
  if (wake) work_ready_.notify_one();
}

size_t Stream::buffered() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return group_.size();
}

namespace {
int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

bool Stream::enqueue_fusable(Task task, size_t limit, std::chrono::microseconds quiet, bool starving) {
  if (launch_blocking_) {
    enqueue(std::move(task));
    return true;
  }
  bool opened, wake;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!worker_.joinable()) worker_ = std::thread([this] { worker_loop(); });
    opened = group_.empty();
    group_.push_back(std::move(task));
    enqueued_.fetch_add(1, std::memory_order_acq_rel);
    group_due_ns_.store(starving ? steady_ns() : steady_ns() + int64_t(quiet.count()) * 1000,
                        std::memory_order_relaxed);
    if (group_.size() >= std::max<size_t>(limit, 1)) {
      wake = flush_locked();
    } else {
      // A sleeping worker must learn when the group falls due (one wake-up per group).
      wake = (opened || starving) && worker_sleeping_.load(std::memory_order_relaxed);
    }
  }
  if (wake) work_ready_.notify_one();
  return opened;
}

// Launch-blocking mode: tasks of several threads finish out of order; completed_ advances
// over the finished prefix only (markers stay exact).
void Stream::finish_blocking(uint64_t sequence) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    uint64_t completed = completed_.load(std::memory_order_relaxed);
    if (sequence == completed + 1) {
      ++completed;
      while (!finished_out_of_order_.empty() && *finished_out_of_order_.begin() == completed + 1) {
        finished_out_of_order_.erase(finished_out_of_order_.begin());
        ++completed;
      }
      completed_.store(completed, std::memory_order_release);
    } else {
      finished_out_of_order_.insert(sequence);
    }
  }
  work_done_.notify_all();
}

void Stream::enqueue(Task task) {
  if (!launch_blocking_) {
    push(Entry{std::move(task), nullptr});
    return;
  }
  if (failed()) throw_failure();  // an abort: nothing runs on the device any more
  const uint64_t sequence = enqueued_.fetch_add(1, std::memory_order_acq_rel) + 1;
  struct Complete {  // also when the task throws: its error reaches the caller directly
    Stream* stream;
    uint64_t sequence;
    ~Complete() { stream->finish_blocking(sequence); }
  } complete{this, sequence};
  task();
}

void Stream::enqueue_marker(Marker marker) {
  if (!launch_blocking_) {
    push(Entry{nullptr, std::move(marker)});
    return;
  }
  const uint64_t sequence = enqueued_.fetch_add(1, std::memory_order_acq_rel) + 1;
  struct Complete {
    Stream* stream;
    uint64_t sequence;
    ~Complete() { stream->finish_blocking(sequence); }
  } complete{this, sequence};
  std::optional<std::string> error = failure();
  marker(error ? &*error : nullptr);
}

void Stream::fail(const std::string& message, bool aborted) noexcept {
  {
    FailureState& state = *failure_state_;
    std::lock_guard<std::mutex> lock(state.mutex);
    if (!state.failed.load(std::memory_order_relaxed)) {
      try {
        state.message = "neuron:" + std::to_string(device_) + " stream " + std::to_string(id_) +
                        (aborted ? " was aborted: " : ": ") + message;
      } catch (...) {
      }
      state.aborted = aborted;
      state.failed.store(true, std::memory_order_release);
    }
  }
  if (aborted) aborted_.store(true, std::memory_order_release);
  { std::lock_guard<std::mutex> lock(mutex_); }
  work_done_.notify_all();
}

void Stream::abort(const std::string& reason) noexcept { fail(reason, /*aborted=*/true); }

std::optional<std::string> Stream::failure() const {
  if (!failed()) return std::nullopt;
  std::lock_guard<std::mutex> lock(failure_state_->mutex);
  return failure_state_->message;
}

void Stream::worker_loop() {
  t_current_worker = this;
  uint64_t taken = 0;  // sequence numbers taken from the queue
  for (;;) {
    const auto poll_until =
        std::chrono::steady_clock::now() + std::chrono::microseconds(idle_poll_us_.load(std::memory_order_relaxed));
    for (unsigned spin = 1; flushed_.load(std::memory_order_acquire) == taken; ++spin) {
      cpu_relax();
      if (spin % 64 != 0) continue;
      const auto now = std::chrono::steady_clock::now();
      const int64_t due = group_due_ns_.load(std::memory_order_relaxed);
      const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
      if (now >= poll_until || (due != 0 && now_ns >= due)) break;
    }
    Entry entry;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      while (queue_.empty() && !stopping_) {
        if (!group_.empty()) {  // Note [Concatenation buffer]: flushed once quiet for its interval
          const int64_t due = group_due_ns_.load(std::memory_order_relaxed);
          if (steady_ns() >= due) {
            flush_locked();
            continue;
          }
          worker_sleeping_.store(true, std::memory_order_relaxed);
          work_ready_.wait_for(lock, std::chrono::nanoseconds(due - steady_ns()));
          worker_sleeping_.store(false, std::memory_order_relaxed);
          continue;
        }
        worker_sleeping_.store(true, std::memory_order_relaxed);
        work_ready_.wait(lock);
        worker_sleeping_.store(false, std::memory_order_relaxed);
      }
      if (queue_.empty()) return;  // stopping, and nothing left to run
      entry = std::move(queue_.front());
      queue_.pop_front();
      taken += entry.count;
    }
    if (entry.task) {
      if (!failed()) {
        try {
          entry.task();
        } catch (...) {
          fail(describe(std::current_exception()), /*aborted=*/false);
        }
      }
    } else if (entry.marker) {
      std::optional<std::string> error = failure();
      try {
        entry.marker(error ? &*error : nullptr);
      } catch (...) {
        fail(describe(std::current_exception()), /*aborted=*/false);
      }
    }
    // What the task holds (buffers, views) is released here, outside the stream's lock:
    // releasing memory may need other locks, and must not wait for this stream.
    const uint64_t count = entry.count;
    entry = Entry();
    finish(count);
  }
}

void Stream::throw_failure() const {
  std::string message;
  bool aborted;
  {
    std::lock_guard<std::mutex> lock(failure_state_->mutex);
    message = failure_state_->message;
    aborted = failure_state_->aborted;
  }
  throw Error(aborted ? ErrorCode::kAborted : ErrorCode::kAsyncFailure,
              (aborted ? "the device failed: " : "an asynchronous task failed on ") + message +
                  (aborted ? std::string()
                           : " (the device stays failed; set NEURON_LAUNCH_BLOCKING=1 to raise the error "
                             "where it happens)"));
}

bool Stream::wait_for(uint64_t marker, std::chrono::milliseconds timeout) {
  // Note [Concatenation buffer]: a wait on a buffered task flushes the buffer.
  if (marker > flushed_.load(std::memory_order_acquire)) flush();
  if (!is_current_worker() && !reached(marker)) {
    host_waits_.fetch_add(1, std::memory_order_relaxed);
    const auto started = std::chrono::steady_clock::now();
    struct Account {
      std::atomic<uint64_t>& total;
      std::chrono::steady_clock::time_point started;
      ~Account() {
        total.fetch_add(uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now() - started).count()),
                        std::memory_order_relaxed);
      }
    } account{host_wait_ns_, started};
    std::unique_lock<std::mutex> lock(mutex_);
    // Registered before the check below; finish() reads wake_at_ after advancing
    // completed_ (both sequentially consistent): either this check sees the task done, or
    // the worker sees the marker and notifies (taking mutex_ first, so not before the wait).
    auto awaited = awaited_.insert(marker);
    wake_at_.store(*awaited_.begin(), std::memory_order_seq_cst);
    auto done = [&] { return completed_.load(std::memory_order_seq_cst) >= marker || aborted(); };
    bool finished;
    if (timeout.count() < 0) {
      work_done_.wait(lock, done);
      finished = true;
    } else {
      finished = work_done_.wait_for(lock, timeout, done);
    }
    awaited_.erase(awaited);
    wake_at_.store(awaited_.empty() ? kNobodyWaits : *awaited_.begin(), std::memory_order_seq_cst);
    if (!finished) return false;
  }
  if (failed()) throw_failure();
  return true;
}

void Stream::synchronize() { wait_for(marker(), std::chrono::milliseconds(-1)); }

}  // namespace neuron_rt
