// Note [Nested tensors]
// Nested tensors of the strided layout (NestedTensorImpl: one buffer, and per-component
// sizes, strides and offsets held as CPU tensors) run on the zero-copy path (kernels/Generic.cpp): a
// neuron nested tensor becomes a CPU nested tensor over a host view of its buffer, the CPU's
// nested kernel (NestedTensorCPU) runs, and a nested result comes back over device memory
// with its metadata. nn.TransformerEncoder's and nn.MultiheadAttention's fast paths (eval,
// a padding mask or nested inputs) build such tensors on any device PyTorch lists, the
// PrivateUse1 device among them. They run at the call, also in asynchronous mode (no meta
// kernels describe them), and as they are in 64 bits.
// This file: the dispatch key NestedTensorPrivateUse1 (the boxed path for every op; the ops
// below explicitly, where a CompositeImplicitAutograd kernel would otherwise decompose them
// into ops without nested kernels) and _to_copy (moves between the CPU and the device).
// Jagged nested tensors (layout=torch.jagged) are Python tensor subclasses over ordinary
// neuron tensors and need nothing here.
#include <ATen/NestedTensorImpl.h>
#include <ATen/native/nested/NestedTensorUtils.h>
#include <torch/library.h>

#include "../OpTracking.h"
#include "../HostViews.h"
#include "../Launch.h"
#include "Generic.h"
#include "KernelBody.h"

namespace torch_neuron {
namespace {

void nested_zero_copy(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  run_tracked(tracked_op(op), [&] { run_zero_copy(op, stack); });
}

// self.to(...) of a nested tensor on either side of the move: its buffer is copied (a copy_
// between devices), its metadata cloned, as NestedTensorCPU's _to_copy does on one device.
at::Tensor nested_to_copy(const at::Tensor& self, std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                          std::optional<at::Device> device, std::optional<bool> pin_memory, bool non_blocking,
                          std::optional<at::MemoryFormat> memory_format) {
  static TrackedOp& tracked = tracked_op(c10::Dispatcher::singleton().findSchemaOrThrow("aten::_to_copy", ""));
  return run_tracked(tracked, [&]() -> at::Tensor {
    TORCH_CHECK(self.is_nested(), "_to_copy: expected a nested tensor");
    TORCH_CHECK(layout.value_or(at::kStrided) == at::kStrided, "_to_copy of a nested tensor: layout ",
                *layout, " is not supported; nested tensors here have the strided layout");
    const at::Tensor source = memory_format == at::MemoryFormat::Contiguous ? self.contiguous() : self;
    const auto* nested = at::native::get_nested_tensor_impl(source);
    at::Tensor buffer = nested->get_unsafe_storage_as_tensor();
    at::Tensor target = at::empty({buffer.numel()}, buffer.options()
                                                       .dtype(dtype.value_or(source.scalar_type()))
                                                       .device(device.value_or(source.device()))
                                                       .pinned_memory(pin_memory));
    target.copy_(buffer, non_blocking);
    return at::native::wrap_buffer(target, nested->get_nested_sizes().clone(), nested->get_nested_strides().clone(),
                                   nested->get_storage_offsets().clone());
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(_, NestedTensorPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&nested_zero_copy>());
}

// Every aten op with a NestedTensorCPU kernel and a CompositeImplicitAutograd one
// (tests/kernels/test_nested.py checks the list against the installed PyTorch).
TORCH_LIBRARY_IMPL(aten, NestedTensorPrivateUse1, m) {
  m.impl("_to_copy", TORCH_FN(nested_to_copy));
  for (const char* name : {"linear", "matmul", "matmul.out", "chunk", "narrow", "silu_backward",
                           "value_selecting_reduction_backward"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&nested_zero_copy>());
  }
}

}  // namespace torch_neuron
