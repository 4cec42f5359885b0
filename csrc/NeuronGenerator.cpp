#include "NeuronGenerator.h"

#include <deque>
#include <mutex>

#include "NeuronCommon.h"

namespace torch_neuron {

NeuronGeneratorImpl::NeuronGeneratorImpl(c10::DeviceIndex device, uint64_t seed)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      engine_(at::make_generator<at::CPUGeneratorImpl>(seed)) {}

namespace {
// Waits for queued work on `device` (see the header) unless the runtime is not running.
// The GIL stays held: Python calls these methods holding this generator's mutex, and
// another Python thread may hold the GIL while it waits for that mutex. (Queued work never
// needs the GIL.) The communication streams are not waited for: no kernel draws random
// numbers there, and their tasks wait for peers, which may wait for this rank's next
// collective of another group (review 10, finding 3; PowerSGD's hook calls manual_seed).
void drain(c10::DeviceIndex device) {
  if (!neuron_rt::Runtime::initialized() || neuron_rt::Runtime::in_bad_fork()) return;
  auto& rt = runtime();
  if (rt.launch_blocking()) return;
  NEURON_RT_CALL(rt.synchronize(device, /*communication=*/false));
}
}  // namespace

void NeuronGeneratorImpl::set_current_seed(uint64_t seed) {
  drain(device().index());
  std::lock_guard<std::mutex> lock(engine_.mutex());
  engine_.set_current_seed(seed);
}
void NeuronGeneratorImpl::set_offset(uint64_t offset) {
  drain(device().index());
  std::lock_guard<std::mutex> lock(engine_.mutex());
  engine_.set_offset(offset);
}
uint64_t NeuronGeneratorImpl::get_offset() const {
  drain(device().index());
  std::lock_guard<std::mutex> lock(engine_.mutex());
  return engine_.get_offset();
}
uint64_t NeuronGeneratorImpl::current_seed() const {
  std::lock_guard<std::mutex> lock(engine_.mutex());
  return engine_.current_seed();
}
uint64_t NeuronGeneratorImpl::seed() {
  drain(device().index());
  std::lock_guard<std::mutex> lock(engine_.mutex());
  return engine_.seed();
}
void NeuronGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  drain(device().index());
  std::lock_guard<std::mutex> lock(engine_.mutex());
  engine_.unsafeGetGeneratorImpl()->set_state(new_state);
}
c10::intrusive_ptr<c10::TensorImpl> NeuronGeneratorImpl::get_state() const {
  drain(device().index());
  std::lock_guard<std::mutex> lock(engine_.mutex());
  return engine_.unsafeGetGeneratorImpl()->get_state();
}
NeuronGeneratorImpl* NeuronGeneratorImpl::clone_impl() const {
  drain(device().index());
  auto* copy = new NeuronGeneratorImpl(device().index());
  std::lock_guard<std::mutex> lock(engine_.mutex());
  copy->engine_ = engine_.clone();
  return copy;
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  static std::mutex mutex;
  static std::deque<at::Generator> generators;  // stable addresses, never destroyed
  auto& rt = runtime();
  if (device < 0) device = static_cast<c10::DeviceIndex>(rt.current_device());
  NEURON_RT_CALL(rt.check_device(device));
  std::lock_guard<std::mutex> lock(mutex);
  while (generators.size() < size_t(rt.device_count())) {
    auto index = static_cast<c10::DeviceIndex>(generators.size());
    generators.push_back(at::make_generator<NeuronGeneratorImpl>(index));
  }
  return generators[device];
}

at::Generator make_generator(c10::DeviceIndex device) {
  if (device < 0) device = static_cast<c10::DeviceIndex>(runtime().current_device());
  NEURON_RT_CALL(runtime().check_device(device));
  return at::make_generator<NeuronGeneratorImpl>(device);
}

at::Generator engine_for(const std::optional<at::Generator>& generator, c10::DeviceIndex device) {
  if (!generator.has_value() || !generator->defined()) {
    return default_generator(device).get<NeuronGeneratorImpl>()->engine();
  }
  auto type = generator->device().type();
  if (type == c10::DeviceType::CPU) return *generator;
  TORCH_CHECK(type == c10::DeviceType::PrivateUse1,
              "Expected a 'neuron' or 'cpu' generator for an op on neuron, but got a '",
              generator->device().type(), "' generator");
  TORCH_CHECK(device < 0 || generator->device().index() == device, "Expected a 'neuron:", int(device),
              "' generator device but found '", generator->device(), "' (as CUDA, a generator draws for its own core)");
  return generator->get<NeuronGeneratorImpl>()->engine();
}

}  // namespace torch_neuron
