// The simulated Neuron runtime of this process: its topology, and for each visible
// logical core (a "device") its memory and streams.
//
// Equivalent to: the CUDA driver context of a process. Made on first use
// (Runtime::get()), from the settings in topology.h and:
//   NEURON_LAUNCH_BLOCKING=1|0     run every task on the calling thread (default 1)
//   NEURON_SIM_MEMORY_GUARD=1      device memory inaccessible outside kernels and copies
//                                  (Note [Memory guard] in memory.h; a debug mode)
//   NEURON_SIM_SHARED_MEMORY=1     device memory in shared-memory files (memory.h), which
//                                  other processes can map
//
// Fork: a child forked after the parent initialised the runtime must not use it (its
// streams' threads are gone); get() then throws Error(kBadFork), as CUDA does. Buffers
// the child inherited are never returned (a child takes no runtime lock).
//
// Thread safety: everything here may be used from any thread at once. The current device
// and the current stream per device are per thread.
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "copy.h"
#include "event.h"
#include "memory.h"
#include "stream.h"
#include "topology.h"

namespace neuron_rt {

constexpr int kStreamPoolSize = 8;  // streams per device besides the default one (id 0)
// Streams per device for collectives (ids after the pool; never handed out as pool streams):
// one per process group and device, as NCCL gives each communicator its own stream (Note
// [Stream-ordered collectives] in csrc/distributed). Their threads start at first use.
constexpr int kCommStreamCount = 32;
constexpr int kStreamCount = 1 + kStreamPoolSize + kCommStreamCount;
inline bool is_comm_stream(int id) { return id > kStreamPoolSize; }

class Runtime {
 public:
  // The runtime, made on first call. Throws Error(kBadFork) in a forked child of an
  // initialised parent, and Error(kInvalidArgument) for bad settings.
  static Runtime& get();
  // True once get() has made the runtime in this process (never throws).
  static bool initialized() noexcept;
  // True in a child forked after the parent made the runtime (never throws).
  static bool in_bad_fork() noexcept;

  // Note [Counting devices without starting the runtime]
  // The visible cores come from the settings alone (topology.h), so counting them, checking an
  // index and reading the calling thread's current device need no runtime: as CUDA counts its
  // devices and takes manual_seed without creating a context, a process that only asked these
  // (torch.neuron.is_available(), device_count(), torch.manual_seed(), a generator) has not
  // started the runtime, reports initialized() false, and may still fork a child that uses the
  // device. The topology is read once per process; bad settings throw Error(kInvalidArgument),
  // each time it is asked for, as get() does.
  static const Topology& environment_topology();
  static int visible_device_count() { return int(environment_topology().visible.size()); }
  // Throws Error(kInvalidDevice) naming the valid range and NEURON_RT_VISIBLE_CORES.
  static void check_visible_device(int64_t device);
  static int current_device_index() noexcept;
  static void set_current_device_index(int device);  // checks the index, then sets the thread's device

  const Topology& topology() const { return topology_; }
  int device_count() const { return int(devices_.size()); }
  bool launch_blocking() const { return launch_blocking_; }
  bool memory_guard() const { return memory_guard_; }
  // Note [Shared cores]: the host has fewer than two cores per process of this job (torchrun's
  // LOCAL_WORLD_SIZE on hardware_concurrency()), so a worker thread beside a host thread takes
  // the core another rank's host thread needs. NEURON_SIM_SHARED_CORES=0/1 overrides.
  bool shared_cores() const { return shared_cores_; }

  // Throws Error(kInvalidDevice) naming the valid range and NEURON_RT_VISIBLE_CORES.
  void check_device(int64_t device) const;
  DeviceMemory& memory(int device);
  // Stream `id` (0 = default, 1..kStreamPoolSize = pool, then the communication streams) of
  // `device`.
  Stream& stream(int device, int id);
  // Round-robin pick from the pool of `device`.
  int next_pool_stream(int device);
  // Round-robin pick from the communication streams of `device` (shared only past
  // kCommStreamCount process groups on one device).
  int next_comm_stream(int device);

  // The calling thread's current device and, per device, current stream id.
  int current_device() const;
  void set_current_device(int device);
  int current_stream(int device) const;
  void set_current_stream(int device, int id);

  // Device holding `ptr` (anywhere in its memory), or -1. Never throws, never locks.
  static int device_of(const void* ptr) noexcept { return device_of_address(ptr); }
  // Waits for every stream of `device` (all devices when -1). Every stream is drained,
  // also after one of them has failed; then the first failure is thrown.
  // Without `communication`, the communication streams are not waited for (their tasks wait
  // for peers: a generator's drain must not wait for another rank). Work issued afterwards
  // starts on the device timeline no earlier than the waited streams' end (timeline.h).
  void synchronize(int device = -1, bool communication = true);
  // The predicted device time of `device` (Note [Device clock] in cost_model.h): the latest
  // end among its streams' timelines, in nanoseconds. Never blocks.
  uint64_t device_time_ns(int device);

 private:
  Runtime();
  struct DeviceState {
    std::vector<std::unique_ptr<Stream>> streams;
    std::unique_ptr<DeviceMemory> memory;
    std::atomic<int> next_pool{0};
    std::atomic<int> next_comm{0};
  };
  Topology topology_;
  bool launch_blocking_ = true;
  bool memory_guard_ = false;
  bool shared_cores_ = false;
  std::vector<std::unique_ptr<DeviceState>> devices_;
};

}  // namespace neuron_rt
