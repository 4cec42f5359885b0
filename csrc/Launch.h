// Note [Launches]
// The execution policy of the simulated device, and the one seam every piece of work it runs
// passes through. A launch is work for a stream of a core: a kernel run at the call on the
// calling thread (an eager op on the direct or the generic path, a compiled program run inline),
// work queued on the stream (an eager op or a program in asynchronous mode), a collective, a
// copy. Each path calls note_launch() once per launch with what it is (path, name, device,
// stream); observers registered here see every launch (counting for tests now; the device clock
// and the profiler's device track hook in here, so they see what the device runs whichever path
// runs it). The policy decides where work runs: launch-blocking (NEURON_LAUNCH_BLOCKING=1,
// the default: at the call) or asynchronous (queued; Note [Small ops on an idle stream] says
// which small ops still run at the call), with how many threads (Note [Kernel threads]).
//
// Thread safety: every function may be called from any thread; observers are called on the
// launching thread and must not block.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>

#include "NeuronCommon.h"
#include "runtime/stream.h"

namespace torch_neuron {

// Where a launch comes from (Note [Launches]).
enum class LaunchPath : uint8_t {
  kDirect,      // an eager op through its direct kernel at the call (kernels/Hot.cpp, Minimal.cpp, ...)
  kGeneric,     // an eager op through the boxed generic path at the call (kernels/Generic.cpp)
  kQueued,      // an eager op or kernel body queued on its stream (asynchronous mode)
  kProgram,     // a compiled program, at the call or queued (compile/Executor.cpp)
  kCollective,  // a collective or point-to-point transfer (distributed/)
  kCopy,        // a copy between host and device or within the device (kernels/Minimal.cpp)
};
constexpr int kLaunchPaths = 6;

// ---- the policy ---------------------------------------------------------------------------

// True with NEURON_LAUNCH_BLOCKING=0.
bool asynchronous();

// The stream currently selected for `device` on this thread.
neuron_rt::Stream& current_stream(c10::DeviceIndex device);
// Waits for `stream` (with the GIL released when the caller holds it and must wait);
// throws the stream's sticky error.
void synchronize_stream(neuron_rt::Stream& stream);

// Readies a kernel that runs on the calling thread: returns the op's device (the current
// one when no neuron tensor named it) and, in asynchronous mode, first drains that device's
// current stream so the kernel sees the work queued before it (work of other streams is
// ordered by events, as with CUDA streams).
c10::DeviceIndex run_here_on(c10::DeviceIndex device);
// Note [Small ops on an idle stream]
// Handing an op to the stream's worker costs the calling thread about what running a small
// kernel costs (output metadata, fresh views, the task, a wake-up), and costs the worker a
// wake-up and frees of memory the calling thread allocated. For an op touching little
// memory, queued behind nothing, that is pure overhead (measured: decode of the demo model
// ran slower asynchronous than launch-blocking, much slower on a busy machine where the two
// threads share a core). In asynchronous mode such an op runs at the call instead, on the
// direct path where it has one: its stream has nothing pending, so the order of work is the
// same as queued; its errors are raised at the call, as with launch-blocking. Ops touching
// more memory, and every op while its stream has work, are queued. The estimate counts the
// operands (and, where the meta kernel gave them, the outputs); a broadcast of two small
// operands into a large output may run at the call, which changes where it runs, not what
// it computes. NEURON_SIM_INLINE_BYTES sets the limit (default 64 KiB; 0 queues every op
// that can be queued).
int64_t inline_bytes_limit();
// The bytes a tensor operand covers (0 when undefined), for that estimate.
inline int64_t bytes_of(const at::Tensor& t) { return t.defined() ? int64_t(t.nbytes()) : 0; }
// True when `bytes` is within the limit and the current stream of `device` has nothing
// pending and has not failed.
bool runs_at_call_when_idle(int64_t bytes, c10::DeviceIndex device);

// Note [Kernel threads]: a queued kernel runs on the stream's worker thread, which shares the
// machine's cores with the host thread (the simulated device has no cores of its own). While
// the host runs Python, a kernel leaves it one core (`threads` - 1 OpenMP threads, at least
// one); while the host is blocked waiting for the stream (Stream::host_waiting()), the kernel
// takes all `threads`. `threads` is the setting of the thread that queued the kernel
// (torch.set_num_threads; for backward kernels, autograd's device thread), read at enqueue
// by kernel_threads_setting(); use_kernel_threads() applies it on the worker before the
// kernel. Limits: decided when the kernel starts (one that starts a moment before
// the host blocks keeps the smaller count); MKL's matmuls keep MKL's own per-thread setting;
// a host blocked in Event.synchronize() does not count. Seen by hand (demo model, bf16
// decode, 2 cores, 2 threads; single runs): the host blocked 0.85 ms per token with every
// queued kernel at the full count (the worker's OpenMP team and the host took turns on the
// cores) and 0.29 ms with this rule.
int kernel_threads_setting();
void use_kernel_threads(const neuron_rt::Stream& stream, int threads);


// ---- the seam -----------------------------------------------------------------------------

struct Launch {
  LaunchPath path;
  const char* name;           // the op, program or collective
  c10::DeviceIndex device;
  const neuron_rt::Stream* stream;  // the stream it is ordered on (nullptr: the current one; none for point-to-point transfers, which no stream orders)
};

// Sees every launch, on the launching thread, when it is issued.
class LaunchObserver {
 public:
  virtual ~LaunchObserver() = default;
  virtual void on_launch(const Launch& launch) = 0;
};
// Registers `observer` (kept for the process; nullptr: none). One observer at a time.
void set_launch_observer(LaunchObserver* observer);

namespace detail {
extern std::atomic<LaunchObserver*> launch_observer;
}
// The seam: every launch path calls it once per launch (one relaxed load when nothing observes).
inline void note_launch(LaunchPath path, const char* name, c10::DeviceIndex device,
                        const neuron_rt::Stream* stream = nullptr) {
  if (LaunchObserver* observer = detail::launch_observer.load(std::memory_order_acquire)) {
    observer->on_launch(Launch{path, name, device, stream});
  }
}

// Tests: counts of launches per path while counting is on (an observer of this file's own).
void count_launches(bool on);
std::array<uint64_t, kLaunchPaths> launch_counts();

}  // namespace torch_neuron
