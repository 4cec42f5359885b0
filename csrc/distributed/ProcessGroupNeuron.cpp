// The c10d backend "neuron": Note [ProcessGroupNeuron] in ProcessGroupNeuron.h. This file has
// the group's constructor, destructor and collectives; each collective takes its transport
// (shared memory, the hierarchy or Gloo) and hands its host views to it through a
// CollectiveCall.
#include "ProcessGroupNeuron.h"

#include <pybind11/pybind11.h>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <c10/util/accumulate.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../../runtime/collectives.h"
#include "../../runtime/error.h"
#include "../NeuronCommon.h"
#include "CollectiveCall.h"
#include "HierarchicalCollectives.h"
#include "Reduction.h"

namespace torch_neuron {
namespace {

// The shared-memory rendezvous over the group's c10d Store (torchrun's, prefixed per group).
class StoreRendezvous final : public neuron_rt::Rendezvous {
 public:
  explicit StoreRendezvous(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}
  void set(const std::string& key, const std::string& value) override {
    store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
  }
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    try {
      store_->wait({key}, timeout);
    } catch (const c10::Error& e) {
      throw neuron_rt::Error(neuron_rt::ErrorCode::kTimeout, "the store has no '" + key + "' after " +
                                                                 std::to_string(timeout.count()) + " ms: " +
                                                                 e.what_without_backtrace());
    }
    const std::vector<uint8_t> value = store_->get(key);
    return std::string(value.begin(), value.end());
  }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

std::vector<at::Tensor> flatten(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<at::Tensor> flat;
  for (const auto& list : lists) flat.insert(flat.end(), list.begin(), list.end());
  return flat;
}

// A collective into lists of outputs that Gloo runs as is (gather, allgather_coalesced):
// `issue(gloo, output views, input views)` hands Gloo the movable host views; the Work's value
// is the lists, its result() their tensors.
using Views = std::vector<at::Tensor>;
using ListsOfViews = std::vector<std::vector<at::Tensor>>;
template <typename Issue>
c10::intrusive_ptr<c10d::Work> into_lists(CollectiveCall& call, c10d::Backend& transport, const ListsOfViews& outputs,
                                          const Views& inputs, const Issue& issue) {
  auto output_views = movable(call.host(outputs));
  auto input_views = movable(call.host(inputs));
  auto work = issue(call.transport(transport), output_views, input_views);
  return call.start(work, c10::IValue(outputs), flatten(outputs));
}

// The tensors a reduction hands the transport, and the steps that finish its result.
// `views`: this rank's tensors, its contribution and, when it `receives` the result (reduce's
// other ranks only contribute), where the result goes. PREMUL_SUM scales copies, never the
// caller's tensors (a transport that refuses the call leaves them as they were), and copies
// the result back; AVG divides the result by the group size.
std::vector<at::Tensor> reduction_inputs(CollectiveCall& call, const Reduction& reduction,
                                         const std::vector<at::Tensor>& views, bool receives, int size) {
  call.ready();  // the steps below read the tensors
  std::vector<at::Tensor> sent = views;
  if (reduction.premultiply) {
    sent = reduction.scaled(views);
    if (receives) {
      call.finally([views, sent] {
        for (size_t i = 0; i < views.size(); ++i) views[i].copy_(sent[i]);
      });
    }
  }
  if (reduction.average && receives) call.finally(averaging(views, size));
  return sent;
}

// Reduce-scatter as an allreduce of staging copies, each output taking its chunk. Gloo's own
// reduce-scatter works have no future: their result could only be finished (AVG, the
// copy-out) after the transport had moved on to the next collective. `stages[i]`: output i's
// inputs, flattened in rank order, a fresh copy (the allreduce writes it); `offsets[i]`:
// where this rank's chunk starts in it. (Twice the traffic of a ring reduce-scatter.)
c10::intrusive_ptr<c10d::Work> reduce_scatter_by_allreduce(CollectiveCall& call, c10d::Backend& transport,
                                                           const Reduction& reduction, std::vector<at::Tensor> stages,
                                                           std::vector<at::Tensor> output_views,
                                                           std::vector<int64_t> offsets,
                                                           const c10d::ReduceScatterOptions& opts,
                                                           const std::vector<at::Tensor>& outputs, int size) {
  if (reduction.premultiply) reduction.scale_in_place(stages);
  call.finally([stages, output_views, offsets] {
    for (size_t i = 0; i < output_views.size(); ++i) {
      output_views[i].copy_(stages[i].narrow(0, offsets[i], output_views[i].numel()).view(output_views[i].sizes()));
    }
  });
  if (reduction.average) call.finally(averaging(output_views, size));
  c10d::AllreduceCoalescedOptions allreduce_opts;
  allreduce_opts.reduceOp = reduction.transport_op;
  allreduce_opts.timeout = opts.timeout;
  return call.start(call.transport(transport).allreduce_coalesced(stages, allreduce_opts), outputs);
}

// Each input holds the group's inputs for its output, concatenated in rank order.
c10::intrusive_ptr<c10d::Work> reduce_scatter_tensors(CollectiveCall& call, c10d::Backend& transport,
                                                      neuron_rt::ShmGroup* shm, int rank, int size,
                                                      const std::vector<at::Tensor>& outputs,
                                                      const std::vector<at::Tensor>& inputs,
                                                      const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(inputs.size() == outputs.size(), "one input per output, got ", inputs.size(), " inputs for ",
              outputs.size(), " outputs");
  auto output_views = call.host(outputs);
  auto input_views = call.host(inputs);
  const Reduction reduction = plan_reduction(opts.reduceOp, inputs);
  call.ready();
  for (size_t i = 0; i < input_views.size(); ++i) {
    TORCH_CHECK(input_views[i].numel() == output_views[i].numel() * size, "the input has ", input_views[i].numel(),
                " elements; it must have the output's ", output_views[i].numel(), " times the group size ", size);
    TORCH_CHECK(input_views[i].scalar_type() == output_views[i].scalar_type(), "a ",
                dtype_name(input_views[i].scalar_type()), " input for a ", dtype_name(output_views[i].scalar_type()),
                " output: the dtypes must match");
  }
  if (shm && shared_reduces(input_views, reduction.transport_op)) {
    std::vector<at::Tensor> sent = call.staged(input_views, /*receives=*/false);
    if (reduction.premultiply) sent = reduction.scaled(input_views);
    if (reduction.average) call.finally(averaging(output_views, size));  // after the copies back
    output_views = call.staged(output_views, /*receives=*/true);
    const auto kind = *shared_reduction(reduction.transport_op);
    return call.run_shared(*shm, [sent, output_views, kind](neuron_rt::ShmGroup& group) {
      for (size_t i = 0; i < sent.size(); ++i) {
        group.reduce_scatter(sent[i].data_ptr(), output_views[i].data_ptr(), static_cast<size_t>(output_views[i].numel()),
                             *shared_element(sent[i].scalar_type()), kind);
      }
    }, outputs);
  }
  std::vector<at::Tensor> stages;
  std::vector<int64_t> offsets;
  for (size_t i = 0; i < input_views.size(); ++i) {  // checked above
    stages.push_back(input_views[i].reshape({-1}).clone(at::MemoryFormat::Contiguous));
    offsets.push_back(output_views[i].numel() * rank);
  }
  return reduce_scatter_by_allreduce(call, transport, reduction, std::move(stages), std::move(output_views),
                                     std::move(offsets), opts, outputs, size);
}

// Each output receives the group's inputs, concatenated in rank order.
c10::intrusive_ptr<c10d::Work> all_gather_tensors(CollectiveCall& call, c10d::Backend& transport_backend,
                                                  neuron_rt::ShmGroup* shm, int size,
                                                  const std::vector<at::Tensor>& outputs,
                                                  const std::vector<at::Tensor>& inputs,
                                                  const c10d::AllgatherOptions& opts) {
  auto output_views = call.host(outputs);
  auto input_views = call.host(inputs);
  bool even = shm && output_views.size() == input_views.size();
  for (size_t i = 0; even && i < output_views.size(); ++i) {
    even = output_views[i].scalar_type() == input_views[i].scalar_type() &&
           output_views[i].numel() == input_views[i].numel() * size;
  }
  if (even) {
    // in place (an input that is a block of its output) stays in place when contiguous
    auto outputs_here = call.staged(output_views, /*receives=*/true);
    auto inputs_here = call.staged(input_views, /*receives=*/false);
    return call.run_shared(*shm, [input_views = inputs_here, output_views = outputs_here](neuron_rt::ShmGroup& group) {
      for (size_t i = 0; i < input_views.size(); ++i) {
        group.all_gather(input_views[i].data_ptr(), output_views[i].data_ptr(), input_views[i].nbytes());
      }
    }, outputs);
  }
  // Gloo wants the output shaped [n * input.size(0), ...]; NCCL (and Accelerate's gather,
  // which passes a flat output) only needs the element count.
  for (size_t i = 0; i < output_views.size() && i < input_views.size(); ++i) {
    const at::Tensor& in = input_views[i];
    if (output_views[i].is_contiguous() && output_views[i].numel() == in.numel() * size) {
      std::vector<int64_t> shape = in.sizes().vec();
      if (shape.empty()) shape.push_back(1);
      shape[0] *= size;
      output_views[i] = output_views[i].view(shape);
    }
  }
  output_views = movable(std::move(output_views));
  input_views = movable(std::move(input_views));
  auto& transport = call.transport(transport_backend);
  if (outputs.size() == 1) return call.start(transport._allgather_base(output_views[0], input_views[0], opts), outputs);
  return call.start(transport.allgather_into_tensor_coalesced(output_views, input_views, opts), outputs);
}

}  // namespace

ProcessGroupNeuron::ProcessGroupNeuron(c10::intrusive_ptr<c10d::Backend> transport,
                                       c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                                       std::chrono::milliseconds timeout, c10::DeviceIndex device,
                                       std::vector<int> hosts, c10::intrusive_ptr<c10d::Backend> leaders)
    : c10d::Backend(rank, size),
      transport_(std::move(transport)),
      options_(c10::make_intrusive<Options>("neuron", timeout)),
      device_(device) {
  init();
  spans_hosts_ = !hosts.empty() && *std::max_element(hosts.begin(), hosts.end()) > 0;
  const char* enabled = std::getenv("NEURON_SIM_SHM_COLLECTIVES");
  if (store && !(enabled && std::string(enabled) == "0")) {
    neuron_rt::ShmGroup::Options shm_options;
    shm_options.timeout = timeout;
    if (const char* slot = std::getenv("NEURON_SIM_SHM_SLOT_BYTES")) {
      char* end = nullptr;
      const unsigned long long bytes = std::strtoull(slot, &end, 10);
      TORCH_CHECK(end && *end == '\0' && bytes > 0, "NEURON_SIM_SHM_SLOT_BYTES=", slot,
                  ": give a number of bytes (a multiple of 64, at least 4096)");
      shm_options.slot_bytes = bytes;
    }
    neuron_rt::DeviceMemory& memory = runtime().memory(device);
    if (memory.backing() == neuron_rt::MemoryBacking::kSharedFile) {  // zero-copy between the ranks' HBM
      shm_options.memory_fd = memory.export_fd();
      shm_options.memory_base = memory.range_start();
      shm_options.memory_length = memory.range_bytes();
    }
    StoreRendezvous rendezvous(store);
    TORCH_CHECK(hosts.empty() || static_cast<int>(hosts.size()) == size, "neuron process group: ", hosts.size(),
                " hosts given for ", size, " ranks");
    const int host_count = hosts.empty() ? 1 : *std::max_element(hosts.begin(), hosts.end()) + 1;
    shm_options.same_host = !hosts.empty();  // the hosts were exchanged already (distributed.py)
    try {
      if (host_count <= 1) {
        shm_ = neuron_rt::ShmGroup::create(rendezvous, "shm/", rank, size, shm_options);
      } else if (static_cast<int>(hosts.size()) > host_count) {  // some host has several ranks
        hierarchy_ = std::make_unique<Hierarchy>();
        hierarchy_->host_of = hosts;
        std::vector<int> seen(host_count, 0);
        for (int host : hosts) hierarchy_->local_index.push_back(seen[host]++);
        const int here = hosts[rank];
        hierarchy_->leader = hierarchy_->local_index[rank] == 0;
        TORCH_CHECK(hierarchy_->leader == static_cast<bool>(leaders), "neuron process group, rank ",
                    rank, ": a Gloo group of the hosts' leaders must be given to each host's first rank only");
        hierarchy_->set_leaders(std::move(leaders));
        hierarchy_->local = neuron_rt::ShmGroup::create(rendezvous, "shm/host" + std::to_string(here) + "/",
                                                        hierarchy_->local_index[rank], seen[here], shm_options);
      }
    } catch (const neuron_rt::Error& e) {
      C10_THROW_ERROR(DistBackendError, std::string("neuron process group, rank ") + std::to_string(rank) +
                                            ": shared memory for collectives: " + e.what() +
                                            " (NEURON_SIM_SHM_COLLECTIVES=0 uses Gloo only)");
    }
  }
  queue_.set_has_shared_path(shm_ || hierarchy_);
}

ProcessGroupNeuron::~ProcessGroupNeuron() {
  auto teardown = [this] {
    queue_.stop();  // its queued collectives end (or time out) first
    c10::intrusive_ptr<c10d::Backend> leaders = hierarchy_ ? hierarchy_->take_leaders() : nullptr;
    if (queue_.aborted()) {
      // Gloo's thread may still be in a transfer that only its own timeout ends (a link
      // down): its destructor joins it elsewhere, so abort-then-destroy returns at once.
      std::thread([transport = std::move(transport_), leaders = std::move(leaders)]() mutable {
        transport.reset();
        leaders.reset();
      }).detach();
    } else {
      transport_.reset();  // joins Gloo's thread
      leaders.reset();
    }
  };
  // The threads joined here may drop the last reference to tensors that have Python objects,
  // which takes the GIL: a thread holding it while joining them would wait forever (the last
  // reference to a group may go in C++ code called with the GIL held, e.g. DDP's Reducer).
  if (Py_IsInitialized() && PyGILState_Check()) {
    pybind11::gil_scoped_release release;
    teardown();
  } else {
    teardown();
  }
}

int64_t ProcessGroupNeuron::zero_copy_calls() const {
  neuron_rt::ShmGroup* group = shm_ ? shm_.get() : hierarchy_ ? hierarchy_->local.get() : nullptr;
  if (!group || !group->zero_copy()) return -1;
  return static_cast<int64_t>(group->zero_copy_calls());
}

void ProcessGroupNeuron::setTimeout(std::chrono::milliseconds timeout) {
  options_->timeout = timeout;
  transport_->setTimeout(timeout);
  if (hierarchy_ && hierarchy_->leader) {
    try {
      hierarchy_->leaders()->setTimeout(timeout);
    } catch (const neuron_rt::Error&) {
      // dropped after a failure: the group is not usable any more
    }
  }
}

std::string ProcessGroupNeuron::describe(const std::string& collective) const {
  std::string group = "neuron process group";
  if (!pg_uid_.empty()) group += " '" + pg_uid_ + "'";
  if (!pg_desc_.empty() && pg_desc_ != "undefined") group += " (" + pg_desc_ + ")";
  return collective + " on " + group + ", rank " + std::to_string(rank_) + " of " + std::to_string(size_);
}

CollectiveCall ProcessGroupNeuron::call(const char* name, c10d::OpType type, std::chrono::milliseconds timeout,
                                        bool caller_waits) {
  return CollectiveCall(queue_, name, describe(name), rank_, device_, type,
                        timeout.count() > 0 ? timeout : options_->timeout, size_, spans_hosts_, caller_waits);
}

template <typename CallOptions>
CollectiveCall ProcessGroupNeuron::call(const char* name, c10d::OpType type, const CallOptions& opts) {
  return call(name, type, opts.timeout, !opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::broadcast(std::vector<at::Tensor>& tensors,
                                                             const c10d::BroadcastOptions& opts) {
  CollectiveCall call = this->call("broadcast", c10d::OpType::BROADCAST, opts);
  return call.run([&] {
    auto views = call.host(tensors);
    if (shm_ && views.size() == 1 && opts.rootTensor == 0) {
      const int root = static_cast<int>(opts.rootRank);
      views = call.staged(views, /*receives=*/rank_ != root);
      return call.run_shared(*shm_, [views, root](neuron_rt::ShmGroup& group) {
        group.broadcast(views[0].data_ptr(), views[0].nbytes(), root);
      }, tensors);
    }
    if (hierarchy_ && views.size() == 1 && opts.rootTensor == 0) {
      const int root = static_cast<int>(opts.rootRank);
      TORCH_CHECK(root >= 0 && root < size_, "root rank ", root, " is not in the group of ", size_, " ranks");
      const int root_host = hierarchy_->host_of[root], root_index = hierarchy_->local_index[root];
      const bool root_here = hierarchy_->host_of[rank_] == root_host;
      views = call.staged(views, /*receives=*/rank_ != root);
      return run_hierarchical(call, *hierarchy_, [views, root_host, root_index, root_here](
                                  Hierarchy& hierarchy, const CollectiveQueue& queue, Clock::time_point deadline) {
        broadcast_across_hosts(hierarchy, queue, views, root_host, root_index, root_here, deadline);
      }, tensors);
    }
    views = movable(std::move(views));
    return call.start(call.transport(*transport_).broadcast(views, opts), tensors);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::allreduce(std::vector<at::Tensor>& tensors,
                                                             const c10d::AllreduceOptions& opts) {
  CollectiveCall call = this->call("allreduce", c10d::OpType::ALLREDUCE, opts);
  return call.run([&] { return all_reduce(call, tensors, opts, /*coalesced=*/false); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                       const c10d::AllreduceCoalescedOptions& opts) {
  CollectiveCall call = this->call("allreduce_coalesced", c10d::OpType::ALLREDUCE_COALESCED, opts);
  return call.run([&] { return all_reduce(call, tensors, opts, /*coalesced=*/true); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::all_reduce(CollectiveCall& call, std::vector<at::Tensor>& tensors,
                                                              const c10d::AllreduceOptions& opts, bool coalesced) {
  const Reduction reduction = plan_reduction(opts.reduceOp, tensors);
  auto views = call.host(tensors);
  // Several tensors in one allreduce are reduced together (Gloo's multi-device form): Gloo's.
  const bool shared = (shm_ || hierarchy_) && (coalesced || views.size() == 1) &&
                      shared_reduces(views, reduction.transport_op);
  auto sent = reduction_inputs(call, reduction, views, /*receives=*/true, size_);
  if (shared) {
    const auto kind = *shared_reduction(reduction.transport_op);
    sent = call.staged(sent, /*receives=*/true);
    if (hierarchy_) {
      return run_hierarchical(call, *hierarchy_, [sent, kind, op = reduction.transport_op](
                                  Hierarchy& hierarchy, const CollectiveQueue& queue, Clock::time_point deadline) {
        all_reduce_across_hosts(hierarchy, queue, sent, kind, op, deadline);
      }, tensors);
    }
    return call.run_shared(*shm_, [sent, kind](neuron_rt::ShmGroup& group) {
      for (const auto& tensor : sent) {
        group.all_reduce(tensor.data_ptr(), static_cast<size_t>(tensor.numel()), *shared_element(tensor.scalar_type()),
                         kind);
      }
    }, tensors);
  }
  c10d::AllreduceOptions transport_opts = opts;
  transport_opts.reduceOp = reduction.transport_op;
  c10d::Backend& transport = call.transport(*transport_);
  if (!coalesced) return call.start(transport.allreduce(sent, transport_opts), tensors);
  c10d::AllreduceCoalescedOptions coalesced_opts;
  static_cast<c10d::AllreduceOptions&>(coalesced_opts) = transport_opts;  // it adds no field
  return call.start(transport.allreduce_coalesced(sent, coalesced_opts), tensors);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::reduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::ReduceOptions& opts) {
  CollectiveCall call = this->call("reduce", c10d::OpType::REDUCE, opts);
  return call.run([&] {
    const Reduction reduction = plan_reduction(opts.reduceOp, tensors);
    auto sent = reduction_inputs(call, reduction, call.host(tensors), /*receives=*/rank_ == opts.rootRank, size_);
    c10d::ReduceOptions transport_opts = opts;
    transport_opts.reduceOp = reduction.transport_op;
    return call.start(call.transport(*transport_).reduce(sent, transport_opts), tensors);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                             std::vector<at::Tensor>& inputs,
                                                             const c10d::AllgatherOptions& opts) {
  CollectiveCall call = this->call("allgather", c10d::OpType::ALLGATHER, opts);
  return call.run([&] {
    auto output_views = call.host(outputs);
    auto input_views = call.host(inputs);
    auto gathers_evenly = [&] {
      if (input_views.size() != 1 || output_views.size() != 1 || static_cast<int>(output_views[0].size()) != size_) {
        return false;
      }
      for (const auto& view : output_views[0]) {
        if (view.scalar_type() != input_views[0].scalar_type() || view.numel() != input_views[0].numel()) return false;
      }
      return true;
    };
    if (shm_ && gathers_evenly()) {  // through one staging buffer, copied out
      input_views = call.staged(input_views, /*receives=*/false);
      return call.run_shared(*shm_, [input = input_views[0], outputs = output_views[0]](neuron_rt::ShmGroup& group) {
        const int64_t bytes = static_cast<int64_t>(input.nbytes());
        at::Tensor staging = at::empty({bytes * group.size()}, input.options().dtype(at::kByte));
        group.all_gather(input.data_ptr(), staging.data_ptr(), static_cast<size_t>(bytes));
        for (int r = 0; r < group.size(); ++r) {
          const at::Tensor& output = outputs[r];
          output.copy_(staging.narrow(0, r * bytes, bytes).view(output.scalar_type()).view(output.sizes()));
        }
      }, c10::IValue(outputs), flatten(outputs));
    }
    output_views = movable(std::move(output_views));
    input_views = movable(std::move(input_views));
    auto work = call.transport(*transport_).allgather(output_views, input_views, opts);
    return call.start(work, c10::IValue(outputs), flatten(outputs));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                   const c10d::AllgatherOptions& opts) {
  CollectiveCall call = this->call("_allgather_base", c10d::OpType::_ALLGATHER_BASE, opts);
  return call.run([&] {
    std::vector<at::Tensor> outputs{output};
    std::vector<at::Tensor> inputs{input};
    return all_gather_tensors(call, *transport_, shm_.get(), size_, outputs, inputs, opts);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  CollectiveCall call = this->call("allgather_coalesced", c10d::OpType::ALLGATHER_COALESCED, opts);
  return call.run([&] {
    return into_lists(call, *transport_, output_lists, inputs,
                      [&](c10d::Backend& gloo, ListsOfViews& output_views, Views& input_views) {
                        return gloo.allgather_coalesced(output_views, input_views, opts);
                      });
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  CollectiveCall call = this->call("allgather_into_tensor_coalesced", c10d::OpType::COALESCED, opts);
  return call.run([&] { return all_gather_tensors(call, *transport_, shm_.get(), size_, outputs, inputs, opts); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::GatherOptions& opts) {
  CollectiveCall call = this->call("gather", c10d::OpType::GATHER, opts);
  return call.run([&] {
    return into_lists(call, *transport_, outputs, inputs,
                      [&](c10d::Backend& gloo, ListsOfViews& output_views, Views& input_views) {
                        return gloo.gather(output_views, input_views, opts);
                      });
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::scatter(std::vector<at::Tensor>& outputs,
                                                           std::vector<std::vector<at::Tensor>>& inputs,
                                                           const c10d::ScatterOptions& opts) {
  CollectiveCall call = this->call("scatter", c10d::OpType::SCATTER, opts);
  return call.run([&] {
    auto output_views = movable(call.host(outputs));
    auto input_views = movable(call.host(inputs));
    return call.start(call.transport(*transport_).scatter(output_views, input_views, opts), outputs);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                  std::vector<std::vector<at::Tensor>>& inputs,
                                                                  const c10d::ReduceScatterOptions& opts) {
  CollectiveCall call = this->call("reduce_scatter", c10d::OpType::REDUCE_SCATTER, opts);
  return call.run([&] {
    TORCH_CHECK(inputs.size() == outputs.size(), "reduce_scatter takes one list of inputs per output, got ",
                inputs.size(), " lists for ", outputs.size(), " outputs");
    auto output_views = call.host(outputs);
    auto input_views = call.host(inputs);
    const Reduction reduction = plan_reduction(opts.reduceOp, flatten(inputs));
    call.ready();
    std::vector<at::Tensor> stages;
    std::vector<int64_t> offsets;
    for (size_t i = 0; i < input_views.size(); ++i) {
      const auto& list = input_views[i];
      TORCH_CHECK(static_cast<int>(list.size()) == size_, "reduce_scatter takes one input per rank: ", list.size(),
                  " inputs for ", size_, " ranks");
      std::vector<at::Tensor> flat;
      int64_t offset = 0;
      for (int r = 0; r < size_; ++r) {
        TORCH_CHECK(list[r].scalar_type() == output_views[i].scalar_type(), "reduce_scatter of ",
                    dtype_name(list[r].scalar_type()), " inputs into a ", dtype_name(output_views[i].scalar_type()),
                    " output: the dtypes must match");
        if (r == rank_) {
          TORCH_CHECK(list[r].numel() == output_views[i].numel(), "reduce_scatter: this rank's input has ",
                      list[r].numel(), " elements, its output ", output_views[i].numel());
          offsets.push_back(offset);
        }
        flat.push_back(list[r].reshape({-1}));
        offset += list[r].numel();
      }
      stages.push_back(at::cat(flat));
    }
    return reduce_scatter_by_allreduce(call, *transport_, reduction, std::move(stages), std::move(output_views),
                                       std::move(offsets), opts, outputs, size_);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                        const c10d::ReduceScatterOptions& opts) {
  CollectiveCall call = this->call("_reduce_scatter_base", c10d::OpType::_REDUCE_SCATTER_BASE, opts);
  return call.run([&] {
    std::vector<at::Tensor> outputs{output};
    std::vector<at::Tensor> inputs{input};
    return reduce_scatter_tensors(call, *transport_, shm_.get(), rank_, size_, outputs, inputs, opts);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  CollectiveCall call =
      this->call("reduce_scatter_tensor_coalesced", c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED, opts);
  return call.run([&] {
    return reduce_scatter_tensors(call, *transport_, shm_.get(), rank_, size_, outputs, inputs, opts);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                                 std::vector<int64_t>& output_split_sizes,
                                                                 std::vector<int64_t>& input_split_sizes,
                                                                 const c10d::AllToAllOptions& opts) {
  CollectiveCall call = this->call("alltoall_base", c10d::OpType::ALLTOALL_BASE, opts);
  return call.run([&] {
    at::Tensor output_view = movable(call.host(output));
    at::Tensor input_view = movable(call.host(input));
    auto work = call.transport(*transport_).alltoall_base(output_view, input_view, output_split_sizes,
                                                            input_split_sizes, opts);
    return call.start(work, {output});
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::alltoall(std::vector<at::Tensor>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllToAllOptions& opts) {
  CollectiveCall call = this->call("alltoall", c10d::OpType::ALLTOALL, opts);
  return call.run([&] {
    auto output_views = call.host(outputs);
    auto input_views = call.host(inputs);
    auto same_shapes = [](const std::vector<at::Tensor>& tensors) {
      for (const auto& tensor : tensors) {
        if (tensor.sizes() != tensors[0].sizes()) return false;
      }
      return true;
    };
    if (same_shapes(output_views) && same_shapes(input_views)) {
      output_views = movable(std::move(output_views));
      input_views = movable(std::move(input_views));
      return call.start(call.transport(*transport_).alltoall(output_views, input_views, opts), outputs);
    }
    // Tensors of different sizes (Gloo's alltoall takes equal ones): one all-to-all of the
    // concatenated inputs with per-rank element counts, copied out into the outputs.
    TORCH_CHECK(!input_views.empty() && !output_views.empty(), "alltoall needs one input and one output per rank");
    for (const auto& view : output_views) {
      TORCH_CHECK(view.scalar_type() == input_views[0].scalar_type(), "alltoall of ",
                  dtype_name(input_views[0].scalar_type()), " inputs into ", dtype_name(view.scalar_type()),
                  " outputs: the dtypes must match");
    }
    std::vector<int64_t> input_counts, output_counts;
    std::vector<at::Tensor> flat_inputs;
    for (const auto& view : input_views) {
      input_counts.push_back(view.numel());
      flat_inputs.push_back(view.reshape({-1}));
    }
    for (const auto& view : output_views) output_counts.push_back(view.numel());
    call.ready();
    at::Tensor packed_input = at::cat(flat_inputs);
    at::Tensor packed_output = at::empty({c10::sum_integers(output_counts)}, packed_input.options());
    call.finally([output_views, packed_output, output_counts] {
      int64_t offset = 0;
      for (size_t i = 0; i < output_views.size(); ++i) {
        output_views[i].copy_(packed_output.narrow(0, offset, output_counts[i]).view(output_views[i].sizes()));
        offset += output_counts[i];
      }
    });
    at::Tensor output_bytes = movable(packed_output);
    at::Tensor input_bytes = movable(packed_input);
    auto work = call.transport(*transport_).alltoall_base(output_bytes, input_bytes, output_counts, input_counts, opts);
    return call.start(work, outputs);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::send(std::vector<at::Tensor>& tensors, int dst_rank, int tag) {
  CollectiveCall call = this->call("send", c10d::OpType::SEND, std::chrono::milliseconds(-1));
  return call.run([&] {
    auto views = movable(call.host(tensors));
    return call.start(call.transport(*transport_).send(views, dst_rank, tag), tensors);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::recv(std::vector<at::Tensor>& tensors, int src_rank, int tag) {
  CollectiveCall call = this->call("recv", c10d::OpType::RECV, std::chrono::milliseconds(-1));
  return call.run([&] {
    auto views = movable(call.host(tensors));
    return call.start(call.transport(*transport_).recv(views, src_rank, tag), tensors);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  CollectiveCall call = this->call("recv (any source)", c10d::OpType::RECVANYSOURCE, std::chrono::milliseconds(-1));
  return call.run([&] {
    auto views = movable(call.host(tensors));
    return call.start(call.transport(*transport_).recvAnysource(views, tag), tensors);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::barrier(const c10d::BarrierOptions& opts) {
  CollectiveCall call = this->call("barrier", c10d::OpType::BARRIER, opts);
  return call.run([&] {
    // The work queued on this rank's device before the barrier has run when it returns.
    if (shm_) return call.run_shared(*shm_, [](neuron_rt::ShmGroup& group) { group.barrier(); }, std::vector<at::Tensor>());
    if (hierarchy_) return run_hierarchical(call, *hierarchy_, barrier_across_hosts, std::vector<at::Tensor>());
    return call.start(call.transport(*transport_).barrier(opts), std::vector<at::Tensor>());
  });
}

void ProcessGroupNeuron::setSequenceNumberForGroup() { transport_->setSequenceNumberForGroup(); }
uint64_t ProcessGroupNeuron::getSequenceNumberForGroup() { return transport_->getSequenceNumberForGroup(); }

void ProcessGroupNeuron::abort() {
  queue_.mark_aborted();
  if (shm_) shm_->abort("abort() was called");
  if (hierarchy_ && hierarchy_->local) hierarchy_->local->abort("abort() was called");
  queue_.abort_tracked();
  transport_->abort();
  // Gloo's abort does not end a transfer: the leaders' group is dropped (destroyed on a thread
  // of its own), and the group fails its later collectives.
  if (hierarchy_) hierarchy_->drop_leaders("abort() was called");
}

void ProcessGroupNeuron::shutdown() { transport_->shutdown(); }

}  // namespace torch_neuron
