// NeuronWork: the Work of one collective of the neuron process group (equivalent to
// ProcessGroupNCCL's WorkNCCL, ProcessGroupGloo's AsyncWork). It wraps the transport's work
// (Gloo's) or none (a collective run on the group's communication thread, CollectiveCall.h),
// runs the steps that finish its result, times out at its deadline and carries its error; its
// future is device-aware (Note [Stream-ordered collectives]) except for point-to-point works,
// whose futures complete on a completion thread (Note [Completion threads]).
//
// Thread safety: wait() and abort() may be called from any thread; the first of
// transport_finished(), abort() and a timeout completes the Work, the others change nothing.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "CollectiveQueue.h"

namespace torch_neuron {

using Clock = std::chrono::steady_clock;
using Milliseconds = std::chrono::milliseconds;

// The message of `error` (c10's without its backtrace).
std::string message_of(const std::exception_ptr& error);
// A DistBackendError with `message`, as an exception_ptr.
std::exception_ptr backend_error(const std::string& message);

class NeuronWork final : public c10d::Work {
 public:
  // `what`: the collective, group and rank, for its errors. `deadline`: start + `limit` (the
  // group's or the call's timeout). `value`, `outputs`: the future's value and result().
  // `transport_work`: Gloo's work, or null for a collective run on the communication thread.
  // `finish_steps`: run once the transport's work succeeded, before the Work completes.
  // `devices`: the future's (Note [Stream-ordered collectives]); none for point-to-point works,
  // whose futures complete when the transfer ends.
  NeuronWork(std::string what, int rank, c10d::OpType type, Clock::time_point deadline, Milliseconds limit,
             c10::IValue value, std::vector<at::Tensor> outputs, c10::intrusive_ptr<c10d::Work> transport_work,
             std::vector<std::function<void()>> finish_steps, std::vector<c10::Device> devices = {});

  // The transport's work has ended (with `error`, or null): finishes the result and
  // completes this Work and its future, unless it already ended. The finishing steps run
  // even when a wait() gave up first (timed out, aborted): the transport has written the
  // outputs by now, and without them they would hold neither the input nor the result
  // (AVG's sum undivided) while the peers hold the result. Called once, by the thread that
  // sees the transport's work end (the transport's, for works with a future).
  void transport_finished(std::exception_ptr error);

  // For a transport work without a future (send, recv): waits for it on a completion thread,
  // until the Work's deadline and then until the transport gives up (Gloo times out its
  // transfers), so the Work and its future complete without anyone calling wait().
  void watch_transport();

  // Note [Stream-ordered collectives]: the communication stream's task, past the Work's
  // deadline: times the Work out; never throws: a failed or timed-out collective does not fail
  // the device, its Work carries the error.
  void wait_on_stream();

  // Completes the future at issue, as ProcessGroupNCCL does: its value (the outputs) is
  // usable by device ops, which the stream orders after the collective, and callbacks
  // chained on it run at once on the thread that chains them, so every rank issues the
  // collectives of those callbacks in the same order (PowerSGD's hook over several
  // buckets). A collective that has already failed (always known here in launch-blocking
  // mode) gives the future its error.
  void complete_future_at_issue();

  // What the communication stream waits on (Note [Stream-ordered collectives]): not the Work,
  // whose tensors a stream task must not hold (dropping the last reference to a Python-owned
  // tensor on the stream's thread takes the GIL, which a host wait may hold).
  struct Signal {
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;
  };
  std::shared_ptr<Signal> signal() const { return signal_; }

  // Blocks until the Work completed (the transport's work and the finishing steps ended),
  // or until `timeout` (the Work's deadline when none is given), then raises its error.
  // Its future completes right after, on a completion thread (Note [Completion threads]):
  // waiting for that thread here would add a thread hop to every synchronous collective.
  bool wait(Milliseconds timeout) override;
  // A collective queued for the communication thread: a wait() without a timeout of its own
  // runs it there if the thread has not started it (Note [Waiters run their collectives]).
  void set_queued(std::shared_ptr<TaskLane> lane, uint64_t ticket) {
    lane_ = std::move(lane);
    ticket_ = ticket;
  }
  void abort() override;
  // The last strong reference went; weak ones (the group's list of pending works, for
  // abort()) keep the object, not what it holds: the tensors are released now.
  void release_resources() override;
  // Note [Device clock]: the collective's end on its communication stream's timeline, noted
  // when it is issued on `device` (none for point-to-point works, which are placed on the
  // current stream itself).
  void set_device_end(c10::DeviceIndex device, uint64_t end_ns) {
    device_ = device;
    device_end_ns_ = end_ns;
  }
  // The results are in device memory once completed; as WorkNCCL's, it makes the calling
  // thread's current stream wait for the collective's end on the device timeline (as wait() does).
  void synchronize() override { order_current_stream(); }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  std::vector<at::Tensor> result() override { return outputs_; }
  int sourceRank() const override { return transport_work_ ? transport_work_->sourceRank() : -1; }

 private:
  void time_out(bool explicit_timeout, Milliseconds timeout);
  // Later work of the current stream of the collective's device starts after its device end.
  void order_current_stream() const;
  // Completes the Work once; the first caller wins. A point-to-point Work's future completes
  // with it, on a completion thread (Note [Completions at exit]); the others' at issue.
  void complete(std::exception_ptr error);

  const std::string what_;
  const Clock::time_point deadline_;
  const Milliseconds limit_;
  c10::IValue value_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  c10::intrusive_ptr<c10d::Work> transport_work_;
  std::vector<std::function<void()>> finish_steps_;  // touched by whoever sees the transport's work end
  bool transport_future_ = true;  // false: point-to-point (watched; not ordered on the stream)
  const std::shared_ptr<Signal> signal_ = std::make_shared<Signal>();
  std::atomic<bool> done_{false};
  c10::DeviceIndex device_ = -1;  // set at issue, before the Work is handed out
  uint64_t device_end_ns_ = 0;
  std::shared_ptr<TaskLane> lane_;  // set at issue (set_queued), before the Work is handed out
  uint64_t ticket_ = 0;
};

}  // namespace torch_neuron
