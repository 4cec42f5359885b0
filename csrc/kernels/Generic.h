// The generic path: every op without a kernel of ours runs its ATen CPU kernel on host views
// of device memory, boxed, through run_zero_copy (registered as the PrivateUse1 fallback).
// Note [Zero-copy kernels]
// The simulated NeuronCore computes with ATen's CPU kernels, on device memory:
//  1. each neuron input is replaced by a host view: a CPU tensor over the same bytes (same
//     sizes, strides, offset; no copy);
//  2. the CPU kernel runs under an AllocationRedirect (NeuronAllocator.h), so any tensor it
//     allocates is placed in the device's memory;
//  3. each output becomes a neuron tensor: a view of an input's storage when the CPU kernel
//     returned a view, the original argument for in-place and out= results, or a fresh
//     output adopted as is (its bytes are already in device memory).
// Hot ops call the CPU kernels directly and unboxed (kernels/Hot.cpp); every other op goes
// through one boxed path (kernels/Generic.cpp). Both are tracked as Note [Op tracking] says.
//
// Note [Asynchronous kernels]
// With NEURON_LAUNCH_BLOCKING=0 an op returns before its kernel has run:
//  - its outputs' metadata comes from ATen's meta kernels (run on meta tensors, cached per
//    op and argument signature), so shape and dtype errors are raised at the call;
//  - the outputs are allocated on the device, and a task on the current stream runs the
//    CPU kernel and copies its results into them (an out= variant is not used in their
//    place: some differ from their functional forms);
//  - the first call of each dtype signature (the dtypes, layouts and flags of the
//    arguments, not their sizes or numbers) runs inline and checks the meta kernel's outputs
//    against the CPU kernel's; a signature where they differ is never queued. The check
//    assumes that a meta kernel that agrees with the CPU kernel for one shape agrees for
//    all shapes of the same dtypes and memory formats;
//  - random ops reaching this path (ATen's have kernels of their own, kernels/Random.h, which
//    take their Philox words at the call and are queued) run inline after draining their
//    stream, drawing from a CPU generator seeded from the device's; so do ops that write an
//    argument sharing memory with another (overlap errors are raised at the call);
//  - a queued kernel's scratch is host memory (its outputs are preallocated), so it never
//    needs device memory the host may have taken meanwhile;
//  - the task holds the runtime buffers of every operand and fresh host views, never a
//    tensor owned by Python, so no task needs the GIL (HostWait.h);
//  - ops that cannot be described ahead run on the calling thread after the stream is
//    drained: ops whose outputs depend on data (nonzero, unique, ...) or that have no meta
//    kernel, ops returning plain values (.item()), views, and ops outside the aten
//    namespace (custom ops, whose code may be Python).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

namespace torch_neuron {

// Runs `op` (boxed, arguments on `stack`) with the zero-copy scheme above.
void run_zero_copy(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// The checks of a scatter into `self` in place (index_copy_, index_add_, scatter_, ...), at the
// call, before it may be queued: every other tensor operand on self's neuron device (as on
// CUDA), and no overlap of self with itself or with them (ATen's kernels check it too, but a
// queued kernel's error would fail the stream instead of the call).
void check_scatter_in_place(const char* name, const at::Tensor& self, c10::ArrayRef<const at::Tensor*> others);

}  // namespace torch_neuron
