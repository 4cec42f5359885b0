// Note [Hierarchical collectives]
// A group whose ranks span hosts, with several ranks on at least one host, runs allreduce,
// broadcast and barrier in three steps, as NCCL does across nodes: inside each host over shared
// memory (its ranks' own ShmGroup, zero-copy where their device memory allows), across hosts on
// Gloo between one leader per host (the host's first rank; a Gloo group of the leaders only,
// made by the Python registration), then inside each host again (a broadcast from the leader).
// Allreduce: local allreduce, leaders' allreduce, local broadcast; so each byte crosses the
// network once per host, not once per rank. Broadcast: inside the root's host, then between
// leaders, then inside the other hosts. The steps run as one task on the communication thread
// (CollectiveQueue.h), so the group's one order holds. A rank whose step fails aborts its
// host's shared memory with the error, and a leader also closes its connections to the other
// leaders, so every rank of every host fails at once instead of at the deadline; abort() ends a
// leader's pending step across hosts. The other collectives of such a group run on Gloo over
// the whole group.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "../../runtime/collectives.h"
#include "CollectiveCall.h"
#include "CollectiveQueue.h"

namespace torch_neuron {

// What a group spanning hosts uses (ProcessGroupNeuron::hierarchy()). Thread safety: the
// layout is set by the group's constructor and read-only after; the leaders' group is guarded.
struct Hierarchy {
  std::vector<int> host_of;      // per rank of the group
  std::vector<int> local_index;  // per rank: its index among its host's ranks
  bool leader = false;                           // this rank is its host's first
  std::unique_ptr<neuron_rt::ShmGroup> local;    // this host's ranks; null when alone here
  std::atomic<uint64_t> calls{0};                // collectives run this way (tests check it)

  // The leaders' Gloo group (a leader's; null elsewhere); raises once it was dropped.
  c10::intrusive_ptr<c10d::Backend> leaders() const;
  void set_leaders(c10::intrusive_ptr<c10d::Backend> leaders);
  // After a failure on this leader: closes its connections to the other leaders (their
  // pending and later steps fail at once, as if this process had died) and fails its
  // later collectives with `why`. Gloo's threads are joined elsewhere (one may still be in
  // a transfer until its own timeout).
  void drop_leaders(const std::string& why);
  // Takes the leaders' group (null once dropped), for teardown.
  c10::intrusive_ptr<c10d::Backend> take_leaders();

 private:
  mutable std::mutex mutex_;
  c10::intrusive_ptr<c10d::Backend> leaders_;
  std::string dropped_;  // why, once dropped
};

// The steps of one hierarchical collective, run on the communication thread with the group's
// queue (whether it was aborted) and the Work's deadline.
using HierarchicalSteps = std::function<void(Hierarchy&, const CollectiveQueue&, Clock::time_point deadline)>;

// As CollectiveCall::run_shared, for a group spanning hosts: runs `steps` on the communication
// thread. A failure on a leader drops its connections to the other leaders, so that they fail
// at once too (not at the timeout), and fails its host's shared memory, so that the host's
// other ranks do. `hierarchy` is the group's and outlives the queue's thread.
c10::intrusive_ptr<c10d::Work> run_hierarchical(CollectiveCall& call, Hierarchy& hierarchy, HierarchicalSteps steps,
                                                c10::IValue value, std::vector<at::Tensor> outputs);
c10::intrusive_ptr<c10d::Work> run_hierarchical(CollectiveCall& call, Hierarchy& hierarchy, HierarchicalSteps steps,
                                                const std::vector<at::Tensor>& outputs);

// The steps, for run_hierarchical. Allreduce of contiguous host views: inside the host, across
// hosts, back inside the host.
void all_reduce_across_hosts(Hierarchy& hierarchy, const CollectiveQueue& queue, const std::vector<at::Tensor>& views,
                             neuron_rt::ReduceKind kind, const c10d::ReduceOp& op, Clock::time_point deadline);
// Broadcast of one contiguous host view from rank `root_index` of host `root_host` (this rank's
// host when `root_here`).
void broadcast_across_hosts(Hierarchy& hierarchy, const CollectiveQueue& queue, const std::vector<at::Tensor>& views,
                            int root_host, int root_index, bool root_here, Clock::time_point deadline);
void barrier_across_hosts(Hierarchy& hierarchy, const CollectiveQueue& queue, Clock::time_point deadline);

}  // namespace torch_neuron
