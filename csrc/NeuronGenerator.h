// Random number generators of the neuron device.
//
// A NeuronGenerator is a PrivateUse1 generator whose state is a CPU mt19937 engine
// (an at::CPUGeneratorImpl): random kernels are ATen CPU kernels run on device memory
// (Note [Zero-copy kernels]), and they are handed the engine. manual_seed, seed,
// initial_seed, get_state and set_state behave as on CPU, so a seeded neuron run draws the
// same numbers as a seeded CPU run.
//
// One lock. CPU kernels insist on a generator of device type CPU (at::check_generator), so
// the neuron generator cannot be that generator itself (openreg subclasses
// CPUGeneratorImpl, but its kernels do not draw from it); kernels lock the engine's mutex
// while they draw, and every method here takes that same mutex, so no draw ever sees a
// state change half-way (Python also takes this object's own mutex first, harmlessly).
//
// Asynchronous mode: a random op may still be queued when the host reads or changes the
// state; every state method first waits for the device's streams, so the state it sees
// or sets is the one the queued draws left or will not touch.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

namespace torch_neuron {

class NeuronGeneratorImpl final : public c10::GeneratorImpl {
 public:
  explicit NeuronGeneratorImpl(c10::DeviceIndex device, uint64_t seed = c10::default_rng_seed_val);
  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }
  // The CPU generator that kernels draw from.
  const at::Generator& engine() const { return engine_; }

 private:
  NeuronGeneratorImpl* clone_impl() const override;
  mutable at::Generator engine_;  // mutable: its mutex is taken in const methods
};

const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator make_generator(c10::DeviceIndex device);
// The engine to hand a CPU kernel for `generator` (the default generator of
// `device` when `generator` is empty).
at::Generator engine_for(const std::optional<at::Generator>& generator, c10::DeviceIndex device);

}  // namespace torch_neuron
