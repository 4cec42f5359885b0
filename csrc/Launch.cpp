#include "Launch.h"

#include <ATen/Config.h>
#include <ATen/Parallel.h>
#if AT_PARALLEL_OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <array>
#include <atomic>
#include <limits>
#include <mutex>

#include "HostWait.h"
#include "NeuronLogging.h"
#include "OpTracking.h"

namespace torch_neuron {

const char* launch_path_name(LaunchPath path) {
  static const char* names[kLaunchPaths] = {"direct", "generic", "queued", "program", "collective", "copy"};
  return names[size_t(path)];
}

bool asynchronous() { return !runtime().launch_blocking(); }

int64_t inline_bytes_limit() {
  static const int64_t limit = [] {
    const char* value = std::getenv("NEURON_SIM_INLINE_BYTES");
    if (value && *value) return std::max<int64_t>(0, std::atoll(value));
    // Note [Shared cores]: a queued op would wait for the worker to get a core the host thread
    // could have run it on; every op on an idle stream runs at the call.
    return runtime().shared_cores() ? std::numeric_limits<int64_t>::max() : int64_t(64) << 10;
  }();
  return limit;
}

bool runs_at_call_when_idle(int64_t bytes, c10::DeviceIndex device) {
  const int64_t limit = inline_bytes_limit();
  if (limit == 0 || bytes > limit) return false;  // 0: every op that can be queued is (also empty ones)
  const neuron_rt::Stream& stream = current_stream(device);
  return stream.query() && !stream.failure();
}

c10::DeviceIndex run_here_on(c10::DeviceIndex device) {
  auto& rt = runtime();
  if (device < 0) device = c10::DeviceIndex(rt.current_device());
  NEURON_RT_CALL(rt.check_device(device));
  if (!rt.launch_blocking()) synchronize_stream(current_stream(device));
  return device;
}

neuron_rt::Stream& current_stream(c10::DeviceIndex device) {
  auto& rt = runtime();
  return NEURON_RT_CALL(rt.stream(device, rt.current_stream(device)));
}

void synchronize_stream(neuron_rt::Stream& stream) {
  if (stream.query() && !stream.failure()) return;
  if (log_enabled(LogLevel::kDebug)) {
    const TrackedOp* op = current_op();
    log(LogLevel::kDebug, "host waits for neuron:" + std::to_string(stream.device()) + " stream " +
                              std::to_string(stream.id()) + (op ? " in " + op->name() : std::string()));
  }
  without_gil([&] { NEURON_RT_CALL(stream.synchronize()); });
}

int kernel_threads_setting() { return at::get_num_threads(); }

void use_kernel_threads(const neuron_rt::Stream& stream, int threads) {  // Note [Kernel threads]
  // Launch-blocking mode runs the task on the calling thread: its own setting stays.
  if (!stream.is_current_worker()) return;
#if AT_PARALLEL_OPENMP
  omp_set_num_threads(threads);  // this thread's own setting
#endif
}

// ---- the seam -----------------------------------------------------------------------------

namespace detail {
std::atomic<bool> launch_observed{false};
std::array<std::atomic<LaunchObserver*>, kLaunchObserverSlots> launch_observers{};

void notify_launch_observers(const Launch& launch) {
  for (auto& slot : launch_observers) {
    if (LaunchObserver* observer = slot.load(std::memory_order_acquire)) observer->on_launch(launch);
  }
}
}  // namespace detail

void set_launch_observer(LaunchObserverSlot slot, LaunchObserver* observer) {
  static std::mutex mutex;  // registrations are rare; the flag is recomputed under it
  std::lock_guard<std::mutex> lock(mutex);
  detail::launch_observers[size_t(slot)].store(observer, std::memory_order_release);
  bool any = false;
  for (auto& entry : detail::launch_observers) any |= entry.load(std::memory_order_relaxed) != nullptr;
  detail::launch_observed.store(any, std::memory_order_release);
}

namespace {
class Counter final : public LaunchObserver {
 public:
  void on_launch(const Launch& launch) override {
    counts_[size_t(launch.path)].fetch_add(1, std::memory_order_relaxed);
  }
  std::array<std::atomic<uint64_t>, kLaunchPaths> counts_{};
};
Counter& counter() {
  static auto* instance = new Counter();  // never destroyed: launches may come during exit
  return *instance;
}
}  // namespace

void count_launches(bool on) {
  if (on) {
    for (auto& count : counter().counts_) count.store(0, std::memory_order_relaxed);
  }
  set_launch_observer(LaunchObserverSlot::kCounter, on ? &counter() : nullptr);
}

std::array<uint64_t, kLaunchPaths> launch_counts() {
  std::array<uint64_t, kLaunchPaths> counts{};
  for (int i = 0; i < kLaunchPaths; ++i) counts[i] = counter().counts_[i].load(std::memory_order_relaxed);
  return counts;
}

}  // namespace torch_neuron
