// CollectiveQueue: the order of one process group's collectives (what a NCCL communicator's
// stream and work list are to ProcessGroupNCCL). The group owns it and hands it to each call
// (CollectiveCall.h); it knows nothing of the group, so the call, the hierarchy and the group
// stand on it and not on one another. It holds:
//  - the communication thread, which runs the collectives that do not go to Gloo (shared
//    memory, Note [Hierarchical collectives]) one at a time in the order issued;
//  - the last work handed to Gloo, which a collective on the communication thread waits for
//    first (Gloo runs its works in order on its one thread), so both paths keep one order;
//  - the works not yet complete, for abort(), and whether abort() was called;
//  - the group's communication stream on each device (Note [Stream-ordered collectives]).
//
// Thread safety: every member may be called from any thread, except set_has_shared_path()
// (the group's constructor, before any collective) and stop() (the group's destructor).
#pragma once

#include <c10/core/Stream.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace torch_neuron {

// Note [Waiters run their collectives]
// An asynchronous collective (every functional collective: DTensor's redistributions, a compiled
// graph's all-reduces) is queued for the communication thread, and its caller usually waits for
// it a moment later. Handing it over costs two thread wake-ups; where the host's cores are fewer
// than two per local rank (torchrun's LOCAL_WORLD_SIZE), the communication thread also takes a
// core the ranks' host threads are using. So a wait() for a collective the communication thread
// has not started runs it (and those queued before it, in order) on the waiting thread, and
// there the communication thread leaves a task queued for a grace period before it takes it
// (NEURON_SIM_COLLECTIVE_GRACE_US; default 500 us on shared cores (Note [Shared cores] in
// Launch.h), else 0): a caller that waits
// within it saves both hops; one that does not (a bucket of DDP's gradients, a wait after other
// work) finds it started by the thread, in the order issued, as before. A synchronous
// collective, and one on Gloo, first run the tasks queued before them the same way. One task
// runs at a time, on whichever thread, in the order queued, with no Python dispatch mode
// seeing its CPU ops; a wait with its own timeout does not run tasks (the task may block until
// the collective's deadline).
class TaskLane {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  explicit TaskLane(std::chrono::microseconds grace) : grace_(grace) {}
  TaskLane(const TaskLane&) = delete;
  TaskLane& operator=(const TaskLane&) = delete;
  ~TaskLane();  // stop()

  // The grace period of the setting and this host (Note [Waiters run their collectives]).
  static std::chrono::microseconds grace_default();

  // Queues `task` (which must not throw) and returns its ticket; the communication thread
  // starts with the first task.
  uint64_t enqueue(std::function<void()> task);
  // Runs `task` on the calling thread, after the tasks before it (those nobody has started run
  // here first) and before those after it.
  void run_inline(std::function<void()> task);
  // Runs the tasks up to `ticket` that nobody has started on the calling thread, in order, and
  // returns once `ticket` has run.
  void run_until(uint64_t ticket);
  // Returns once the tasks queued so far have run (those nobody has started run here).
  void wait_queued();
  // Ends the thread once every task has run (tasks run by a waiter included).
  void stop();

 private:
  struct Queued {
    std::function<void()> task;
    TimePoint due;  // when the communication thread may take it
  };
  // Takes the front task, runs it with the lock released, counts it. The lock is held on entry
  // and on return.
  void run_front(std::unique_lock<std::mutex>& lock);
  // Runs `task` (the lock held on entry and on return, released while it runs) and counts it finished.
  void run_locked(std::unique_lock<std::mutex>& lock, std::function<void()>& task);
  // run_until() with the lock held.
  void run_queued_until(std::unique_lock<std::mutex>& lock, uint64_t ticket);

  const std::chrono::microseconds grace_;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable ready_, done_;
  std::deque<Queued> tasks_;
  uint64_t submitted_ = 0, finished_ = 0;
  bool stopping_ = false;
  bool running_ = false;  // one task runs (on the thread or a caller's)
};

class CollectiveQueue {
 public:
  CollectiveQueue() = default;
  CollectiveQueue(const CollectiveQueue&) = delete;
  CollectiveQueue& operator=(const CollectiveQueue&) = delete;
  ~CollectiveQueue();  // stop()

  // Whether the group runs collectives on the communication thread at all (shared memory,
  // the hierarchy); only then is the last Gloo work kept for them to wait for.
  void set_has_shared_path(bool has) { has_shared_path_ = has; }

  // Runs `task` on the communication thread (started by the first task) after the tasks
  // queued before it, or on a thread waiting for it (Note [Waiters run their collectives]):
  // returns its ticket for lane()->run_until(). `task` must not throw: it completes its Work
  // with its error.
  uint64_t enqueue(std::function<void()> task) { return lane_->enqueue(std::move(task)); }
  // The tasks' lane, which a Work keeps to run its task when waited for.
  const std::shared_ptr<TaskLane>& lane() const { return lane_; }
  // Runs `task` on the calling thread, in the same order: after the tasks queued before it, and
  // before any queued after it starts. For a caller that would block until the task ends anyway
  // (launch-blocking mode, a synchronous collective): no hop to the communication thread and
  // back, two thread wake-ups per collective. `task` must not throw.
  void run_inline(std::function<void()> task) { lane_->run_inline(std::move(task)); }
  // Blocks until the tasks queued so far have run (a Gloo collective waits for those issued
  // before it).
  void wait_queued() { lane_->wait_queued(); }
  // Ends the communication thread once the tasks queued have run (or timed out), and drops
  // the last Gloo work. The group's destructor calls it before it drops the transports.
  void stop();

  // The last work handed to Gloo (not send/recv: a preposted recv must not hold up
  // collectives), and a wait for it; the wait ignores its error, which belongs to its own Work.
  void note_transport_work(const c10::intrusive_ptr<c10d::Work>& work);
  void wait_transport_works();

  // Keeps a weak reference to `work` until it completed, for abort_tracked().
  void track(const c10::intrusive_ptr<c10d::Work>& work);
  // Later calls fail (CollectiveCall::run), and the step across hosts gives up.
  void mark_aborted() { aborted_.store(true); }
  bool aborted() const { return aborted_.load(); }
  // Aborts every work tracked and not yet released.
  void abort_tracked();

  // The stream on `device` that waits for this group's collectives and on which their futures
  // record their events: one of the device's communication streams, picked at the group's
  // first collective there.
  c10::Stream comm_stream(c10::DeviceIndex device);

 private:
  std::shared_ptr<TaskLane> lane_ = std::make_shared<TaskLane>(TaskLane::grace_default());

  bool has_shared_path_ = false;
  std::mutex transport_mutex_;
  c10::intrusive_ptr<c10d::Work> last_transport_work_;

  std::mutex works_mutex_;
  std::vector<c10::weak_intrusive_ptr<c10d::Work>> in_flight_;
  std::atomic<bool> aborted_{false};

  std::mutex streams_mutex_;
  std::map<c10::DeviceIndex, int> comm_streams_;
};

}  // namespace torch_neuron
