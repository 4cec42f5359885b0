#include "NeuronGenerator.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/EmptyTensor.h>
#include <ATen/core/PhiloxRNGEngine.h>
#include <ATen/Utils.h>
#include <c10/core/TensorImpl.h>

#include <cstring>
#include <deque>
#include <mutex>

#include "NeuronCommon.h"

namespace torch_neuron {

namespace {
constexpr size_t kStateBytes = 2 * sizeof(uint64_t);  // seed, offset
}  // namespace

NeuronGeneratorImpl::NeuronGeneratorImpl(c10::DeviceIndex device, uint64_t seed)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      state_(c10::make_intrusive<State>()) {
  state_->seed = seed;
}

void NeuronGeneratorImpl::set_current_seed(uint64_t seed) {
  state_->seed = seed;
  state_->offset = 0;
}
uint64_t NeuronGeneratorImpl::current_seed() const { return state_->seed; }

uint64_t NeuronGeneratorImpl::seed() {
  const uint64_t random = c10::detail::getNonDeterministicRandom(/*is_cuda=*/true);
  set_current_seed(random);
  return random;
}

void NeuronGeneratorImpl::set_offset(uint64_t offset) { state_->offset = offset; }
uint64_t NeuronGeneratorImpl::get_offset() const { return state_->offset; }

void NeuronGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  at::detail::check_rng_state(new_state);
  TORCH_CHECK(size_t(new_state.numel()) == kStateBytes,
              "a neuron generator's state is ", kStateBytes, " bytes (an 8-byte seed, then an 8-byte offset: "
              "Philox, as CUDA's), but the state given has ", new_state.numel(),
              " bytes. Pass a state from torch.neuron.get_rng_state() or a neuron Generator's get_state() "
              "(a CPU generator's state does not fit a neuron generator)");
  const auto* bytes = new_state.data_dtype_initialized<uint8_t>();
  uint64_t seed = 0, offset = 0;
  std::memcpy(&seed, bytes, sizeof(seed));
  std::memcpy(&offset, bytes + sizeof(seed), sizeof(offset));
  state_->seed = seed;
  state_->offset = offset;
}

c10::intrusive_ptr<c10::TensorImpl> NeuronGeneratorImpl::get_state() const {
  auto state = at::detail::empty_cpu({int64_t(kStateBytes)}, at::kByte, std::nullopt, std::nullopt, std::nullopt,
                                     std::nullopt);
  auto* bytes = state.data_ptr<uint8_t>();
  std::memcpy(bytes, &state_->seed, sizeof(uint64_t));
  std::memcpy(bytes + sizeof(uint64_t), &state_->offset, sizeof(uint64_t));
  return state.getIntrusivePtr();
}

void NeuronGeneratorImpl::graphsafe_set_state(const c10::intrusive_ptr<c10::GeneratorImpl>& state) {
  auto* other = dynamic_cast<NeuronGeneratorImpl*>(state.get());
  TORCH_CHECK(other, "graphsafe_set_state of a neuron generator expects a neuron generator, got a '",
              state->device().type(), "' generator");
  state_ = other->state_;
}

c10::intrusive_ptr<c10::GeneratorImpl> NeuronGeneratorImpl::graphsafe_get_state() const {
  auto shared = c10::make_intrusive<NeuronGeneratorImpl>(device().index());
  shared->state_ = state_;
  return shared;
}

PhiloxDraws NeuronGeneratorImpl::reserve(uint64_t elements) {
  PhiloxDraws draws{state_->seed, state_->offset};
  state_->offset += (elements + 3) / 4 * 4;
  return draws;
}

NeuronGeneratorImpl* NeuronGeneratorImpl::clone_impl() const {
  auto* copy = new NeuronGeneratorImpl(device().index(), state_->seed);
  copy->state_->offset = state_->offset;
  return copy;
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  static std::mutex mutex;
  static std::deque<at::Generator> generators;  // stable addresses, never destroyed
  // No runtime needed (Note [Counting devices without starting the runtime]): seeding does not
  // start the device, as CUDA's manual_seed does not create a context.
  if (device < 0) device = static_cast<c10::DeviceIndex>(neuron_rt::Runtime::current_device_index());
  NEURON_RT_CALL(neuron_rt::Runtime::check_visible_device(device));
  std::lock_guard<std::mutex> lock(mutex);
  while (generators.size() < size_t(neuron_rt::Runtime::visible_device_count())) {
    auto index = static_cast<c10::DeviceIndex>(generators.size());
    generators.push_back(at::make_generator<NeuronGeneratorImpl>(index));
  }
  return generators[device];
}

at::Generator make_generator(c10::DeviceIndex device) {
  if (device < 0) device = static_cast<c10::DeviceIndex>(neuron_rt::Runtime::current_device_index());
  NEURON_RT_CALL(neuron_rt::Runtime::check_visible_device(device));
  return at::make_generator<NeuronGeneratorImpl>(device);
}

NeuronGeneratorImpl* generator_for(const std::optional<at::Generator>& generator, c10::DeviceIndex device) {
  if (!generator.has_value() || !generator->defined()) {
    return default_generator(device).get<NeuronGeneratorImpl>();
  }
  // CUDA's message: "Expected a 'cuda' device type for generator but found 'cpu'"
  auto* impl = at::check_generator<NeuronGeneratorImpl>(generator);
  TORCH_CHECK(device < 0 || generator->device().index() == device, "Expected a 'neuron:", int(device),
              "' generator device but found '", generator->device(), "' (as CUDA, a generator draws for its own core)");
  return impl;
}

at::Generator generator_from_state(c10::DeviceIndex device, const at::Tensor& state) {
  TORCH_CHECK(state.device().is_cpu() && state.scalar_type() == at::kByte && state.is_contiguous(),
              "a neuron generator's state is a contiguous uint8 tensor in host memory, got ", state.toString(),
              " on ", state.device());
  at::Generator generator = make_generator(device);
  generator.get<NeuronGeneratorImpl>()->set_state(*state.unsafeGetTensorImpl());
  return generator;
}

PhiloxDraws reserve_draws(const std::optional<at::Generator>& generator, c10::DeviceIndex device, uint64_t elements) {
  NeuronGeneratorImpl* impl = generator_for(generator, device);
  std::lock_guard<std::mutex> lock(impl->mutex_);
  return impl->reserve(elements);
}

at::Generator cpu_generator_for(const std::optional<at::Generator>& generator, c10::DeviceIndex device) {
  const PhiloxDraws draws = reserve_draws(generator, device, 2);
  at::philox_engine engine(draws.seed, 0, draws.offset / 4);
  for (uint64_t skip = draws.offset % 4; skip > 0; --skip) engine();
  const uint64_t low = engine();
  return at::make_generator<at::CPUGeneratorImpl>((uint64_t(engine()) << 32) | low);
}

}  // namespace torch_neuron
