// DeviceGuardImpl of the neuron device: current device and stream per thread,
// events, synchronization. Contracts: c10/core/impl/DeviceGuardImplInterface.h.
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "DeviceClock.h"
#include "HostWait.h"
#include "NeuronAllocator.h"
#include "Launch.h"
#include "NeuronCommon.h"

namespace torch_neuron {
namespace {

constexpr c10::DeviceType kNeuron = c10::DeviceType::PrivateUse1;

neuron_rt::Event* as_event(void* event) { return static_cast<neuron_rt::Event*>(event); }

struct NeuronGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kNeuron; }

  c10::Device exchangeDevice(c10::Device device) const override {
    // The current device is the thread's; choosing one starts nothing (Note [Counting devices
    // without starting the runtime] in runtime/device.h).
    auto old = neuron_rt::Runtime::current_device_index();
    if (device.index() != old) NEURON_RT_CALL(neuron_rt::Runtime::set_current_device_index(device.index()));
    return c10::Device(kNeuron, static_cast<c10::DeviceIndex>(old));
  }
  c10::Device getDevice() const override {
    return c10::Device(kNeuron, static_cast<c10::DeviceIndex>(neuron_rt::Runtime::current_device_index()));
  }
  void setDevice(c10::Device device) const override {
    NEURON_RT_CALL(neuron_rt::Runtime::set_current_device_index(device.index()));
  }
  void uncheckedSetDevice(c10::Device device) const noexcept override {
    try {
      neuron_rt::Runtime::set_current_device_index(device.index());
    } catch (...) {
    }
  }
  c10::Stream getStream(c10::Device device) const override {
    auto& rt = runtime();
    return c10::Stream(c10::Stream::UNSAFE, device, rt.current_stream(device.index()));
  }
  c10::Stream getDefaultStream(c10::Device device) const override {
    NEURON_RT_CALL(runtime().check_device(device.index()));
    return c10::Stream(c10::Stream::UNSAFE, device, 0);
  }
  c10::Stream getNewStream(c10::Device device, int /*priority*/) const override {
    return c10::Stream(c10::Stream::UNSAFE, device, NEURON_RT_CALL(runtime().next_pool_stream(device.index())));
  }
  c10::Stream getStreamFromGlobalPool(c10::Device device, bool /*high_priority*/) const override {
    return getNewStream(device, 0);
  }
  c10::Stream exchangeStream(c10::Stream stream) const override {
    auto& rt = runtime();
    auto device = stream.device_index();
    auto old = rt.current_stream(device);
    NEURON_RT_CALL(rt.set_current_stream(device, static_cast<int>(stream.id())));
    return c10::Stream(c10::Stream::UNSAFE, stream.device(), old);
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    try {
      return static_cast<c10::DeviceIndex>(neuron_rt::Runtime::visible_device_count());
    } catch (...) {
      return 0;  // REQUIRED not to raise
    }
  }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag /*flag*/) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(), "Event device index ",
                device_index, " does not match recording stream's device index ",
                stream.device_index(), ".");
    if (!*event) *event = new neuron_rt::Event();
    auto& s = NEURON_RT_CALL(runtime().stream(stream.device_index(), static_cast<int>(stream.id())));
    end_concatenation_group(s);  // Note [Adaptive Eager Execution]: an event ends a group
    as_event(*event)->record(s);
  }
  void block(void* event, const c10::Stream& stream) const override {
    if (!event) return;
    auto& s = NEURON_RT_CALL(runtime().stream(stream.device_index(), static_cast<int>(stream.id())));
    end_concatenation_group(s);
    as_event(event)->wait(s);
  }
  bool queryEvent(void* event) const override { return !event || NEURON_RT_CALL(as_event(event)->query()); }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    delete as_event(event);
  }
  void synchronizeEvent(void* event) const override {
    if (event) without_gil([&] { NEURON_RT_CALL(as_event(event)->synchronize()); });
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start && end, "Both events must be recorded before calculating elapsed time.");
    // Note [Device clock]: predicted device time while the clock is on (NEURON_SIM_DEVICE_CLOCK).
    if (device_clock_on()) return NEURON_RT_CALL(as_event(start)->device_elapsed_ms(*as_event(end)));
    return NEURON_RT_CALL(as_event(start)->elapsed_ms(*as_event(end)));
  }
  bool queryStream(const c10::Stream& stream) const override {
    return NEURON_RT_CALL(runtime().stream(stream.device_index(), static_cast<int>(stream.id())).query());
  }
  void synchronizeStream(const c10::Stream& stream) const override {
    auto& s = NEURON_RT_CALL(runtime().stream(stream.device_index(), static_cast<int>(stream.id())));
    // Note [Adaptive Eager Execution]: the user's synchronisation ends a group on the clock,
    // whether or not the stream has work to wait for (the simulator's own drains do not: they
    // depend on where the host runs ops, and predictions must not)
    end_concatenation_group(s);
    synchronize_stream(s);
  }
  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    end_concatenation_groups(device_index);  // Note [Adaptive Eager Execution]
    without_gil([&] { NEURON_RT_CALL(runtime().synchronize(device_index)); });
  }
  // tensor.record_stream(s): the memory is reused only after `s` has run what it had queued
  // when the tensor was freed (Note [Buffers]).
  void recordDataPtrOnStream(const c10::DataPtr& data_ptr, const c10::Stream& stream) const override {
    neuron_rt::Buffer* buffer = buffer_of(data_ptr);
    if (!buffer) return;  // not the runtime's allocation: nothing to order
    auto& s = NEURON_RT_CALL(runtime().stream(stream.device_index(), static_cast<int>(stream.id())));
    NEURON_RT_CALL(buffer->record_stream(s));
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, NeuronGuardImpl);

}  // namespace
}  // namespace torch_neuron
