// What runs at Python's atexit, before the interpreter finalizes: the threads that may still drop
// a Python-owned object (autograd's device threads, the completions of point-to-point works,
// the collectives' releaser) are let finish (Note [Completions at exit]).
#include <torch/csrc/autograd/autograd.h>
#include <torch/extension.h>

#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include "NeuronCommon.h"
#include "distributed/ProcessGroupNeuron.h"

namespace torch_neuron {

namespace {

// Note [The autograd device thread at exit]
// PyTorch's engine runs the backward of neuron tensors on its device thread (one per device
// index). Every backward stashes a Python object (contextvars.copy_context()) in the calling
// thread's TLS, which the GraphTask's ThreadLocalState copies; the device thread may hold the
// last reference to that GraphTask for a moment after the caller returned (upstream: PyTorch
// PR 180701). Dropping it decrefs the object: it waits for the GIL. If Python starts finalizing
// first, taking the GIL ends the thread (pthread_exit) while it unwinds through a noexcept
// destructor: std::terminate, "terminate called without an active exception" (make
// test-distributed, tests/distributed/regressions/ (a group freed after destroy_process_group): about 1 process in 20; a compile training test
// in make test). CUDA has the same race; its device threads are just rarely this late.
// The flush: a zero-size backward on each device index, from a fresh thread (its TLS holds no
// Python object), with the GIL released. The device thread runs tasks one at a time, so once
// this backward ends, whatever it was dropping before is dropped. It waits behind any backward
// still running (a daemon thread's, which may never end): after
// kFlushLimit the exit goes on without it, as it did before the flush existed.
constexpr std::chrono::seconds kFlushLimit{5};

void flush_autograd_device_threads() {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> flushed = done->get_future();
  std::thread([done] {
    try {
      auto& rt = neuron_rt::Runtime::get();
      for (int device = 0; device < rt.device_count(); ++device) {
        const auto options = at::TensorOptions().device(c10::Device(c10::DeviceType::PrivateUse1, c10::DeviceIndex(device)));
        at::Tensor leaf = at::empty({0}, options).requires_grad_(true);
        torch::autograd::backward({leaf}, {at::empty({0}, options)});
      }
    } catch (...) {
      // at exit: a device that fails now has nothing left to flush
    }
    done->set_value();
  }).detach();
  flushed.wait_for(kFlushLimit);
}

}  // namespace

void quiesce_for_exit() {
  if (!neuron_rt::Runtime::initialized() || neuron_rt::Runtime::in_bad_fork()) return;
  flush_autograd_device_threads();
  quiesce_collectives_for_exit();
}

}  // namespace torch_neuron
