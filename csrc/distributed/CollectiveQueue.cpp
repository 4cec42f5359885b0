// The order of one process group's collectives: CollectiveQueue.h.
#include "CollectiveQueue.h"

#include <c10/core/Device.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdlib>

#include <utility>

#include "../NeuronCommon.h"

namespace torch_neuron {

// ---- TaskLane: Note [Waiters run their collectives] ----------------------------------------

std::chrono::microseconds TaskLane::grace_default() {
  if (const char* setting = std::getenv("NEURON_SIM_COLLECTIVE_GRACE_US")) {
    char* end = nullptr;
    const long value = std::strtol(setting, &end, 10);
    TORCH_CHECK_VALUE(end != setting && *end == '\0' && value >= 0, "NEURON_SIM_COLLECTIVE_GRACE_US='", setting,
                      "': give a number of microseconds, 0 or more");
    return std::chrono::microseconds(value);
  }
  return runtime().shared_cores() ? std::chrono::microseconds(500) : std::chrono::microseconds(0);
}

TaskLane::~TaskLane() { stop(); }

uint64_t TaskLane::enqueue(std::function<void()> task) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!thread_.joinable()) {
    thread_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mutex_);
      for (;;) {
        ready_.wait(lock, [&] { return !running_ && (stopping_ || !tasks_.empty()); });
        if (tasks_.empty()) return;  // stopping, and every task has run
        const TimePoint due = tasks_.front().due;
        if (!stopping_ && std::chrono::steady_clock::now() < due) {
          ready_.wait_until(lock, due);  // a waiter may take it meanwhile
          continue;
        }
        run_front(lock);
      }
    });
  }
  tasks_.push_back({std::move(task), std::chrono::steady_clock::now() + grace_});
  ready_.notify_one();
  return ++submitted_;
}

namespace {
// A task runs the collective's own CPU ops (staging copies, AVG's division) on host views: on a
// caller's thread as on the communication thread, with no Python dispatch mode seeing them (a
// wait() is not an op, so a mode active around it would).
void run_task(std::function<void()>& task) {
  c10::impl::ExcludeDispatchKeyGuard no_python(
      c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot, c10::DispatchKey::PreDispatch}));
  task();  // never throws: it completes its Work with the error
  task = nullptr;
}
}  // namespace

void TaskLane::run_locked(std::unique_lock<std::mutex>& lock, std::function<void()>& task) {
  running_ = true;
  lock.unlock();
  run_task(task);
  lock.lock();
  running_ = false;
  ++finished_;
  done_.notify_all();
  ready_.notify_one();  // the next task, queued meanwhile
}

void TaskLane::run_front(std::unique_lock<std::mutex>& lock) {
  std::function<void()> task = std::move(tasks_.front().task);
  tasks_.pop_front();
  run_locked(lock, task);
}

void TaskLane::run_inline(std::function<void()> task) {
  std::unique_lock<std::mutex> lock(mutex_);
  run_queued_until(lock, submitted_);  // the tasks before it
  done_.wait(lock, [&] { return !running_; });
  ++submitted_;
  run_locked(lock, task);
}

void TaskLane::run_queued_until(std::unique_lock<std::mutex>& lock, uint64_t ticket) {
  while (finished_ < ticket) {
    if (!running_ && !tasks_.empty()) {
      run_front(lock);  // the next in order is at or before `ticket`: finished_ < ticket
    } else {
      done_.wait(lock);
    }
  }
}

void TaskLane::run_until(uint64_t ticket) {
  std::unique_lock<std::mutex> lock(mutex_);
  run_queued_until(lock, ticket);
}

void TaskLane::wait_queued() {
  std::unique_lock<std::mutex> lock(mutex_);
  run_queued_until(lock, submitted_);
}

void TaskLane::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_all();
  if (thread_.joinable()) thread_.join();  // its queued collectives end (or time out) first
}

// ---- CollectiveQueue ------------------------------------------------------------------------

CollectiveQueue::~CollectiveQueue() { stop(); }

void CollectiveQueue::stop() {
  lane_->stop();
  last_transport_work_.reset();
}

void CollectiveQueue::note_transport_work(const c10::intrusive_ptr<c10d::Work>& work) {
  if (!has_shared_path_) return;
  std::lock_guard<std::mutex> lock(transport_mutex_);
  last_transport_work_ = work;
}

void CollectiveQueue::wait_transport_works() {
  c10::intrusive_ptr<c10d::Work> last;
  {
    std::lock_guard<std::mutex> lock(transport_mutex_);
    last = std::move(last_transport_work_);
  }
  if (!last) return;
  try {
    last->wait();  // Gloo runs its works in order: the last one ending means all have
  } catch (...) {
    // its error belongs to its own Work (and its waiter)
  }
}

void CollectiveQueue::track(const c10::intrusive_ptr<c10d::Work>& work) {
  std::lock_guard<std::mutex> lock(works_mutex_);
  if (in_flight_.size() >= 64) {  // forget the ended ones now and then
    std::vector<c10::weak_intrusive_ptr<c10d::Work>> live;
    for (auto& weak : in_flight_) {
      auto strong = weak.lock();
      if (strong && !strong->isCompleted()) live.push_back(std::move(weak));
    }
    in_flight_ = std::move(live);
  }
  in_flight_.emplace_back(work);
}

void CollectiveQueue::abort_tracked() {
  std::vector<c10::weak_intrusive_ptr<c10d::Work>> pending;
  {
    std::lock_guard<std::mutex> lock(works_mutex_);
    pending.swap(in_flight_);
  }
  for (auto& weak : pending) {
    if (auto work = weak.lock()) work->abort();
  }
}

c10::Stream CollectiveQueue::comm_stream(c10::DeviceIndex device) {
  std::lock_guard<std::mutex> lock(streams_mutex_);
  auto found = comm_streams_.find(device);
  if (found == comm_streams_.end()) {
    found = comm_streams_.emplace(device, NEURON_RT_CALL(runtime().next_comm_stream(device))).first;
  }
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kNeuron, device), found->second);
}

}  // namespace torch_neuron
