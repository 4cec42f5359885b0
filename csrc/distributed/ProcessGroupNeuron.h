// Note [ProcessGroupNeuron]
// The c10d backend "neuron": torch.distributed.init_process_group(backend="neuron").
// Equivalent to: ProcessGroupNCCL for CUDA, ProcessGroupHCCL for Ascend.
//
// Transport. When every rank of the group is on this host (runtime/collectives.h,
// host_key()), allreduce, broadcast, the all-gathers, the reduce-scatters and barrier run
// through shared memory (neuron_rt::ShmGroup), on the group's communication thread, on
// contiguous tensors of the dtypes it reduces (NEURON_SIM_SHM_COLLECTIVES=0 turns it off).
// Everything else, and every collective of a group that spans hosts, runs on Gloo
// (c10d::ProcessGroupGloo, shipped in the torch wheel; made by the Python registration with
// the group's store, rank, size and timeout). Both work on zero-copy host views of the neuron
// tensors: device memory is host memory in the simulator, so nothing is staged on the way
// in. A view holds its device buffer (and, under NEURON_SIM_MEMORY_GUARD=1, keeps it open for
// host access) for as long as the transport holds it, so memory a collective still uses is
// never reused. A shared-memory collective first waits for the group's Gloo works issued
// before it, so both paths keep one order.
//
// Ordering. A collective first waits for the work queued on its device's current stream
// (NEURON_LAUNCH_BLOCKING=0), so the transport reads finished inputs and no queued kernel
// still touches its outputs. The collectives of one group run in the order they were issued
// (the Gloo group has one worker thread, the shared-memory path one communication thread),
// as a NCCL group's do on its stream; the step that finishes a result (AVG's division,
// copies out of staging) runs before the next collective starts. Each collective is then
// ordered on the group's communication stream, not on the current stream (Note
// [Stream-ordered collectives], CollectiveCall.h).
//
// Beyond Gloo's own semantics (Reduction.h):
//  - AVG: SUM, then a division by the group size (truncating for integers, as NCCL does);
//  - PREMUL_SUM: each rank scales its own contribution by the factor first (on a copy
//    where the input is not also the output), then SUM;
//  - dtypes Gloo has no type for (int16, uint16/32/64, float8, ...): data-movement
//    collectives move their bytes; reductions raise, naming the dtype;
//  - all-to-all of lists of tensors of different sizes (Gloo takes equal ones): one
//    all-to-all of the concatenated inputs, copied out into the outputs.
//
// Faults. Every error names the collective, the group and this rank. A collective that
// cannot finish fails within the group's timeout: Gloo times out each transfer, and wait()
// gives up at the Work's deadline (start + timeout) with DistBackendError. A peer that dies
// closes its connections, which fails the peers' collectives at once. A wait() that gave up
// does not stop Gloo's op: the outputs are undefined until the op ends; when it does, its
// finishing step still runs, so they then hold the result the peers got.
//
// Across hosts: Note [Hierarchical collectives] (HierarchicalCollectives.h).
//
// The pieces, as in ProcessGroupGloo/ProcessGroupNCCL: NeuronWork.h (the Work of one
// collective), CollectiveCall.h (the call path), CollectiveQueue.h (the group's order),
// Reduction.h (the reduction table), HierarchicalCollectives.h (the algorithm across hosts),
// CompletionThreads.h (the process-wide completion and release threads, and the exit).
//
// Thread safety: as c10d requires, every rank issues the group's collectives in the same
// order; a Work may be waited for from any thread.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "CollectiveQueue.h"
#include "CompletionThreads.h"  // quiesce_collectives_for_exit(), for ExitQuiesce.cpp

namespace neuron_rt {
class ShmGroup;
}

namespace torch_neuron {

class CollectiveCall;
struct Hierarchy;

class ProcessGroupNeuron final : public c10d::Backend {
 public:
  // `transport`: a ProcessGroupGloo over the group's store, rank and size. `store`: that
  // store, for the shared-memory rendezvous (a collective: every rank makes its group).
  // `device`: the process's core (used by barrier, and where a collective names no tensor).
  // `hosts`: the host of each rank (numbered in order of first appearance; empty: unknown, the
  // shared-memory rendezvous finds out whether they share one); `leaders`: on the first rank of
  // each host of a group spanning hosts, a ProcessGroupGloo of those ranks (in host order), for
  // Note [Hierarchical collectives]; null elsewhere.
  ProcessGroupNeuron(c10::intrusive_ptr<c10d::Backend> transport, c10::intrusive_ptr<c10d::Store> store, int rank,
                     int size, std::chrono::milliseconds timeout, c10::DeviceIndex device,
                     std::vector<int> hosts = {}, c10::intrusive_ptr<c10d::Backend> leaders = {});
  ~ProcessGroupNeuron() override;

  const std::string getBackendName() const override { return "neuron"; }
  c10::intrusive_ptr<Options> getBackendOptions() override { return options_; }
  void setTimeout(std::chrono::milliseconds timeout) override;
  c10::DeviceIndex device() const { return device_; }
  std::chrono::milliseconds timeout() const { return options_->timeout; }
  // "allreduce on neuron process group '0' (default_pg), rank 1 of 2"
  std::string describe(const std::string& collective) const;
  // Whether the ranks share this host and talk through shared memory (else: Gloo only).
  bool uses_shared_memory() const { return shm_ != nullptr; }
  // Collectives that went zero-copy so far; -1 when the group cannot (collectives.h).
  int64_t zero_copy_calls() const;
  // Note [Hierarchical collectives]: what a group spanning hosts uses; null otherwise.
  Hierarchy* hierarchy() const { return hierarchy_.get(); }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& output_lists,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  void setSequenceNumberForGroup() override;
  uint64_t getSequenceNumberForGroup() override;
  // Ends every collective still pending, on both transports (Gloo's own abort does nothing),
  // and fails every later call, as NCCL's communicator abort does.
  void abort() override;
  void shutdown() override;

 private:
  // The call of collective `name` (`timeout`: the call's; not positive: the group's;
  // `caller_waits`: CollectiveCall's).
  CollectiveCall call(const char* name, c10d::OpType type, std::chrono::milliseconds timeout,
                      bool caller_waits = false);
  // The same with the caller's options: their timeout, and whether the caller waits (not asyncOp).
  template <typename CallOptions>
  CollectiveCall call(const char* name, c10d::OpType type, const CallOptions& opts);
  // allreduce and allreduce_coalesced: `coalesced` reduces every tensor on its own (else
  // several tensors are reduced together, Gloo's multi-device form).
  c10::intrusive_ptr<c10d::Work> all_reduce(CollectiveCall& call, std::vector<at::Tensor>& tensors,
                                            const c10d::AllreduceOptions& opts, bool coalesced);

  c10::intrusive_ptr<c10d::Backend> transport_;
  c10::intrusive_ptr<Options> options_;
  c10::DeviceIndex device_;
  bool spans_hosts_ = false;  // ranks on several hosts (instances): the device clock's link is EFA
  std::unique_ptr<neuron_rt::ShmGroup> shm_;  // null: ranks on several hosts, or turned off
  std::unique_ptr<Hierarchy> hierarchy_;      // ranks on several hosts, some sharing one
  CollectiveQueue queue_;
};

}  // namespace torch_neuron
