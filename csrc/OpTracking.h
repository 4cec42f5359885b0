// Note [Op tracking]
// Which ops ran, reported as TorchNeuron 2.13 reports them, and how the simulator ran them.
//
// Two separate questions:
//  - Where would TorchNeuron run the op? On the Neuron device when the op is in its
//    natively lowered set, on the CPU otherwise (its boxed CPU fallback, or the ops it pins
//    to the CPU). The set is a data file of the torch_neuronx package
//    (data/torchneuron_ops.txt), handed to set_torchneuron_op_set() at import.
//    torch_neuronx.get_executed_ops() / get_fallback_ops() answer this one: lists of unique
//    op names ("aten::mul.Tensor") since start-up or the last clear_op_tracking(), exactly
//    as the real functions return them.
//  - How did the simulator compute it? With a kernel of ours ("hot": Hot.cpp, Minimal.cpp,
//    Accelerator.cpp, Recurrent.cpp, AcceleratorOnly.cpp) or through the generic zero-copy
//    path ("generic", kernels/Generic.cpp). Both run on device memory; this is an internal report
//    (torch_neuron_sim.get_op_counts()).
//
// Logging follows the real package: tracked silently by default; with
// TORCH_NEURONX_LOG_LEVEL >= 2 (INFO) one line per op that falls back, with >= 3 (DEBUG)
// also one per op executed on the device (see NeuronLogging.h).
//
// Thread safety: every function may be called from any thread at once. hit() is on every
// op's path: two relaxed atomic operations once the op has been seen.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace torch_neuron {

enum class KernelPath { kHot, kGeneric };

class TrackedOp {
 public:
  // `name` is the schema name with its overload ("aten::add.out"); a kernel's record is a
  // function-local static, made once.
  TrackedOp(std::string name, KernelPath path);
  TrackedOp(const TrackedOp&) = delete;
  TrackedOp& operator=(const TrackedOp&) = delete;

  void hit() {
    count_.fetch_add(1, std::memory_order_relaxed);
    if (!seen_.load(std::memory_order_relaxed)) first_hit();
  }
  const std::string& name() const { return name_; }
  KernelPath path() const { return path_; }
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  bool seen() const { return seen_.load(std::memory_order_relaxed); }
  // True when the op raised on the device since the last clear.
  bool failed_once() const { return failed_.load(std::memory_order_relaxed); }
  // True when TorchNeuron 2.13 runs this op on the device (per the current op set).
  bool on_device() const;
  // Reports that the op raised on the device. TorchNeuron retries a failed native op on the
  // CPU, so it counts as a fallback; with TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS=1
  // the error is rethrown as the real package words it. Call from a catch block.
  [[noreturn]] void failed(const std::exception& error);
  void clear();

 private:
  void first_hit();

  const std::string name_;
  const KernelPath path_;
  std::atomic<uint64_t> count_{0};
  std::atomic<bool> seen_{false};
  std::atomic<bool> failed_{false};  // raised on the device since the last clear
  std::atomic<bool> logged_{false};  // logged once per process, as the real package does
};

// The record of an op reaching the generic path (one per schema, made on first use).
TrackedOp& tracked_op(const c10::OperatorHandle& op);

// The op the calling thread is running (for diagnostics), or nullptr.
const TrackedOp* current_op();

namespace detail {
extern thread_local const TrackedOp* t_current_op;
struct CurrentOp {
  const TrackedOp* previous;
  explicit CurrentOp(const TrackedOp* op) : previous(t_current_op) { t_current_op = op; }
  ~CurrentOp() { t_current_op = previous; }
};
}  // namespace detail

// Runs `body`; an exception from it is reported as the op's failure (TrackedOp::failed).
template <typename Body>
decltype(auto) run_tracked(TrackedOp& op, Body&& body) {
  op.hit();
  detail::CurrentOp current(&op);
  try {
    return body();
  } catch (const c10::Error& error) {
    op.failed(error);
  }
}

// Base names (no "aten::", no overload) of the ops TorchNeuron runs on the device and of
// those it pins to the CPU; replaces the previous set.
void set_torchneuron_op_set(const std::vector<std::string>& device_ops,
                            const std::vector<std::string>& cpu_ops);
// Unique names of the ops seen since the last clear that TorchNeuron runs on the device
// (executed) or on the CPU (fallback).
std::vector<std::string> executed_op_names();
std::vector<std::string> fallback_op_names();
void clear_op_tracking();

struct OpCount {
  std::string name;
  uint64_t count;
  KernelPath path;
  bool on_device;
};
// Every op seen since the last clear, with its count and how the simulator ran it.
std::vector<OpCount> op_counts();

}  // namespace torch_neuron
