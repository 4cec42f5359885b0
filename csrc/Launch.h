// Note [Launches]
// The execution policy of the simulated device, and the one seam every piece of work it runs
// passes through. A launch is work for a stream of a core: a kernel run at the call on the
// calling thread (an eager op on the direct or the generic path, a compiled program run inline),
// work queued on the stream (an eager op or a program in asynchronous mode), a collective, a
// copy. Each path calls note_launch() once per launch with what it is (path, name, device,
// stream) and what it reads and writes (LaunchOperands: the tensors, so an observer can cost
// it); observers registered here see every launch (the launch counts of tests, the device clock
// (DeviceClock.h), which also records the profiler's device track (DeviceTrack.h)), so they see what the device runs whichever
// path runs it. A launch that runs at the call is noted after its kernel (its outputs are known
// then; a kernel that throws is not a launch); a queued one when it is queued (its outputs
// are preallocated). Both are on the launching thread, in issue order. The policy decides where work runs: launch-blocking (NEURON_LAUNCH_BLOCKING=1,
// the default: at the call) or asynchronous (queued; Note [Small ops on an idle stream] says
// which small ops still run at the call), with how many threads (Note [Kernel threads]).
//
// Thread safety: every function may be called from any thread; observers are called on the
// launching thread and must not block.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>

#include "NeuronCommon.h"
#include "runtime/stream.h"

namespace neuron_rt {
struct WorkCost;
struct CollectiveWork;
}

namespace torch_neuron {

// Where a launch comes from (Note [Launches]).
enum class LaunchPath : uint8_t {
  kDirect,      // an eager op through its direct kernel at the call (kernels/Hot.cpp, Minimal.cpp, ...)
  kGeneric,     // an eager op through the boxed generic path at the call (kernels/Generic.cpp)
  kQueued,      // an eager op or kernel body queued on its stream (asynchronous mode)
  kProgram,     // a compiled program, at the call or queued (compile/Executor.cpp)
  kCollective,  // a collective or point-to-point transfer (distributed/)
  kCopy,        // a copy between host and device or within the device (kernels/Minimal.cpp)
  kFused,       // an eager op that joined an open concatenation group (Note [Adaptive Eager Execution]):
                // its work is costed, its launch is the group's (the op that opened it, kQueued)
};
constexpr int kLaunchPaths = 7;
// "direct", "generic", "queued", "program", "collective", "copy", "fused".
const char* launch_path_name(LaunchPath path);

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
// it computes. NEURON_SIM_INLINE_BYTES sets the limit (default 64 KiB, none on shared cores;
// 0 queues every op that can be queued).
//
// Note [Shared cores]
// Where the host has fewer than two cores per process of the job (Runtime::shared_cores():
// torchrun's ranks on a small machine), a stream's worker thread has no core of its own: a
// queued op or program waits until the worker gets the core that the host thread, soon
// waiting for it, could have run it on, and each hand-over is a wake-up and a context switch.
// So there: every op and every compiled program whose stream is idle runs at the call (as in
// launch-blocking mode, but a stream with work queued still queues behind it); the idle
// worker polls briefly (Stream::kSharedCoresIdlePoll); and an asynchronous collective waits a
// moment for its caller to run it (Note [Waiters run their collectives]). Measured (2 ranks
// on 2 cores, a ~5M-parameter Llama, tensor-parallel greedy decode): BENCHMARKS.md.
int64_t inline_bytes_limit();
// The bytes a tensor operand covers (0 when undefined), for that estimate.
inline int64_t bytes_of(const at::Tensor& t) { return t.defined() ? int64_t(t.nbytes()) : 0; }
// True when `bytes` is within the limit and the current stream of `device` has nothing
// pending and has not failed.
bool runs_at_call_when_idle(int64_t bytes, c10::DeviceIndex device);

// Note [Kernel threads]: a queued kernel runs on the stream's worker thread with the OpenMP
// thread count of the thread that queued it (torch.set_num_threads; for backward kernels,
// autograd's device thread), read at enqueue by kernel_threads_setting() and applied on the
// worker by use_kernel_threads(): the count a launch-blocking run uses for the same kernel. ATen's
// CPU reductions split their work by the thread count, so the count decides the bits of a
// sum, a layer norm's weight gradient, ...: a fixed count makes the asynchronous mode give
// launch-blocking mode's values, run after run. (Until issue 39 the worker took one thread less
// while the host ran Python and all of them while it waited, a choice by timing: two identical
// training steps of a tiny GPT-2 gave different gradients, and activation checkpointing could
// not be compared exactly with the run without it. Side by side then, 7 alternating runs of the
// demo model's bf16 eager decode and a GPT-2 training step on 2 cores, asynchronous mode: median
// 4.71 -> 4.37 ms per token, 235 -> 211 ms per step: no cost seen within the noise.) MKL's
// matmuls keep MKL's own per-thread setting.
int kernel_threads_setting();
void use_kernel_threads(const neuron_rt::Stream& stream, int threads);

// Note [Adaptive Eager Execution]
// TorchNeuron's AEE (its source calls it the concatenation engine): queued eager ops are
// analysed and sent to the device fused into single calls, with the same stream order, numerics
// and determinism as unfused execution. Opt-in, as in the real package's source:
// TORCH_NEURONX_ENABLE_CONCATENATION=1, in asynchronous mode (NEURON_LAUNCH_BLOCKING=0; in
// launch-blocking mode nothing waits to be fused); whether 2.33 turns it on by default is not
// documented. Off under torch.use_deterministic_algorithms() (torch.set_deterministic_debug_mode
// sets the same flag), as the real package documents; checked at each op.
// Which ops fuse (OpPlan::fusable, fusable_op): every op ATen tags pointwise, the reductions and
// data movement between them in a model's step (a norm's mean, softmax, cat, clone, a
// conversion within the device). Anything else ends a group: a matmul, attention, a scatter, a
// random draw, a copy to or from the host (item(), print, .cpu()), a compiled program, a
// collective; so do a synchronisation, an event record or wait, and the buffer limit
// (TORCH_NEURONX_CONCATENATION_BUFFER_SIZE_LIMIT, default 1024 ops as in the real package).
// Two views of one policy:
//  - the device clock (the seam, Launch.cpp): per stream, an admitted launch joins the open group
//    and is noted kFused (its work costed, no launch of its own); the op that opens a group keeps
//    its path and pays the group's launch. This follows the sequence of launches only, not where
//    or when the host runs them, so predictions do not depend on the host's timing.
//  - the host (Note [Concatenation buffer], runtime/stream.h): an admitted op that is queued joins
//    its stream's buffer instead of being handed to the worker alone; the buffer goes to the
//    worker as one task at the boundaries above, as soon as the worker has nothing else to run
//    (TORCH_NEURONX_CONCATENATION_QUEUE_LOW_THRESHOLD, the real package's knob for its queue's
//    low mark: here any value >= 1, the default, means "the queue is empty"; 0 leaves a group
//    until a boundary or its quiet interval), or once no op joined it for a quiet interval
//    (NEURON_SIM_CONCATENATION_QUIET_US, ours, default 200 us; the real package's is not
//    documented). So groups form while the worker is busy (behind a matmul), and an idle worker
//    is never kept waiting: measured on the demo model's decode (2 cores, bench/aee.py's modes,
//    24 calls each), keeping the group until a boundary made the host 5-10% slower than
//    asynchronous mode without AEE, since the ops after a buffered group found the stream busy
//    and were queued instead of run at the call; taking it when idle gave back that speed.
//    The task runs the same ATen kernels in the same order with the same thread
//    count (Note [Kernel threads]), so its bits are the unfused run's by construction
//    (tests/device/test_aee.py compares every sample of OpInfo's elementwise sets both ways).
//    Small ops on an idle stream still run at the call (Note [Small ops on an idle stream]; a
//    buffered group makes the stream busy, so the ops after it are queued and join it).
// Errors: meta, device and overlap checks stay at the call; a kernel that fails in a group
// fails the stream (Note [Sticky stream errors]) with a message naming its op, raised at the
// next synchronisation as an unfused queued op's is, and the group's later ops are skipped.
// Differences from the real engine: a group computes with its ops' own kernels (no one-loop
// kernel that could fail to build, so no per-op fallback is needed), and on the clock a group
// saves launches, not the HBM traffic of its intermediates; the queue's low threshold is a
// switch (empty or not), not a count.
bool concatenating();
size_t concatenation_limit();
bool concatenation_flush_when_idle();
std::chrono::microseconds concatenation_quiet();
// Tests: -1 follows the environment, 0 off, 1 on (asynchronous mode still required).
void set_concatenation(int mode);
// Ends `stream`'s open group on the device clock (a synchronisation; the runtime's buffer is
// flushed by the wait itself).
void end_concatenation_group(const neuron_rt::Stream& stream);
// The same for every stream of `device` (-1: of every device): a device-wide synchronize.
void end_concatenation_groups(int device);


// ---- the seam -----------------------------------------------------------------------------

// What a launch reads and writes, as the call site has it (every part optional, all borrowed
// for the duration of note_launch). Tensors may be undefined or on the CPU (scalars, the host
// side of a copy). With no outputs given, an op whose name ends in '_' (in place) writes its
// first input. Costs nothing to build: views of what the call site holds.
struct LaunchOperands {
  c10::ArrayRef<const at::Tensor*> input_pointers;  // tensor operands (variadic call sites)
  c10::ArrayRef<at::Tensor> inputs;                 // tensor operands
  c10::ArrayRef<c10::IValue> arguments;             // boxed arguments: their tensors and tensor lists
  c10::ArrayRef<at::Tensor> outputs;                // results or written outputs
  c10::ArrayRef<c10::IValue> results;               // boxed results: their tensors and tensor lists
  const neuron_rt::WorkCost* cost = nullptr;         // described beforehand (a compiled program's, when built): taken as is
  const neuron_rt::CollectiveWork* collective = nullptr;  // a collective's bytes, ranks, link and algorithm

  static LaunchOperands of(c10::ArrayRef<const at::Tensor*> inputs, c10::ArrayRef<at::Tensor> outputs = {}) {
    LaunchOperands operands;
    operands.input_pointers = inputs;
    operands.outputs = outputs;
    return operands;
  }
  static LaunchOperands of_tensors(c10::ArrayRef<at::Tensor> inputs, c10::ArrayRef<at::Tensor> outputs = {}) {
    LaunchOperands operands;
    operands.inputs = inputs;
    operands.outputs = outputs;
    return operands;
  }
  static LaunchOperands boxed(c10::ArrayRef<c10::IValue> arguments, c10::ArrayRef<c10::IValue> results = {},
                              c10::ArrayRef<at::Tensor> outputs = {}) {
    LaunchOperands operands;
    operands.arguments = arguments;
    operands.results = results;
    operands.outputs = outputs;
    return operands;
  }
};
// Pointers to a call site's tensor operands, for LaunchOperands::of.
template <typename... Tensors>
std::array<const at::Tensor*, sizeof...(Tensors)> operand_pointers(const Tensors&... tensors) {
  return {&tensors...};
}

struct Launch {
  LaunchPath path;
  const char* name;           // the op ("aten::add.Tensor"), program or collective
  c10::DeviceIndex device;
  const neuron_rt::Stream* stream;  // the stream it is ordered on (nullptr: the current one; none for point-to-point transfers, which no stream orders)
  const LaunchOperands& operands;
};

// Sees every launch, on the launching thread, when it is issued (Note [Launches]).
class LaunchObserver {
 public:
  virtual ~LaunchObserver() = default;
  virtual void on_launch(const Launch& launch) = 0;
};
// The observers: one slot each, so the clock keeps running while a test counts launches. The
// profiler's device track has no slot of its own: it records the spans the clock places
// (DeviceTrack.h), so a launch is costed once.
enum class LaunchObserverSlot : uint8_t { kCounter, kClock };
constexpr int kLaunchObserverSlots = 2;
// Registers `observer` in `slot` (kept for the process; nullptr empties the slot).
void set_launch_observer(LaunchObserverSlot slot, LaunchObserver* observer);

namespace detail {
extern std::atomic<bool> launch_observed;
void notify_launch_observers(const Launch& launch);
}
// True when some observer is registered (a call site may skip gathering operands otherwise).
inline bool launch_observed() { return detail::launch_observed.load(std::memory_order_relaxed); }
// The seam: every launch path calls it once per launch (one relaxed load when nothing observes).
inline void note_launch(LaunchPath path, const char* name, c10::DeviceIndex device,
                        const neuron_rt::Stream* stream = nullptr, const LaunchOperands& operands = {}) {
  if (launch_observed()) detail::notify_launch_observers(Launch{path, name, device, stream, operands});
}
inline void note_launch(LaunchPath path, const char* name, c10::DeviceIndex device, const LaunchOperands& operands) {
  note_launch(path, name, device, nullptr, operands);
}

// Tests: counts of launches per path while counting is on (an observer of this file's own).
void count_launches(bool on);
std::array<uint64_t, kLaunchPaths> launch_counts();

}  // namespace torch_neuron
