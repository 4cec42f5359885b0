// CollectiveCall: one collective call of the neuron process group, on the calling thread (what
// ProcessGroupNCCL's collective() and ProcessGroupGloo's enqueue() are to those groups). It checks
// the call's tensors and lends their memory to the transport as host views, readies the device,
// hands the views to a transport (Gloo, or the group's communication thread) and wraps the
// transport's work in a NeuronWork ordered on the group's communication stream. It passes the
// launch seam once per call (Note [Launches], Launch.h). Every error it raises names the
// collective, the group and this rank.
//
// Note [Stream-ordered collectives]
// As ProcessGroupNCCL does, a collective is ordered on its group's communication stream (one per
// group and device, from the device's kCommStreamCount communication streams, never handed out
// as pool streams; shared only past that many groups on one device), not on the current stream:
// a task there waits for it (in launch-blocking mode that task runs at the call, so the call
// returns once the collective ended, as with CUDA_LAUNCH_BLOCKING=1). Its future is
// device-aware and completes at issue, holding the outputs, with events recorded on the
// communication stream after that task: whoever waits for the future or chains a callback with
// then() has its stream wait for those events (c10's Future does this), and the callbacks run
// at once on the thread that chains them, so a callback may run another collective and wait for
// it, and every rank issues the collectives of its callbacks in the same order (PowerSGD's hook
// over several buckets). Ops issued on the current stream after the call see the result after
// wait() (which blocks the calling thread until the Work completed). Since the current stream
// does not wait for a collective, a later collective of another group, whose issue waits for
// the current stream, does not wait for it either: ranks may issue the asynchronous collectives
// of different groups in different orders (c10d asks one order per group only). A failed or
// timed-out collective does not fail the device: its Work carries the error, which wait()
// raises (its outputs are then undefined). Point-to-point works (send, recv) are on no stream
// (an isend waiting there for its receive would deadlock ranks that both send first, as NCCL's
// would outside a group); a completion thread waits for them and completes their futures,
// which have no devices.
//
// Thread safety: one call, one thread; it lives for the duration of one collective call.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <functional>
#include <string>
#include <vector>

#include "CollectiveQueue.h"
#include "NeuronWork.h"

namespace neuron_rt {
class ShmGroup;
class Stream;
}

namespace torch_neuron {

// Rethrows the exception being handled with `where` in front of its message, keeping its
// Python type (ValueError, TypeError, ...); the shared-memory transport's errors become
// DistBackendError.
[[noreturn]] void rethrow_in_context(const std::string& where);

class CollectiveCall {
 public:
  // `name`: the collective's; `what`: with the group and rank ("allreduce on neuron process
  // group '0', rank 1 of 2"). `device`: the group's, for a call whose tensors name none.
  // `limit`: the call's timeout. `ranks`, `across_hosts`: the group's size and whether it spans
  // hosts (instances), for the device clock (Note [Device clock]: NeuronLink within, EFA across).
  // `caller_waits`: the caller waits for this collective's end before it goes on (c10d's asyncOp
  // false: dist.all_reduce without async_op). Then, as in launch-blocking mode, where issuing a
  // collective waits for it anyway, run_queued runs the body on the calling thread (run_inline).
  CollectiveCall(CollectiveQueue& queue, const char* name, std::string what, int rank, c10::DeviceIndex device,
                 c10d::OpType type, Milliseconds limit, int ranks = 1, bool across_hosts = false,
                 bool caller_waits = false);

  // Runs `body` (which starts the collective) with this collective named in its errors; fails
  // once the group was aborted.
  template <typename Body>
  c10::intrusive_ptr<c10d::Work> run(Body&& body) {
    try {
      if (queue_.aborted()) C10_THROW_ERROR(DistBackendError, "the process group was aborted (abort() was called)");
      return body();
    } catch (...) {
      rethrow_in_context(what_);
    }
  }

  // Host views of neuron tensors (undefined stays undefined), each holding its device buffer,
  // and keeping it open under the memory guard, for as long as the view lives: the transport
  // may keep views after the Work completes (Gloo's works hold their tensors). Raises for a
  // tensor not on neuron, or on another device than the call's other tensors.
  at::Tensor host(const at::Tensor& tensor);
  std::vector<at::Tensor> host(const std::vector<at::Tensor>& tensors);
  std::vector<std::vector<at::Tensor>> host(const std::vector<std::vector<at::Tensor>>& lists);

  // Readies the device: in asynchronous mode, the work queued on the device's current stream
  // has run (before any host access to the views, too). Idempotent.
  void ready();
  // The Gloo group `backend`, once the device is ready and the collectives queued on the
  // communication thread before this one have run (one order for both paths).
  c10d::Backend& transport(c10d::Backend& backend);

  // A step run after the transport's work succeeded, before the Work completes.
  void finally(std::function<void()> step);

  // Contiguous stand-ins for the shared-memory transport: a view that is not contiguous is
  // copied (now: the device is ready), and, when it `receives` a result, copied back before
  // every other finishing step. The transport a collective takes must not depend on a
  // rank's layouts, which its peers may not share (they would wait in another transport).
  std::vector<at::Tensor> staged(const std::vector<at::Tensor>& views, bool receives);

  // The shared-memory transport: `body(shm)` runs the collective on the communication thread
  // (run_queued). `shm` is the group's and outlives the queue's thread.
  c10::intrusive_ptr<c10d::Work> run_shared(neuron_rt::ShmGroup& shm, std::function<void(neuron_rt::ShmGroup&)> body,
                                            c10::IValue value, std::vector<at::Tensor> outputs);
  c10::intrusive_ptr<c10d::Work> run_shared(neuron_rt::ShmGroup& shm, std::function<void(neuron_rt::ShmGroup&)> body,
                                            const std::vector<at::Tensor>& outputs);

  // Runs `body` on the group's communication thread, in the order collectives were issued,
  // once the device is ready (now) and the group's Gloo works issued before have ended
  // (there), with `shm` (may be null) bounded by the Work's deadline. Returns its Work at
  // once; it completes when the body and the finishing steps have run. `body` owns what it
  // uses (captures by value: it runs after this call returns); after a failure of a zero-copy
  // `shm` it is kept until the process exits (Note [Memory lent to peers]).
  c10::intrusive_ptr<c10d::Work> run_queued(std::function<void()> body, neuron_rt::ShmGroup* shm, c10::IValue value,
                                            std::vector<at::Tensor> outputs);

  // Wraps `transport_work`, Gloo's work for this collective, whose value and result are
  // `value` and `outputs`. Only a work with a future may have finishing steps (they must end
  // before Gloo starts its next collective); one without (send, recv) is a point-to-point work.
  c10::intrusive_ptr<c10d::Work> start(c10::intrusive_ptr<c10d::Work> transport_work, c10::IValue value,
                                       std::vector<at::Tensor> outputs);
  c10::intrusive_ptr<c10d::Work> start(c10::intrusive_ptr<c10d::Work> transport_work,
                                       const std::vector<at::Tensor>& outputs);

  CollectiveQueue& queue() const { return queue_; }
  int rank() const { return rank_; }
  Clock::time_point deadline() const { return deadline_; }

 private:
  // Note [Stream-ordered collectives]: orders `work` on the communication stream and completes
  // its future.
  c10::intrusive_ptr<c10d::Work> issued(const c10::intrusive_ptr<NeuronWork>& work);
  // Note [Launches]: passes the seam for this call, once, with the stream the collective is
  // ordered on (the communication stream; none for point-to-point transfers).
  void note_collective_launch(const neuron_rt::Stream* stream);
  c10::DeviceIndex device() const { return device_ >= 0 ? device_ : group_device_; }
  std::vector<c10::Device> future_devices() const;

  CollectiveQueue& queue_;
  const char* const name_;
  const std::string what_;
  const int rank_;
  const c10::DeviceIndex group_device_;
  const c10d::OpType type_;
  const Milliseconds limit_;
  const Clock::time_point deadline_;
  c10::DeviceIndex device_ = -1;
  bool ready_ = false;
  bool launched_ = false;
  const int ranks_;
  const bool across_hosts_;
  const bool caller_waits_;
  uint64_t payload_bytes_ = 0;  // the largest buffer handed to host() at once (one tensor, list or list of lists)
  std::vector<std::function<void()>> finish_steps_;
};

}  // namespace torch_neuron
