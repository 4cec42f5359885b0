// Note [Executing programs]
// A ProgramExecutor runs a program (Note [Programs] in runtime/program.h) on the neuron
// device with no Python per op: one call runs every node, in order, with ATen's CPU
// kernels on host views of device memory (Note [Zero-copy kernels]).
//  - Memory follows the program's static plan: intermediates live at fixed offsets of an
//    arena the executor allocates once and reuses for every call (their host views are
//    made once); each output gets a fresh device tensor per call; views are computed when
//    the program is loaded, not run as ops.
//  - A node's kernel writes its result straight into the value's planned memory: common
//    ops call their `at::cpu::*_out` kernel on the slot; any other op runs through the
//    dispatcher with the slot's memory lent to its output allocation (LendOutputs), so
//    almost nothing is copied.
//  - Launch-blocking mode runs the nodes on the calling thread; asynchronous mode queues
//    the whole program as one task on the current stream (the task holds the buffers of
//    its inputs, outputs, arena and constants), so a compiled forward costs the host one
//    enqueue.
//  - A call checks its inputs (count, device, dtype, sizes, strides) against the program:
//    a mismatch is a clear error naming the input, never a wrong result.
//  - A program is trusted only as far as it was checked (Note [Program loader checks]): the
//    runtime's loader checks its memory; the executor checks, when it builds the plan, each
//    argument's kind against its op's schema and, when it runs, that each result a dispatched
//    kernel returns is a strided tensor inside its storage and that each view of an input or
//    output lies inside the call's storage (neuron_rt::rebase_view).
//
// Thread safety: run() may be called from any thread; calls of one executor are
// serialised (they share the arena).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "../DeviceClock.h"
#include "runtime/buffer.h"
#include "runtime/cost_model.h"
#include "runtime/program.h"

namespace torch_neuron {

// NEURON_SIM_PROGRAM_PROFILE=1: (op, calls, seconds) summed over every program's steps since
// the start or the last reset.
std::vector<std::tuple<std::string, uint64_t, double>> program_profile(bool reset);

class ProgramExecutor : public std::enable_shared_from_this<ProgramExecutor> {
 public:
  ProgramExecutor(neuron_rt::ProgramDesc program, c10::DeviceIndex device);
  ~ProgramExecutor();
  // `within_graph`: a later part of one compiled graph cut at its collectives (Note [Graphs with
  // collectives]): the device runs such a graph as one program, launched once, so this call's
  // predicted device time has no launch cost of its own (Note [Device clock]).
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs, bool within_graph = false);

  const neuron_rt::ProgramDesc& program() const { return program_; }
  c10::DeviceIndex device() const { return device_; }
  uint64_t calls() const { return calls_.load(); }
  // Nodes run by a direct `at::cpu::*_out` kernel / through the dispatcher.
  size_t direct_nodes() const;
  size_t dispatched_nodes() const;

  struct Step;
  struct RunState;

 private:
  void build();
  std::unique_ptr<Step> pointwise_step(const neuron_rt::ProgramNode& node, std::unique_ptr<Step> step);
  void bind_call(RunState& state, const std::vector<at::Tensor>& inputs, std::vector<at::Tensor>& outputs);
  void execute(RunState& state);
  void execute_steps(RunState& state, std::vector<std::pair<const std::string*, uint64_t>>* times);
  void check_fixed(const Step& step);  // Note [Fixed values keep their metadata]
  void run_collective(RunState& state, const Step& step);  // Note [Collectives in programs]
  void settle_collectives(RunState& state) noexcept;
  void execute_steps_profiled(RunState& state);
  const at::Tensor& device_value(RunState& state, int id);
  void describe_cost();  // Note [Device clock]: cost_ from the program's values and nodes

  neuron_rt::ProgramDesc program_;
  const c10::DeviceIndex device_;
  std::mutex mutex_;
  neuron_rt::BufferRef arena_;
  std::vector<neuron_rt::BufferRef> constants_;
  // Per value: its host view when it does not change between calls (arena, constants and
  // views of them), else undefined.
  std::vector<at::Tensor> fixed_;
  std::vector<at::Tensor> pristine_;  // fixed_ as built (own TensorImpls): the reference and the restore
  std::vector<bool> per_call_;  // the value depends on a call's inputs or outputs
  std::vector<int> root_;       // the value whose storage a value uses (itself for roots)
  std::vector<std::unique_ptr<Step>> steps_;
  std::atomic<uint64_t> calls_{0};
  std::unique_ptr<neuron_rt::WorkCost> cost_;  // its predicted device time per call (null: the clock is off)
  std::unique_ptr<neuron_rt::WorkCost> cost_within_graph_;  // the same without the launch (run(within_graph))
  bool runs_inline_ = false;  // also in asynchronous mode (see run())
  bool has_collectives_ = false;  // Note [Collectives in programs]
  const void* arena_stream_ = nullptr;  // the stream of the last call (the arena's user)
  uint64_t arena_marker_ = 0;
};

// The device clock's view of `program`'s nodes on `device` (DeviceClock.h, cost_of_program):
// each node's op and storage-less stand-ins of its values. The executor costs itself with it
// once, when built; the dry run costs a lowered program it never builds.
std::vector<ProgramStepOperands> program_step_operands(const neuron_rt::ProgramDesc& program, c10::DeviceIndex device);

// The ops a program step runs through their direct kernel (Note [Direct kernels]).
std::vector<std::string> program_direct_ops();

}  // namespace torch_neuron
