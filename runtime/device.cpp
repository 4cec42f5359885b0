#include "device.h"

#include <algorithm>
#include <thread>

#include <pthread.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "error.h"

namespace neuron_rt {

namespace {
std::atomic<bool> g_initialized{false};
std::atomic<bool> g_bad_fork{false};
thread_local int t_current_device = 0;
constexpr int kMaxDevices = 512;
thread_local int t_current_stream[kMaxDevices] = {};

Runtime* g_runtime = nullptr;

void drain_at_exit() {
  if (!g_runtime || g_bad_fork.load()) return;
  try {
    g_runtime->synchronize();
  } catch (...) {
    // an asynchronous failure nobody synchronized on: nothing to report it to now
  }
}

void mark_child_after_fork() {
  if (g_initialized.load()) g_bad_fork.store(true);
}
}  // namespace

Runtime& Runtime::get() {
  if (g_bad_fork.load()) {
    throw Error(ErrorCode::kBadFork,
                "cannot re-initialize the neuron runtime in a forked subprocess: the parent "
                "process used the neuron device before fork(). Use the 'spawn' start method "
                "(multiprocessing.set_start_method('spawn')) or torchrun");
  }
  static Runtime* runtime = [] {
    auto* made = new Runtime();  // never destroyed: tensors may outlive static destructors
    g_runtime = made;
    pthread_atfork(nullptr, nullptr, &mark_child_after_fork);
    // Finish queued work before static destructors run: tasks may use objects of
    // other libraries (allocators, kernels) that exit() destroys.
    std::atexit([] { drain_at_exit(); });
    g_initialized.store(true);
    return made;
  }();
  return *runtime;
}

bool Runtime::initialized() noexcept { return g_initialized.load(); }

const Topology& Runtime::environment_topology() {
  // A throwing initializer leaves the static uninitialised: the next call reads the settings again.
  static const Topology topology = Topology::from_environment();
  return topology;
}

int Runtime::current_device_index() noexcept { return t_current_device; }
bool Runtime::in_bad_fork() noexcept { return g_bad_fork.load(); }

namespace {
bool setting_is(const char* name, const char* value) {
  const char* text = std::getenv(name);
  return text && std::string(text) == value;
}
}  // namespace

Runtime::Runtime() : topology_(environment_topology()) {
  launch_blocking_ = !setting_is("NEURON_LAUNCH_BLOCKING", "0");
  memory_guard_ = setting_is("NEURON_SIM_MEMORY_GUARD", "1");
  // Shared-memory files when asked, and by default for the processes of a multi-process job
  // on one host (torchrun's LOCAL_WORLD_SIZE > 1), whose collectives then move bytes between
  // the ranks' device memory directly (collectives.h, zero-copy).
  const char* local_world = std::getenv("LOCAL_WORLD_SIZE");
  const bool job = local_world && std::atoi(local_world) > 1;
  const MemoryBacking backing = setting_is("NEURON_SIM_SHARED_MEMORY", "1") ||
                                        (job && !setting_is("NEURON_SIM_SHARED_MEMORY", "0"))
                                    ? MemoryBacking::kSharedFile
                                    : MemoryBacking::kAnonymous;
  // Stream::kIdlePoll: polling needs a core per process beside its host thread.
  const char* poll_setting = std::getenv("NEURON_SIM_IDLE_POLL_US");
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const int processes = local_world ? std::max(1, std::atoi(local_world)) : 1;
  shared_cores_ = setting_is("NEURON_SIM_SHARED_CORES", "1") ||
                  (unsigned(2 * processes) > cores && !setting_is("NEURON_SIM_SHARED_CORES", "0"));
  const std::chrono::microseconds idle_poll =
      poll_setting ? std::chrono::microseconds(std::max(0L, std::atol(poll_setting)))
                   : (shared_cores_ ? Stream::kSharedCoresIdlePoll : Stream::kIdlePoll);
  if (int(topology_.visible.size()) > kMaxDevices) {
    throw Error(ErrorCode::kInvalidArgument, "more than 512 visible cores are not supported");
  }
  for (size_t index = 0; index < topology_.visible.size(); ++index) {
    auto state = std::make_unique<DeviceState>();
    std::vector<Stream*> streams;
    auto failure = std::make_shared<FailureState>();  // Note [Sticky stream errors]: per device
    auto frontier = std::make_shared<IssueFrontier>();  // timeline.h: per device
    for (int id = 0; id < kStreamCount; ++id) {
      state->streams.push_back(std::make_unique<Stream>(int(index), id, launch_blocking_, failure, frontier));
      state->streams.back()->set_idle_poll(idle_poll);
      streams.push_back(state->streams.back().get());
    }
    state->memory = std::make_unique<DeviceMemory>(int(index), topology_.visible[index].hbm_bytes, backing,
                                                   memory_guard_, std::move(streams));
    devices_.push_back(std::move(state));
  }
}

void Runtime::check_device(int64_t device) const {
  if (device >= 0 && device < device_count()) return;
  check_visible_device(device);
}

void Runtime::check_visible_device(int64_t device) {
  const Topology& topology = environment_topology();
  const int count = int(topology.visible.size());
  if (device >= 0 && device < count) return;
  const char* visible = std::getenv("NEURON_RT_VISIBLE_CORES");
  std::string hint = count == 0 ? std::string("no neuron device is visible")
                                : "valid indices are 0 to " + std::to_string(count - 1);
  throw Error(ErrorCode::kInvalidDevice,
              "neuron device index " + std::to_string(device) + " is out of range: " + hint +
                  " (" + std::to_string(count) + " visible logical cores on " +
                  std::to_string(topology.chips) + " " + topology.platform_name() +
                  " chip(s), NEURON_RT_VISIBLE_CORES=" + (visible ? visible : "<unset>") + ")");
}

DeviceMemory& Runtime::memory(int device) {
  check_device(device);
  return *devices_[device]->memory;
}

Stream& Runtime::stream(int device, int id) {
  check_device(device);
  if (id < 0 || id >= kStreamCount) {
    throw Error(ErrorCode::kInvalidArgument,
                "stream id " + std::to_string(id) + " does not exist on neuron:" + std::to_string(device));
  }
  return *devices_[device]->streams[id];
}

int Runtime::next_pool_stream(int device) {
  check_device(device);
  return 1 + devices_[device]->next_pool.fetch_add(1) % kStreamPoolSize;
}

int Runtime::next_comm_stream(int device) {
  check_device(device);
  return 1 + kStreamPoolSize + devices_[device]->next_comm.fetch_add(1) % kCommStreamCount;
}

int Runtime::current_device() const { return t_current_device; }

void Runtime::set_current_device(int device) {
  check_device(device);
  t_current_device = device;
}

void Runtime::set_current_device_index(int device) {
  check_visible_device(device);
  t_current_device = device;
}

int Runtime::current_stream(int device) const {
  check_device(device);
  return t_current_stream[device];
}

void Runtime::set_current_stream(int device, int id) {
  stream(device, id);  // validates
  t_current_stream[device] = id;
}

void Runtime::synchronize(int device, bool communication) {
  if (device >= 0) check_device(device);
  std::exception_ptr first_failure;
  for (int index = 0; index < device_count(); ++index) {
    if (device >= 0 && index != device) continue;
    for (auto& stream : devices_[index]->streams) {
      if (!communication && is_comm_stream(stream->id())) continue;
      try {
        stream->synchronize();
      } catch (const Error&) {
        if (!first_failure) first_failure = std::current_exception();
      }
      // The host waited for this work: whatever it issues next starts after it (timeline.h).
      stream->timeline().frontier().advance_to(stream->timeline().now_ns());
    }
  }
  if (first_failure) std::rethrow_exception(first_failure);
}

uint64_t Runtime::device_time_ns(int device) {
  check_device(device);
  uint64_t latest = 0;
  for (auto& stream : devices_[device]->streams) latest = std::max(latest, stream->timeline().now_ns());
  return latest;
}

}  // namespace neuron_rt
