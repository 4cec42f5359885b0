// The order of one process group's collectives: CollectiveQueue.h.
#include "CollectiveQueue.h"

#include <c10/core/Device.h>

#include <utility>

#include "../NeuronCommon.h"

namespace torch_neuron {

CollectiveQueue::~CollectiveQueue() { stop(); }

void CollectiveQueue::enqueue(std::function<void()> task) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!thread_.joinable()) {
    thread_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mutex_);
      for (;;) {
        ready_.wait(lock, [&] { return !inline_running_ && (stopping_ || !tasks_.empty()); });
        if (tasks_.empty()) return;
        std::function<void()> task = std::move(tasks_.front());
        tasks_.pop_front();
        lock.unlock();
        task();  // never throws: it completes its Work with the error
        task = nullptr;
        lock.lock();
        ++finished_;
        done_.notify_all();
      }
    });
  }
  tasks_.push_back(std::move(task));
  ++submitted_;
  ready_.notify_one();
}

void CollectiveQueue::run_inline(std::function<void()> task) {
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return finished_ >= submitted_; });  // the tasks before it (and any inline one)
  inline_running_ = true;
  ++submitted_;
  lock.unlock();
  task();  // never throws: it completes its Work with the error
  task = nullptr;
  lock.lock();
  inline_running_ = false;
  ++finished_;
  done_.notify_all();
  ready_.notify_one();  // tasks queued meanwhile
}

void CollectiveQueue::wait_queued() {
  std::unique_lock<std::mutex> lock(mutex_);
  const uint64_t target = submitted_;
  done_.wait(lock, [&] { return finished_ >= target; });
}

void CollectiveQueue::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_all();
  if (thread_.joinable()) thread_.join();  // its queued collectives end (or time out) first
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
