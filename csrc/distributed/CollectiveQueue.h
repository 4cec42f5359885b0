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
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace torch_neuron {

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
  // queued before it. `task` must not throw: it completes its Work with its error.
  void enqueue(std::function<void()> task);
  // Runs `task` on the calling thread, in the same order: after the tasks queued before it, and
  // before any queued after it starts. For a caller that would block until the task ends anyway
  // (launch-blocking mode, a synchronous collective): no hop to the communication thread and
  // back, two thread wake-ups per collective. `task` must not throw.
  void run_inline(std::function<void()> task);
  // Blocks until the tasks queued so far have run (a Gloo collective waits for those issued
  // before it).
  void wait_queued();
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
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable ready_, done_;
  std::deque<std::function<void()>> tasks_;
  uint64_t submitted_ = 0, finished_ = 0;
  bool stopping_ = false;
  bool inline_running_ = false;  // a task runs on a caller's thread (run_inline): the thread waits

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
