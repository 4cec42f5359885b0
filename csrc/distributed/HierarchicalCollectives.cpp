// The collectives of a group spanning hosts: Note [Hierarchical collectives] in
// HierarchicalCollectives.h.
#include "HierarchicalCollectives.h"

#include <algorithm>
#include <condition_variable>
#include <thread>
#include <utility>

#include "../../runtime/error.h"
#include "Reduction.h"

namespace torch_neuron {
namespace {

// Destroys a Gloo group on a thread of its own: destroying one joins its thread, which may be
// in a transfer until Gloo's own timeout.
void destroy_elsewhere(c10::intrusive_ptr<c10d::Backend> group) {
  if (group) std::thread([group = std::move(group)]() mutable { group.reset(); }).detach();
}

// The leaders' Gloo step, on a host's first rank (nothing elsewhere): `start` issues the Gloo
// works with the time left before `deadline`, and they are waited for here, until they end,
// the deadline passes or the group is aborted (Gloo's wait would hold the communication
// thread, and the group's teardown, until Gloo's own timeout).
void across_hosts(Hierarchy& hierarchy, const CollectiveQueue& queue, Clock::time_point deadline,
                  const std::function<std::vector<c10::intrusive_ptr<c10d::Work>>(c10d::Backend&, Milliseconds)>& start) {
  if (!hierarchy.leader) return;
  c10::intrusive_ptr<c10d::Backend> leaders = hierarchy.leaders();
  // This thread must not drop the last reference (abort() or a failure took the group's).
  struct NotLast {
    c10::intrusive_ptr<c10d::Backend>& group;
    ~NotLast() {
      if (group && group.use_count() == 1) destroy_elsewhere(std::move(group));
    }
  } not_last{leaders};
  const auto left = std::max(Milliseconds(1), std::chrono::duration_cast<Milliseconds>(deadline - Clock::now()));
  for (auto& work : start(*leaders, left)) {
    struct Done {
      std::mutex mutex;
      std::condition_variable cv;
      bool done = false;
    };
    auto done = std::make_shared<Done>();
    work->getFuture()->addCallback([done](c10::ivalue::Future&) {
      std::lock_guard<std::mutex> lock(done->mutex);
      done->done = true;
      done->cv.notify_all();
    });
    std::unique_lock<std::mutex> lock(done->mutex);
    while (!done->done) {
      if (queue.aborted()) throw neuron_rt::Error(neuron_rt::ErrorCode::kAborted, "aborted in the step across hosts");
      if (Clock::now() >= deadline) {
        throw neuron_rt::Error(neuron_rt::ErrorCode::kTimeout, "the step across hosts (Gloo, between the hosts' first "
                                                               "ranks) did not end within the group's timeout");
      }
      done->cv.wait_for(lock, Milliseconds(10));
    }
    lock.unlock();
    work->wait();  // ended: raises its error
  }
}

}  // namespace

c10::intrusive_ptr<c10d::Backend> Hierarchy::leaders() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!dropped_.empty()) {
    throw neuron_rt::Error(neuron_rt::ErrorCode::kAborted, "the group failed earlier (" + dropped_ + ")");
  }
  return leaders_;
}

void Hierarchy::set_leaders(c10::intrusive_ptr<c10d::Backend> leaders) {
  std::lock_guard<std::mutex> lock(mutex_);
  leaders_ = std::move(leaders);
}

c10::intrusive_ptr<c10d::Backend> Hierarchy::take_leaders() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::move(leaders_);
}

void Hierarchy::drop_leaders(const std::string& why) {
  c10::intrusive_ptr<c10d::Backend> leaders;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (dropped_.empty()) dropped_ = why.empty() ? "unknown error" : why;
    leaders = std::move(leaders_);
  }
  // Destroying it closes its connections once Gloo's thread is free.
  destroy_elsewhere(std::move(leaders));
}

c10::intrusive_ptr<c10d::Work> run_hierarchical(CollectiveCall& call, Hierarchy& hierarchy, HierarchicalSteps steps,
                                                c10::IValue value, std::vector<at::Tensor> outputs) {
  const CollectiveQueue& queue = call.queue();
  const Clock::time_point deadline = call.deadline();
  const int rank = call.rank();
  return call.run_queued([&hierarchy, &queue, deadline, rank, steps = std::move(steps)] {
    hierarchy.calls.fetch_add(1, std::memory_order_relaxed);
    try {
      steps(hierarchy, queue, deadline);
    } catch (...) {
      const std::string why = message_of(std::current_exception());
      if (hierarchy.leader) hierarchy.drop_leaders(why);
      if (hierarchy.local) hierarchy.local->abort("rank " + std::to_string(rank) + " failed: " + why);
      throw;
    }
  }, hierarchy.local.get(), std::move(value), std::move(outputs));
}

c10::intrusive_ptr<c10d::Work> run_hierarchical(CollectiveCall& call, Hierarchy& hierarchy, HierarchicalSteps steps,
                                                const std::vector<at::Tensor>& outputs) {
  return run_hierarchical(call, hierarchy, std::move(steps), c10::IValue(outputs), outputs);
}

void all_reduce_across_hosts(Hierarchy& hierarchy, const CollectiveQueue& queue, const std::vector<at::Tensor>& views,
                             neuron_rt::ReduceKind kind, const c10d::ReduceOp& op, Clock::time_point deadline) {
  if (hierarchy.local) {
    for (const auto& view : views) {
      hierarchy.local->all_reduce(view.data_ptr(), static_cast<size_t>(view.numel()), *shared_element(view.scalar_type()),
                                  kind);
    }
  }
  across_hosts(hierarchy, queue, deadline, [&](c10d::Backend& leaders, Milliseconds left) {
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    for (const auto& view : views) {  // Gloo runs them in order (one thread)
      c10d::AllreduceOptions options;
      options.reduceOp = op;
      options.timeout = left;
      std::vector<at::Tensor> one{view};
      works.push_back(leaders.allreduce(one, options));
    }
    return works;
  });
  if (hierarchy.local) {
    for (const auto& view : views) hierarchy.local->broadcast(view.data_ptr(), view.nbytes(), 0);
  }
}

void broadcast_across_hosts(Hierarchy& hierarchy, const CollectiveQueue& queue, const std::vector<at::Tensor>& views,
                            int root_host, int root_index, bool root_here, Clock::time_point deadline) {
  const at::Tensor& view = views[0];
  if (root_here && hierarchy.local) hierarchy.local->broadcast(view.data_ptr(), view.nbytes(), root_index);
  across_hosts(hierarchy, queue, deadline, [&](c10d::Backend& leaders, Milliseconds left) {
    c10d::BroadcastOptions options;
    options.rootRank = root_host;
    options.timeout = left;
    std::vector<at::Tensor> moved = movable(views);
    return std::vector<c10::intrusive_ptr<c10d::Work>>{leaders.broadcast(moved, options)};
  });
  if (!root_here && hierarchy.local) hierarchy.local->broadcast(view.data_ptr(), view.nbytes(), 0);
}

void barrier_across_hosts(Hierarchy& hierarchy, const CollectiveQueue& queue, Clock::time_point deadline) {
  if (hierarchy.local) hierarchy.local->barrier();
  across_hosts(hierarchy, queue, deadline, [&](c10d::Backend& leaders, Milliseconds left) {
    c10d::BarrierOptions options;
    options.timeout = left;
    return std::vector<c10::intrusive_ptr<c10d::Work>>{leaders.barrier(options)};
  });
  if (hierarchy.local) hierarchy.local->barrier();
}

}  // namespace torch_neuron
