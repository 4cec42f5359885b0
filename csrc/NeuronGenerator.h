// Random number generators of the neuron device.
//
// Note [Philox generator]
// A NeuronGeneratorImpl is a counter-based generator, as CUDA's: Philox4x32-10 (ATen's
// at::philox_engine, the algorithm of curand's Philox), keyed by a 64-bit seed. Its state is
// 16 bytes: an 8-byte seed followed by an 8-byte offset (the layout of CUDA's generator, which
// DTensor's RNG tracker reads and the real TorchNeuron documents). The offset counts 32-bit
// words: a random op on n elements takes the words [offset, offset + n) of the stream (n
// rounded up to a multiple of 4, as CUDA's and DTensor's offsets are) and advances the offset
// past them, at the call. Element i of that op draws its k-th number from word offset + i of
// Philox subsequence k (csrc/kernels/Random.cpp), so an op's values depend only on the seed,
// its start offset and each element's row-major index: not on threads, streams, or the number
// of draws an element needs; and a shard of n/s elements started at offset + j * n/s gives
// the values the whole tensor has there. DTensor starts shard j at offset + round_up_4(j * n/s),
// so its shards give one device's values when n/s is a multiple of 4 (elsewhere distinct,
// reproducible values, shifted by the rounding).
//
// Locking: kernels take the generator's mutex_ (GeneratorImpl's) while they reserve words;
// Python takes the same mutex around every state method (manual_seed, get_state, ...), as it
// does for CUDA's generator. Nothing waits for the device: the state changes at the call,
// and a queued kernel carries the words it was given.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/util/intrusive_ptr.h>

#include <optional>

namespace torch_neuron {

// Where one random op's numbers start: Philox key `seed`, word `offset` (Note [Philox generator]).
struct PhiloxDraws {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

class NeuronGeneratorImpl final : public c10::GeneratorImpl {
 public:
  explicit NeuronGeneratorImpl(c10::DeviceIndex device, uint64_t seed = c10::default_rng_seed_val);
  // The seed; the offset goes back to 0.
  void set_current_seed(uint64_t seed) override;
  uint64_t current_seed() const override;
  // A non-deterministic seed, set and returned.
  uint64_t seed() override;
  // The offset, in 32-bit words (CUDA's "philox offset per thread").
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  // 16 bytes (uint8): the seed, then the offset, both little-endian 64-bit.
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  // As CUDA's: graphsafe_get_state returns a generator sharing this one's (seed, offset);
  // graphsafe_set_state makes this generator use the state of `state` (no copy).
  void graphsafe_set_state(const c10::intrusive_ptr<c10::GeneratorImpl>& state) override;
  c10::intrusive_ptr<c10::GeneratorImpl> graphsafe_get_state() const override;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  // Takes the words of one op drawing for `elements` elements and advances the offset past
  // them (rounded up to a multiple of 4). The caller holds mutex_.
  PhiloxDraws reserve(uint64_t elements);

  struct State : c10::intrusive_ptr_target {
    uint64_t seed = c10::default_rng_seed_val;
    uint64_t offset = 0;
  };

 private:
  NeuronGeneratorImpl* clone_impl() const override;
  c10::intrusive_ptr<State> state_;
};

const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator make_generator(c10::DeviceIndex device);
// The generator a random op on neuron `device` draws from: `generator`, which must be a
// neuron generator of that core (CUDA's messages otherwise), or the device's default.
NeuronGeneratorImpl* generator_for(const std::optional<at::Generator>& generator, c10::DeviceIndex device);
// A CPU generator seeded from the next words of `generator` (or the device's default), for a
// CPU kernel that insists on one: the generic path's random ops (none of ATen's: they have
// kernels of ours, csrc/kernels/Random.cpp), so that they too follow torch.neuron's seed.
at::Generator cpu_generator_for(const std::optional<at::Generator>& generator, c10::DeviceIndex device);
// A new generator of core `device` at `state` (16 bytes, as get_state() makes it; a CPU or
// host-view uint8 tensor): Note [Random ops replayed in compiled graphs] in kernels/Random.cpp.
at::Generator generator_from_state(c10::DeviceIndex device, const at::Tensor& state);
// Reserves `elements` elements' words of `generator` (or the device's default) under its lock.
PhiloxDraws reserve_draws(const std::optional<at::Generator>& generator, c10::DeviceIndex device, uint64_t elements);

}  // namespace torch_neuron
