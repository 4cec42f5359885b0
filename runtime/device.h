// The simulated Neuron runtime of this process: its topology, and for each
// visible logical core (a "device") its memory and streams.
//
// Equivalent to: the CUDA driver context of a process. Made on first use
// (Runtime::get()), from the settings in topology.h and:
//   NEURON_LAUNCH_BLOCKING=1|0   run every task on the calling thread (default 1)
//
// Fork: a child forked after the parent initialised the runtime must not use it
// (its streams' threads are gone); get() then throws Error(kBadFork), as CUDA does.
//
// Thread safety: everything here may be used from any thread at once. The
// current device is per thread.
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

class Runtime {
 public:
  // The runtime, made on first call. Throws Error(kBadFork) in a forked child
  // of an initialised parent, and Error(kInvalidArgument) for bad settings.
  static Runtime& get();
  // True once get() has made the runtime in this process (never throws).
  static bool initialized() noexcept;
  // True in a child forked after the parent made the runtime (never throws).
  static bool in_bad_fork() noexcept;

  const Topology& topology() const { return topology_; }
  int device_count() const { return int(devices_.size()); }
  bool launch_blocking() const { return launch_blocking_; }

  // Throws Error(kInvalidDevice) naming the valid range and NEURON_RT_VISIBLE_CORES.
  void check_device(int device) const;
  DeviceMemory& memory(int device);
  // Stream `id` (0 = default, 1..kStreamPoolSize = pool) of `device`.
  Stream& stream(int device, int id);
  // Round-robin pick from the pool of `device`.
  int next_pool_stream(int device);

  // The calling thread's current device and, per device, current stream id.
  int current_device() const;
  void set_current_device(int device);
  int current_stream(int device) const;
  void set_current_stream(int device, int id);

  // Frees a block of any device (from a tensor deleter): the block returns to the
  // cache once the stream that used it has run everything enqueued so far.
  void free(void* ptr);
  // Device holding `ptr` (a block start, or a pointer into a block), or -1.
  int device_of(const void* ptr) const;
  // Waits for every stream of `device` (all devices when -1).
  void synchronize(int device = -1);

 private:
  Runtime();
  struct DeviceState {
    std::unique_ptr<DeviceMemory> memory;
    std::vector<std::unique_ptr<Stream>> streams;
    std::atomic<int> next_pool{0};
  };
  Topology topology_;
  bool launch_blocking_ = true;
  std::vector<std::unique_ptr<DeviceState>> devices_;
};

}  // namespace neuron_rt
