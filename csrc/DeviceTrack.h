// The profiler's device track in the bridge (runtime/device_track.h holds the spans). Three
// parts:
//  - the device clock's observer (DeviceClock.cpp) hands each launch it costed, with the span
//    its stream's timeline gave it, to record_device_span() while recording is on: nothing is
//    costed twice, and with recording off the clock pays one relaxed load;
//  - a Kineto plugin (registered at import, register_device_track_profiler()) starts recording
//    when a torch.profiler profile starts and stops it when it stops, if its experimental_config
//    is a NeuronConfig whose modes include "device" (torch_neuronx.profiling): Kineto's public
//    hook for a device's activities (libkineto's IActivityProfiler), so torch is not patched;
//  - Python takes the spans (_C._device_track_stop) and merges them into the Chrome trace.
// Needs the device clock (NEURON_SIM_DEVICE_CLOCK=1, the default): with it off, starting or
// taking the track raises, saying how to turn the clock on.
//
// Thread safety: any function from any thread.
#pragma once

#include "DeviceClock.h"
#include "Launch.h"
#include "runtime/device_track.h"
#include "runtime/timeline.h"

namespace torch_neuron {

namespace detail {
extern neuron_rt::DeviceTrack& device_track;  // the process's (DeviceTrack::get())
}
// True while the track records (one relaxed load).
inline bool device_track_recording() { return detail::device_track.recording(); }

// Records `launch`, costed `cost` and placed at `span` on `stream`'s timeline. Launches that
// cost nothing (the simulator's own bookkeeping, such as adopting a kernel's host result)
// leave no span.
void record_device_span(const Launch& launch, const neuron_rt::Stream& stream, const LaunchCost& cost,
                        neuron_rt::TimelineSpan span);

// Throws, naming NEURON_SIM_DEVICE_CLOCK, when the device clock is off.
void check_device_track_available();
// Starts a recording (forgetting the previous one's spans).
void start_device_track();
// Stops recording and hands over its spans and how many the capacity dropped.
neuron_rt::DeviceTrack::Recording stop_device_track();

// Registers the Kineto plugin above (once; later calls do nothing).
void register_device_track_profiler();

}  // namespace torch_neuron
