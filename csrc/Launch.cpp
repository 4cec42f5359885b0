#include "Launch.h"

#include <ATen/Config.h>
#include <ATen/Context.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/Parallel.h>
#if AT_PARALLEL_OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "HostWait.h"
#include "NeuronLogging.h"
#include "OpTracking.h"
#include "kernels/OpPlan.h"

namespace torch_neuron {

const char* launch_path_name(LaunchPath path) {
  static const char* names[kLaunchPaths] = {"direct", "generic", "queued", "program", "collective", "copy", "fused"};
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

namespace {
int64_t env_integer(const char* name, int64_t fallback, int64_t minimum) {
  const char* value = std::getenv(name);
  if (!value || !*value) return fallback;
  char* end = nullptr;
  const long long parsed = std::strtoll(value, &end, 10);
  TORCH_CHECK(end && *end == '\0' && parsed >= minimum, name, "=", value, " is not an integer >= ", minimum,
              "; unset it or give one");
  return parsed;
}
std::atomic<int> concatenation_mode{-1};
}  // namespace

// Note [Adaptive Eager Execution]
bool concatenating() {
  static const bool enabled = env_integer("TORCH_NEURONX_ENABLE_CONCATENATION", 0, 0) != 0;
  const int mode = concatenation_mode.load(std::memory_order_relaxed);
  if (!(mode < 0 ? enabled : mode > 0) || runtime().launch_blocking()) return false;
  return !at::globalContext().deterministicAlgorithms();
}
size_t concatenation_limit() {
  static const size_t limit = size_t(env_integer("TORCH_NEURONX_CONCATENATION_BUFFER_SIZE_LIMIT", 1024, 1));
  return limit;
}
std::chrono::microseconds concatenation_quiet() {
  static const std::chrono::microseconds quiet{env_integer("NEURON_SIM_CONCATENATION_QUIET_US", 200, 0)};
  return quiet;
}
bool concatenation_flush_when_idle() {
  static const bool when_idle = env_integer("TORCH_NEURONX_CONCATENATION_QUEUE_LOW_THRESHOLD", 1, 0) > 0;
  return when_idle;
}
void set_concatenation(int mode) { concatenation_mode.store(mode < 0 ? -1 : mode > 0 ? 1 : 0); }

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

namespace {
// Note [Adaptive Eager Execution]: which launches a concatenation group admits, by name (the
// names launches carry are interned: a plan's, or a literal).
bool fusable_name(const char* name) {
  thread_local std::unordered_map<const char*, bool> known;
  auto it = known.find(name);
  if (it != known.end()) return it->second;
  const std::string text(name);
  const size_t dot = text.find('.');
  bool fusable = false;
  if (dot != std::string::npos) {
    auto op = c10::Dispatcher::singleton().findOp(c10::OperatorName(text.substr(0, dot), text.substr(dot + 1)));
    fusable = op && fusable_op(*op);
  } else if (auto op = c10::Dispatcher::singleton().findOp(c10::OperatorName(text, ""))) {
    fusable = fusable_op(*op);  // a name without a dot is its default overload's ("aten::max": the reduction)
  } else {
    // A call site that names an op without its overload where it has no default one (the
    // direct path's "aten::add", "aten::pow"): fusable when an overload of that name is, every
    // registered overload looked at (the tensor overloads of such a name agree: add.Tensor,
    // add.Scalar and add.out are tagged pointwise; only Python-number ones, add.int, are not, and
    // never reach a device).
    static const std::unordered_set<std::string> fusable_names = [] {
      std::unordered_set<std::string> names;
      for (const c10::OperatorName& registered : c10::Dispatcher::singleton().getAllOpNames()) {
        if (names.count(registered.name)) continue;
        auto other = c10::Dispatcher::singleton().findOp(registered);
        if (other && fusable_op(*other)) names.insert(registered.name);
      }
      return names;
    }();
    fusable = fusable_names.count(text) != 0;
  }
  known.emplace(name, fusable);
  return fusable;
}
// A copy within one device (a conversion, a strided copy) is elementwise work a group admits;
// a copy to or from the host, or between devices, ends the group (a host read is a boundary).
bool within_device(const LaunchOperands& operands) {
  bool any = false, all = true;
  c10::DeviceIndex device = -1;
  auto see = [&](const at::Tensor& t) {
    if (!t.defined()) return;
    any = true;
    all = all && t.device().type() == kNeuron && (device < 0 || t.device().index() == device);
    if (device < 0) device = t.device().index();
  };
  for (const at::Tensor& t : operands.inputs) see(t);
  for (const at::Tensor& t : operands.outputs) see(t);
  return any && all;
}

struct OpenGroups {
  std::mutex mutex;
  std::unordered_map<const neuron_rt::Stream*, size_t> ops;  // the open group's ops per stream
  std::atomic<bool> any{false};  // ops is not empty (read without the lock)
};
OpenGroups& open_groups() {
  static auto* groups = new OpenGroups();  // never destroyed: launches may come during exit
  return *groups;
}

// The path the clock and the counters see: an op that joins its stream's open group is kFused.
LaunchPath grouped_path(const Launch& launch) {
  bool fusable = false;
  switch (launch.path) {
    case LaunchPath::kDirect:
    case LaunchPath::kGeneric:
    case LaunchPath::kQueued:
      fusable = fusable_name(launch.name);
      break;
    case LaunchPath::kCopy:
      fusable = std::strcmp(launch.name, "aten::copy_") == 0 && within_device(launch.operands);
      break;
    default:
      break;
  }
  const neuron_rt::Stream* stream = launch.stream ? launch.stream : &current_stream(launch.device);
  OpenGroups& groups = open_groups();
  std::lock_guard<std::mutex> lock(groups.mutex);
  if (!fusable) {
    groups.ops.erase(stream);
    groups.any.store(!groups.ops.empty(), std::memory_order_relaxed);
    return launch.path;
  }
  size_t& ops = groups.ops[stream];
  groups.any.store(true, std::memory_order_relaxed);
  if (ops > 0 && ops < concatenation_limit()) {
    ++ops;
    return LaunchPath::kFused;
  }
  ops = 1;  // opens a group: its launch is the group's
  return launch.path;
}
}  // namespace

void end_concatenation_group(const neuron_rt::Stream& stream) {
  OpenGroups& groups = open_groups();
  if (!groups.any.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(groups.mutex);
  groups.ops.erase(&stream);
  groups.any.store(!groups.ops.empty(), std::memory_order_relaxed);
}

void end_concatenation_groups(int device) {
  OpenGroups& groups = open_groups();
  if (!groups.any.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(groups.mutex);
  for (auto it = groups.ops.begin(); it != groups.ops.end();) {
    it = device < 0 || it->first->device() == device ? groups.ops.erase(it) : std::next(it);
  }
  groups.any.store(!groups.ops.empty(), std::memory_order_relaxed);
}

namespace detail {
std::atomic<bool> launch_observed{false};
std::array<std::atomic<LaunchObserver*>, kLaunchObserverSlots> launch_observers{};

void notify_launch_observers(const Launch& launch) {
  LaunchPath path = launch.path;
  if (launch.device >= 0 && path != LaunchPath::kFused) {
    if (concatenating()) {
      path = grouped_path(launch);
    } else if (open_groups().any.load(std::memory_order_relaxed)) {
      // Unfused work (AEE switched off meanwhile: deterministic algorithms) ends the stream's group.
      end_concatenation_group(launch.stream ? *launch.stream : current_stream(launch.device));
    }
  }
  const Launch seen{path, launch.name, launch.device, launch.stream, launch.operands};
  for (auto& slot : launch_observers) {
    if (LaunchObserver* observer = slot.load(std::memory_order_acquire)) observer->on_launch(seen);
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
