#include "DeviceTrack.h"

#include <c10/util/Exception.h>

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#if __has_include(<kineto/libkineto.h>)
#include <kineto/IActivityProfiler.h>
#include <kineto/libkineto.h>
#define NEURON_HAS_KINETO 1
#endif

namespace torch_neuron {

namespace detail {
neuron_rt::DeviceTrack& device_track = neuron_rt::DeviceTrack::get();
}

void record_device_span(const Launch& launch, const neuron_rt::Stream& stream, const LaunchCost& cost,
                        neuron_rt::TimelineSpan span) {
  if (span.end_ns == span.start_ns) return;
  neuron_rt::DeviceSpan s;
  s.device = launch.device;
  s.stream = stream.id();
  s.start_ns = span.start_ns;
  s.end_ns = span.end_ns;
  s.name = launch.name ? launch.name : "";
  s.path = launch_path_name(launch.path);
  s.fixed_ns = cost.cost.fixed_ns;
  s.compute_ns = cost.cost.compute_ns;
  s.memory_ns = cost.cost.memory_ns;
  if (launch.path == LaunchPath::kProgram) {
    s.engine = neuron_rt::Engine::kProgram;
    s.work = "program";
  } else if (launch.path == LaunchPath::kCollective) {
    s.engine = neuron_rt::Engine::kCollective;
    s.work = "collective";
    if (launch.operands.collective) s.bytes = launch.operands.collective->bytes;
  } else if (cost.part_count > 0) {
    // An attention's parts (matmul, softmax, matmul) show as their first: TensorE.
    s.engine = neuron_rt::engine_of(cost.parts[0].kind);
    s.work = neuron_rt::work_kind_name(cost.parts[0].kind);
    for (int i = 0; i < cost.part_count; ++i) {
      const neuron_rt::Work& part = cost.parts[i];
      s.bytes += part.hbm_bytes_read + part.hbm_bytes_written;
      if (part.kind == neuron_rt::WorkKind::kMatmul) {
        s.flops += uint64_t(2 * part.matmul.batch * part.matmul.m * part.matmul.k * part.matmul.n);
      }
    }
  }
  detail::device_track.record(std::move(s));
}

void check_device_track_available() {
  TORCH_CHECK(device_clock_on(),
              "the profiler's device track needs the device clock, which is off (NEURON_SIM_DEVICE_CLOCK=0); "
              "unset NEURON_SIM_DEVICE_CLOCK or set it to 1 before importing torch_neuronx, or profile without "
              "ProfileMode.DEVICE");
}

void start_device_track() {
  check_device_track_available();
  detail::device_track.start();
}

neuron_rt::DeviceTrack::Recording stop_device_track() {
  check_device_track_available();
  return detail::device_track.take();
}

// ---- the Kineto plugin ------------------------------------------------------------------------

namespace {

// True when a NeuronConfig's custom string ("modes:device,runtime;profile_output_dir:...")
// asks for the device track.
bool asks_for_device_track(const std::string& custom) {
  std::string_view rest(custom);
  while (!rest.empty()) {
    const size_t end = rest.find(';');
    std::string_view field = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    if (field.rfind("modes:", 0) != 0) continue;
    field.remove_prefix(6);
    while (!field.empty()) {
      const size_t comma = field.find(',');
      if (field.substr(0, comma) == "device") return true;
      field = comma == std::string_view::npos ? std::string_view() : field.substr(comma + 1);
    }
  }
  return false;
}

#ifdef NEURON_HAS_KINETO
// A profile's session: records between Kineto's start and stop. The spans are not given to
// Kineto (processTrace adds nothing): torch_neuronx.profiling merges them into the Chrome
// trace, aligned with the host's events.
class DeviceTrackSession final : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    detail::device_track.start();
    status_ = libkineto::TraceStatus::RECORDING;
  }
  void stop() override {
    detail::device_track.stop();
    status_ = libkineto::TraceStatus::READY;
  }
  std::vector<std::string> errors() override { return {}; }
  void processTrace(libkineto::ActivityLogger&) override {}
  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override { return nullptr; }
  std::vector<libkineto::ResourceInfo> getResourceInfos() override { return {}; }
  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return nullptr; }
};

class DeviceTrackProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<libkineto::ActivityType>& availableActivities() const override { return activities_; }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<libkineto::ActivityType>&,
                                                                 const libkineto::Config& config) override {
    // No session (Kineto runs none) unless the profile asks for the device track and the
    // clock runs (NeuronConfig raised already when it does not).
    if (!device_clock_on() || !asks_for_device_track(config.getCustomConfig())) return nullptr;
    return std::make_unique<DeviceTrackSession>();
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(int64_t, int64_t,
                                                                 const std::set<libkineto::ActivityType>& activities,
                                                                 const libkineto::Config& config) override {
    return configure(activities, config);
  }

 private:
  const std::string name_ = "neuron device track (predicted)";
  const std::set<libkineto::ActivityType> activities_{libkineto::ActivityType::PRIVATEUSE1_RUNTIME};
};
#endif

}  // namespace

void register_device_track_profiler() {
#ifdef NEURON_HAS_KINETO
  static std::once_flag registered;
  std::call_once(registered, [] {
    libkineto::api().registerProfilerFactory([] { return std::make_unique<DeviceTrackProfiler>(); });
  });
#endif
}

}  // namespace torch_neuron
