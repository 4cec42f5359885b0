// Random ops of the neuron device: every ATen op that draws random numbers has a kernel of
// ours drawing from the device's Philox generator (Note [Philox generator] in
// NeuronGenerator.h), never from the CPU's generator, on every path: eager (at the call or
// queued: the words are taken at the call, so a queued kernel draws what it would have drawn
// at once), and compiled programs (HostDrawScope below).
//
// Note [Random kernels]
// As CUDA does, the kernels are ATen's own device-generic code (the argument checks and
// compositions of ATen/native/DistributionTemplates.h, the distributions of
// ATen/core/DistributionsHelper.h and ATen/native/Distributions.h) instantiated with a
// source of numbers of ours in place of curand: element i of an op (row-major order) draws
// its k-th number from word offset + i of Philox subsequence k. Ops whose CPU kernel is
// device-specific get ours with CPU's contract (native_dropout, multinomial, randperm,
// poisson, _standard_gamma, _sample_dirichlet, binomial, rrelu_with_noise).
//
// A neuron generator given to an op on CPU tensors reaches these kernels (the dispatcher
// picks the generator's backend, as it picks CUDA's for a CUDA generator); they raise CPU's
// message, which names the generator.
#pragma once

#include <c10/core/Device.h>

namespace torch_neuron {

// While it lives, random ops on CPU tensors on this thread are a compiled program's steps on
// host views of device `device`'s memory: they run at once, on those tensors, drawing from
// the generator they are given (the program passes the device's default). Not thread-safe
// (thread-local); nests.
class HostDrawScope {
 public:
  // The device of the innermost scope on this thread, -1 outside one.
  static c10::DeviceIndex device();

  explicit HostDrawScope(c10::DeviceIndex device);
  ~HostDrawScope();
  HostDrawScope(const HostDrawScope&) = delete;
  HostDrawScope& operator=(const HostDrawScope&) = delete;

 private:
  c10::DeviceIndex previous_;
};

}  // namespace torch_neuron
