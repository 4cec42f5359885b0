// One collective call: CollectiveCall.h.
#include "CollectiveCall.h"

#include <ATen/ATen.h>
#include <c10/core/StreamGuard.h>

#include <algorithm>
#include <mutex>
#include <utility>

#include "../../runtime/collectives.h"
#include "../../runtime/cost_model.h"
#include "../../runtime/error.h"
#include "../HostViews.h"
#include "../Launch.h"
#include "../NeuronAllocator.h"
#include "../NeuronCommon.h"
#include "CompletionThreads.h"

namespace torch_neuron {

[[noreturn]] void rethrow_in_context(const std::string& where) {
  try {
    throw;
  } catch (const c10::OutOfMemoryError&) {
    throw;
  } catch (const c10::ValueError& e) {
    C10_THROW_ERROR(ValueError, where + ": " + e.what_without_backtrace());
  } catch (const c10::TypeError& e) {
    C10_THROW_ERROR(TypeError, where + ": " + e.what_without_backtrace());
  } catch (const c10::NotImplementedError& e) {
    C10_THROW_ERROR(NotImplementedError, where + ": " + e.what_without_backtrace());
  } catch (const c10::DistError& e) {
    C10_THROW_ERROR(DistBackendError, where + ": " + e.what_without_backtrace());
  } catch (const c10::Error& e) {
    C10_THROW_ERROR(Error, where + ": " + e.what_without_backtrace());
  } catch (const neuron_rt::Error& e) {  // the shared-memory transport: timeouts, dead peers, aborts
    C10_THROW_ERROR(DistBackendError, where + ": " + e.what());
  } catch (const std::exception& e) {
    C10_THROW_ERROR(Error, where + ": " + e.what());
  }
}

namespace {

// A CPU tensor over the memory of neuron tensor `tensor` that holds its device buffer, and
// keeps it open for host access under the memory guard, until the last view of it goes.
// The transport may keep views after the Work completes (Gloo's works hold their tensors):
// the memory stays valid for as long as they do.
at::Tensor owning_host_view(const at::Tensor& tensor) {
  neuron_rt::BufferRef buffer = buffer_ref_of(tensor.storage());
  if (buffer) {
    neuron_rt::Buffer* root = buffer->root();
    if (auto* memory = dynamic_cast<neuron_rt::DeviceMemory*>(root->owner())) memory->guard_open(root);
  }
  auto* storage = tensor.storage().unsafeGetStorageImpl();
  void* data = storage->mutable_data();
  auto* held = new neuron_rt::BufferRef(std::move(buffer));
  c10::DataPtr data_ptr(data, held, [](void* context) {
    auto* held = static_cast<neuron_rt::BufferRef*>(context);
    if (*held) {
      neuron_rt::Buffer* root = (*held)->root();
      if (auto* memory = dynamic_cast<neuron_rt::DeviceMemory*>(root->owner())) memory->guard_close(root);
    }
    delete held;
  }, c10::Device(c10::DeviceType::CPU));
  c10::Storage view_storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), storage->nbytes(), std::move(data_ptr), /*allocator=*/nullptr,
      /*resizable=*/false));
  return tensor_over(std::move(view_storage), c10::DispatchKey::CPU, tensor);
}

// Note [Memory lent to peers]: in a zero-copy collective the peers read and write this rank's
// tensors from their own processes. A call that failed here (abort(), a timeout, a peer's
// failure) may leave a peer still inside it, writing into that memory until it notices the
// failure. So the body of a failed zero-copy call, which holds the host views (and through
// them the device buffers) it lent, is kept until the process exits: the memory is never
// handed to another tensor. The group cannot be used after a fault, so this happens at most
// a few times per group. (The tensors the caller holds stay undefined, as after any failed
// collective: a peer may still write into them.)
void keep_lent_memory(std::function<void()> body) {
  static std::mutex mutex;
  static auto* kept = new std::vector<std::function<void()>>();  // never freed
  std::lock_guard<std::mutex> lock(mutex);
  kept->push_back(std::move(body));
}

}  // namespace

CollectiveCall::CollectiveCall(CollectiveQueue& queue, const char* name, std::string what, int rank,
                               c10::DeviceIndex device, c10d::OpType type, Milliseconds limit, int ranks,
                               bool across_hosts, bool caller_waits)
    : queue_(queue),
      name_(name),
      what_(std::move(what)),
      rank_(rank),
      group_device_(device),
      type_(type),
      limit_(limit),
      deadline_(Clock::now() + limit_),
      ranks_(ranks),
      across_hosts_(across_hosts),
      caller_waits_(caller_waits) {}

at::Tensor CollectiveCall::host(const at::Tensor& tensor) {
  if (!tensor.defined()) return tensor;
  TORCH_CHECK(tensor.device().type() == kNeuron, "the neuron backend takes neuron tensors, got one on ",
              tensor.device(), ". Move it with .to('neuron'), or give CPU tensors a backend of their own: "
              "init_process_group(backend='cpu:gloo,neuron:neuron')");
  const c10::DeviceIndex device = tensor.device().index();
  TORCH_CHECK(device_ < 0 || device_ == device, "tensors on neuron:", device_, " and neuron:", device,
              ": the tensors of one collective must be on one neuron device");
  device_ = device;
  payload_bytes_ = std::max<uint64_t>(payload_bytes_, tensor.nbytes());
  return owning_host_view(tensor);
}

std::vector<at::Tensor> CollectiveCall::host(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> views;
  views.reserve(tensors.size());
  uint64_t bytes = 0;
  for (const auto& tensor : tensors) {
    views.push_back(host(tensor));
    bytes += tensor.defined() ? tensor.nbytes() : 0;
  }
  payload_bytes_ = std::max(payload_bytes_, bytes);
  return views;
}

std::vector<std::vector<at::Tensor>> CollectiveCall::host(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<std::vector<at::Tensor>> views;
  views.reserve(lists.size());
  uint64_t bytes = 0;
  for (const auto& list : lists) {
    views.push_back(host(list));
    for (const auto& tensor : list) bytes += tensor.defined() ? tensor.nbytes() : 0;
  }
  payload_bytes_ = std::max(payload_bytes_, bytes);
  return views;
}

c10d::Backend& CollectiveCall::transport(c10d::Backend& backend) {
  ready();
  queue_.wait_queued();  // one order with the shared-memory collectives issued before
  return backend;
}

void CollectiveCall::ready() {
  if (ready_) return;
  run_here_on(device());
  ready_ = true;
}

void CollectiveCall::finally(std::function<void()> step) { finish_steps_.push_back(std::move(step)); }

std::vector<at::Tensor> CollectiveCall::staged(const std::vector<at::Tensor>& views, bool receives) {
  ready();
  std::vector<at::Tensor> stand_ins;
  for (const auto& view : views) {
    if (view.is_contiguous()) {
      stand_ins.push_back(view);
      continue;
    }
    at::Tensor copy = view.contiguous();
    stand_ins.push_back(copy);
    if (receives) {
      finish_steps_.insert(finish_steps_.begin(), [view, copy] { view.copy_(copy); });
    }
  }
  return stand_ins;
}

c10::intrusive_ptr<c10d::Work> CollectiveCall::run_shared(neuron_rt::ShmGroup& shm,
                                                          std::function<void(neuron_rt::ShmGroup&)> body,
                                                          c10::IValue value, std::vector<at::Tensor> outputs) {
  return run_queued([shm = &shm, body = std::move(body)] { body(*shm); }, &shm, std::move(value), std::move(outputs));
}

c10::intrusive_ptr<c10d::Work> CollectiveCall::run_shared(neuron_rt::ShmGroup& shm,
                                                          std::function<void(neuron_rt::ShmGroup&)> body,
                                                          const std::vector<at::Tensor>& outputs) {
  return run_shared(shm, std::move(body), c10::IValue(outputs), outputs);
}

c10::intrusive_ptr<c10d::Work> CollectiveCall::run_queued(std::function<void()> body, neuron_rt::ShmGroup* shm,
                                                          c10::IValue value, std::vector<at::Tensor> outputs) {
  ready();
  auto work = c10::make_intrusive<NeuronWork>(what_, rank_, type_, deadline_, limit_, std::move(value),
                                              std::move(outputs), nullptr, std::move(finish_steps_), future_devices());
  CollectiveQueue& queue = queue_;
  const Clock::time_point deadline = deadline_;
  // Issuing waits for the end in launch-blocking mode (issued()), and a synchronous caller
  // waits next: either way the calling thread can run it, in the queue's order.
  const bool here = caller_waits_ || runtime().launch_blocking();
  auto task = [&queue, work, deadline, shm, here, body = std::move(body)]() mutable {
    std::exception_ptr error;
    try {
      queue.wait_transport_works();
      // The Work's deadline: its error (naming the ranks waited for) lands just before
      // wait() would give up with a plainer one (Note [ProcessGroupNeuron], Faults).
      if (shm) {
        shm->set_timeout(std::max(Milliseconds(1), std::chrono::duration_cast<Milliseconds>(deadline - Clock::now())));
      }
      body();
    } catch (const neuron_rt::Error& e) {
      error = backend_error(e.what());
    } catch (...) {
      error = std::current_exception();
    }
    if (error && shm && shm->zero_copy()) keep_lent_memory(std::move(body));
    work->transport_finished(error);
    if (here) {
      // The caller holds the Work (run_queued's `work`) and its tensors (the call's arguments)
      // until it returns: these are not the last references, and dropping them takes no GIL.
      work.reset();
      body = nullptr;
    } else {
      release_off_transport(std::move(work), std::move(body));
    }
  };
  if (here) {
    queue.run_inline(std::move(task));
  } else {
    work->set_queued(queue.lane(), queue.enqueue(std::move(task)));
  }
  return issued(work);
}

c10::intrusive_ptr<c10d::Work> CollectiveCall::start(c10::intrusive_ptr<c10d::Work> transport_work, c10::IValue value,
                                                     std::vector<at::Tensor> outputs) {
  // Gloo's send and recv works have no future: a completion thread waits for them.
  c10::intrusive_ptr<c10::ivalue::Future> transport_future;
  try {
    transport_future = transport_work->getFuture();
  } catch (const c10::Error&) {
  }
  // Finishing steps must end before the transport's next collective starts: only works
  // with a future (whose callback runs on the transport's thread) may have them.
  TORCH_INTERNAL_ASSERT(transport_future || finish_steps_.empty(), name_, ": finishing steps on a transport work "
                        "without a future would race with the next collective");
  auto work = c10::make_intrusive<NeuronWork>(what_, rank_, type_, deadline_, limit_, std::move(value),
                                              std::move(outputs), transport_work, std::move(finish_steps_),
                                              transport_future ? future_devices() : std::vector<c10::Device>{});
  if (transport_future) {
    queue_.note_transport_work(work);  // not send/recv: a preposted recv must not hold up collectives
    // Runs on the transport's thread (or here, when it has already finished), so the
    // finishing steps end before the transport starts the next collective. The cycle
    // work -> transport work -> its future -> this callback ends when the future completes.
    transport_future->addCallback([work](c10::ivalue::Future& future) mutable {
      work->transport_finished(future.hasError() ? future.exception_ptr() : nullptr);
      release_off_transport(std::move(work));
    });
  } else {
    // Point-to-point: neither on the stream nor blocking in launch-blocking mode (Note
    // [Stream-ordered collectives]); its future completes when the transfer ends.
    note_collective_launch(nullptr);  // on no stream
    queue_.track(work);
    work->watch_transport();
    return work;
  }
  return issued(work);
}

c10::intrusive_ptr<c10d::Work> CollectiveCall::start(c10::intrusive_ptr<c10d::Work> transport_work,
                                                     const std::vector<at::Tensor>& outputs) {
  return start(std::move(transport_work), c10::IValue(outputs), outputs);
}

// The group's communication stream waits for the collective (a task: in launch-blocking mode
// it runs here), then the future completes with its events recorded on that stream.
c10::intrusive_ptr<c10d::Work> CollectiveCall::issued(const c10::intrusive_ptr<NeuronWork>& work) {
  queue_.track(work);  // before it may block here: abort() from another thread ends it
  // Waits until the Work completed or its deadline (and a moment for the transport's own
  // error) passed; never fails the stream: the Work carries the error.
  const Clock::time_point until = deadline_ + Milliseconds(500);
  const c10::Stream comm = queue_.comm_stream(device());
  neuron_rt::Stream& stream = NEURON_RT_CALL(runtime().stream(comm.device_index(), static_cast<int>(comm.id())));
  // The collective starts after the work issued before it on the current stream (ready() waited
  // for it): on the device timeline too, as ProcessGroupNCCL's stream waits for the current one.
  stream.timeline().wait_until(current_stream(device()).timeline().now_ns());
  note_collective_launch(&stream);
  // Its end on the device timeline: the launch was just appended to this stream's timeline.
  // wait() and synchronize() order the current stream after it; the future's events are
  // recorded on this stream below, after it, so waiting on the future orders it too.
  work->set_device_end(device(), stream.timeline().now_ns());
  NEURON_RT_CALL(stream.enqueue([signal = work->signal(), until] {
    std::unique_lock<std::mutex> lock(signal->mutex);
    signal->done_cv.wait_until(lock, until, [&] { return signal->done; });
  }));
  if (!work->isCompleted() && Clock::now() >= until) work->wait_on_stream();  // past its deadline: time it out
  c10::StreamGuard on_comm(comm);  // the future records its events on the communication stream
  work->complete_future_at_issue();
  return work;
}

void CollectiveCall::note_collective_launch(const neuron_rt::Stream* stream) {
  TORCH_INTERNAL_ASSERT(!launched_, name_, ": one collective call issued two launches");
  launched_ = true;
  // Note [Device clock]: the collective's bytes, ranks, link and algorithm. Reductions to one
  // rank and barriers are costed as allreduces (a barrier of no bytes: its latency), gathers,
  // scatters and all-to-alls as one ring pass.
  neuron_rt::CollectiveWork work;
  work.bytes = payload_bytes_;
  work.ranks = ranks_;
  work.link = across_hosts_ ? neuron_rt::CollectiveLink::kEFA : neuron_rt::CollectiveLink::kNeuronLink;
  switch (type_) {
    case c10d::OpType::BROADCAST:
      work.algorithm = neuron_rt::CollectiveAlgorithm::kBroadcast;
      break;
    case c10d::OpType::ALLGATHER:
    case c10d::OpType::_ALLGATHER_BASE:
    case c10d::OpType::ALLGATHER_COALESCED:
    case c10d::OpType::GATHER:
    case c10d::OpType::COALESCED:
      work.algorithm = neuron_rt::CollectiveAlgorithm::kRingAllGather;
      break;
    case c10d::OpType::REDUCE_SCATTER:
    case c10d::OpType::_REDUCE_SCATTER_BASE:
    case c10d::OpType::SCATTER:
    case c10d::OpType::ALLTOALL:
    case c10d::OpType::ALLTOALL_BASE:
      work.algorithm = neuron_rt::CollectiveAlgorithm::kRingReduceScatter;
      break;
    case c10d::OpType::SEND:
    case c10d::OpType::RECV:
    case c10d::OpType::RECVANYSOURCE:
      work.algorithm = neuron_rt::CollectiveAlgorithm::kPointToPoint;
      break;
    default:  // allreduce, allreduce_coalesced, reduce, barrier
      work.algorithm = neuron_rt::CollectiveAlgorithm::kRingAllReduce;
      break;
  }
  LaunchOperands operands;
  operands.collective = &work;
  note_launch(LaunchPath::kCollective, name_, device(), stream, operands);
}

std::vector<c10::Device> CollectiveCall::future_devices() const { return {c10::Device(kNeuron, device())}; }

}  // namespace torch_neuron
