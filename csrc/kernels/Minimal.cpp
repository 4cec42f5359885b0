// The minimal kernel set of the neuron backend: tensor creation, copies between
// host and device, resize/set, views, reading a scalar. Everything else is
// computed by ATen's CPU kernels on device memory (Note [Host views], Hot.cpp).
#include <ATen/Context.h>
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/native/ResizeCommon.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "../NeuronAllocator.h"
#include "../NeuronCommon.h"
#include "../Dtype64.h"
#include "../HostViews.h"
#include "../Launch.h"
#include "../OpTracking.h"
#include "Generic.h"
#include "KernelBody.h"
#include "runtime/memory.h"

#include <cstring>

namespace torch_neuron {
namespace {

c10::DeviceIndex target_device(std::optional<c10::Device> device) {
  auto& rt = runtime();
  c10::DeviceIndex index = device && device->has_index() ? device->index()
                                                         : c10::DeviceIndex(rt.current_device());
  NEURON_RT_CALL(rt.check_device(index));
  return index;
}

// Note [Uninitialized memory in deterministic mode]
// Under torch.use_deterministic_algorithms(True), with
// torch.utils.deterministic.fill_uninitialized_memory (on by default), new memory is filled as
// the CPU's and CUDA's empty kernels fill it: NaN for floating and complex dtypes, the largest
// value for integer dtypes and bool. That covers every way to get memory without values: the
// empty factories (empty, empty_strided, and what calls them: empty_like, new_empty,
// empty_permuted, ...) and the part of a storage resize_ adds.
bool fills_uninitialized_memory() {
  const auto& context = at::globalContext();
  return C10_UNLIKELY(context.deterministicAlgorithms() && context.deterministicFillUninitializedMemory());
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<at::MemoryFormat> memory_format) {
  static TrackedOp counter("aten::empty.memory_format", KernelPath::kHot);
  counter.hit();
  TORCH_CHECK(!pin_memory.value_or(false), "Only dense CPU tensors can be pinned");
  TORCH_CHECK(layout.value_or(at::kStrided) == at::kStrided,
              "neuron tensors are strided only; got layout ", layout.value_or(at::kStrided));
  c10::DeviceGuard guard(c10::Device(kNeuron, target_device(device)));
  at::Tensor result = at::detail::empty_generic(size, neuron_allocator(),
                                                c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                c10::dtype_or_default(dtype), memory_format);
  if (fills_uninitialized_memory()) at::native::fill_empty_deterministic_(result);
  return result;
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                         std::optional<at::Device> device, std::optional<bool> pin_memory) {
  static TrackedOp counter("aten::empty_strided", KernelPath::kHot);
  counter.hit();
  TORCH_CHECK(!pin_memory.value_or(false), "Only dense CPU tensors can be pinned");
  c10::DeviceGuard guard(c10::Device(kNeuron, target_device(device)));
  at::Tensor result = at::detail::empty_strided_generic(size, stride, neuron_allocator(),
                                                        c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                        c10::dtype_or_default(dtype));
  if (fills_uninitialized_memory()) at::native::fill_empty_deterministic_(result);
  return result;
}

// Note [Simulated device memory] in runtime/copy.cpp: the DMA engine is the runtime's copy
// functions for plain byte copies (they hold the buffers they use); layout or dtype
// conversion runs the CPU copy kernel on host views (a strided DMA).
//
// Asynchronous mode: host -> device copies of up to kStagingBytes are staged through pinned
// host memory, so the caller's buffer is free at once and nothing waits; larger ones wait.
constexpr size_t kStagingBytes = 4u << 20;

size_t byte_offset(const at::Tensor& t) { return size_t(t.storage_offset()) * t.dtype().itemsize(); }

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  // TorchNeuron registers copy_ itself; PyTorch reaches ours through _copy_from.
  static TrackedOp counter("aten::copy_", KernelPath::kHot);
  counter.hit();
  const bool from_device = self.device().type() == kNeuron;
  if (self.sizes() != dst.sizes() && dst.numel() != 0) {
    // copy_ broadcasts the source to the destination's shape
    return copy_from(self.expand(dst.sizes()), dst, non_blocking);
  }
  const bool to_device = dst.device().type() == kNeuron;
  TORCH_CHECK(from_device || self.device().is_cpu(), "cannot copy from ", self.device(), " to ", dst.device());
  TORCH_CHECK(to_device || dst.device().is_cpu(), "cannot copy from ", self.device(), " to ", dst.device());
  if (dst.numel() == 0) return dst;
  // copy_'s contract, which TensorIterator checks on the CPU and CUDA (PyTorch hands a
  // device's copies to _copy_from before building one): no element of the destination is
  // written twice, and the destination does not partly overlap the source. Checked here, at
  // the call, for every path below (the plain DMA copy included, and queued copies).
  at::assert_no_internal_overlap(dst);
  at::assert_no_partial_overlap(dst, self);
  // One launch per copy, whichever way below it is made (Note [Launches]).
  note_launch(LaunchPath::kCopy, "aten::copy_", to_device ? dst.device().index() : self.device().index(),
              LaunchOperands::of_tensors(self, dst));
  const bool plain = self.dtype() == dst.dtype() && self.is_contiguous() && dst.is_contiguous() &&
                     self.sizes() == dst.sizes() && self.is_conj() == dst.is_conj() &&
                     self.is_neg() == dst.is_neg();
  const size_t bytes = dst.nbytes();
  if (from_device && !to_device) {  // device -> host
    const c10::DeviceIndex device = self.device().index();
    auto source = buffer_ref_of(self.storage());
    neuron_rt::BufferRef pinned = non_blocking ? pinned_buffer_at(dst.storage().data()) : neuron_rt::BufferRef();
    if (plain && pinned) {
      NEURON_RT_CALL(neuron_rt::copy_device_to_host(current_stream(device), dst.data_ptr(), pinned, source,
                                                    byte_offset(self), bytes, /*blocking=*/false));
      return dst;
    }
    run_here_on(device);  // the sync point
    if (plain) {
      NEURON_RT_CALL(neuron_rt::copy_device_to_host(current_stream(device), dst.data_ptr(), neuron_rt::BufferRef(),
                                                    source, byte_offset(self), bytes, /*blocking=*/true));
    } else {
      HostCall call;
      call.device = device;
      dst.copy_(call.to_host(self));
    }
    return dst;
  }
  if (!from_device && to_device) {  // host -> device
    const c10::DeviceIndex device = dst.device().index();
    auto& stream = current_stream(device);
    // A small copy to an idle stream is done at the call (Note [Small ops on an idle stream]).
    const bool queue = asynchronous() && !runs_at_call_when_idle(int64_t(bytes), device);
    if (plain) {
      auto target = buffer_ref_of(dst.storage());
      neuron_rt::BufferRef hold = non_blocking ? pinned_buffer_at(self.storage().data()) : neuron_rt::BufferRef();
      const void* source = self.const_data_ptr();
      if (!hold && queue && bytes <= kStagingBytes) {  // stage: the caller's memory is free at once
        hold = neuron_rt::BufferRef::adopt(NEURON_RT_CALL(neuron_rt::HostMemory::get().allocate(bytes)));
        std::memcpy(hold->data(), source, bytes);
        source = hold->data();
      }
      const bool blocking = !hold;
      if (blocking && queue) synchronize_stream(stream);  // the copy then runs at once: the wait is ours
      NEURON_RT_CALL(neuron_rt::copy_host_to_device(stream, target, byte_offset(dst), source, hold, bytes, blocking));
      return dst;
    }
    HostCall call;
    call.device = device;
    at::Tensor target = call.to_host(dst);
    if (queue) {  // a fresh copy of the source: the caller may change it
      enqueue_views(call, [target, source = self.clone()]() mutable { target.copy_(source); });
    } else {
      AllocationRedirect redirect(device);
      target.copy_(self);
    }
    return dst;
  }
  // device to device (same core, or another core of the instance)
  const c10::DeviceIndex device = dst.device().index();
  // Between two cores a conversion runs at the call, after both streams are drained: queued on
  // the destination's stream, it would not be ordered after later work on the source's stream
  // (a write to the source could overtake it).
  const bool other_core = self.device().index() != device;
  const bool queue = asynchronous() && !other_core && !runs_at_call_when_idle(int64_t(bytes) * 2, device);
  if (other_core) run_here_on(self.device().index());
  if (other_core && !plain) run_here_on(device);
  if (plain) {
    NEURON_RT_CALL(neuron_rt::copy_device_to_device(current_stream(device), buffer_ref_of(dst.storage()),
                                                    byte_offset(dst), buffer_ref_of(self.storage()),
                                                    byte_offset(self), bytes, /*blocking=*/other_core));
    return dst;
  }
  HostCall call;
  call.device = device;
  at::Tensor target = call.to_host(dst);
  at::Tensor source = call.to_host(self);
  if (queue) {
    // Note [Adaptive Eager Execution]: elementwise work a concatenation group admits.
    enqueue_views(call, [target, source]() mutable { target.copy_(source); }, "aten::copy_", /*fusable=*/true);
  } else {
    AllocationRedirect redirect(device);
    target.copy_(source);
  }
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  static TrackedOp counter("aten::_copy_from_and_resize", KernelPath::kHot);
  counter.hit();
  dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

void resize_storage_bytes(const at::Tensor& self, size_t new_bytes) {
  c10::DeviceGuard guard(self.device());
  at::detail::getPrivateUse1Hooks().resizePrivateUse1Bytes(self.storage(), new_bytes);
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<at::MemoryFormat> memory_format) {
  static TrackedOp counter("aten::resize_", KernelPath::kHot);
  counter.hit();
  at::native::check_size_nonnegative(size);
  auto* impl = self.unsafeGetTensorImpl();
  if (self.sizes() == size && !memory_format) return self;  // keeps its strides, as on CPU
  impl->set_sizes_contiguous(size);
  const size_t needed = at::detail::computeStorageNbytesContiguous(size, self.dtype().itemsize(),
                                                                   self.storage_offset());
  const size_t old_bytes = self.storage().nbytes();
  if (needed > old_bytes) resize_storage_bytes(self, needed);
  if (memory_format) impl->empty_tensor_restride(*memory_format);
  if (needed > old_bytes && fills_uninitialized_memory()) {
    at::native::fill_resize_deterministic_(self, int64_t(old_bytes));
  }
  return self;
}

at::Tensor& set_storage(at::Tensor& self, at::Storage source, int64_t offset, c10::IntArrayRef size,
                        c10::IntArrayRef stride) {
  static TrackedOp counter("aten::set_.source_Storage_storage_offset", KernelPath::kHot);
  counter.hit();
  TORCH_CHECK(source.device().type() == kNeuron || source.nbytes() == 0,
              "set_: expected a neuron storage, got one on ", source.device());
  auto* impl = self.unsafeGetTensorImpl();
  if (impl->storage().unsafeGetStorageImpl() != source.unsafeGetStorageImpl()) {
    impl->set_storage_keep_dtype(std::move(source));
  }
  std::vector<int64_t> strides(stride.begin(), stride.end());
  if (stride.empty()) {
    auto contiguous = c10::contiguous_strides(size);
    strides.assign(contiguous.begin(), contiguous.end());
  }
  impl->set_sizes_and_strides(size, strides, offset);
  const size_t needed = at::detail::computeStorageNbytes(size, strides, self.dtype().itemsize(), offset);
  if (needed > self.storage().nbytes()) resize_storage_bytes(self, needed);
  return self;
}

at::Tensor& set_source_storage(at::Tensor& self, at::Storage source) {
  const int64_t numel = int64_t(source.nbytes() / self.dtype().itemsize());
  return set_storage(self, std::move(source), 0, {numel}, {});
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  if (self.unsafeGetTensorImpl() == source.unsafeGetTensorImpl()) return self;
  return set_storage(self, source.storage(), source.storage_offset(), source.sizes(), source.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::DeviceGuard guard(self.device());
  c10::Storage storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), 0, neuron_allocator()->allocate(0), neuron_allocator(), true));
  return set_storage(self, std::move(storage), 0, {0}, {});
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  static TrackedOp counter("aten::_local_scalar_dense", KernelPath::kHot);
  counter.hit();
  HostCall call;
  call.device = run_here_on(self.device().index());  // a sync point
  note_launch(LaunchPath::kCopy, "aten::_local_scalar_dense", call.device);  // a device-to-host read
  return at::native::_local_scalar_dense_cpu(call.to_host(self));
}

at::Tensor view(const at::Tensor& self, c10::IntArrayRef size) {
  static TrackedOp counter("aten::view", KernelPath::kHot);
  counter.hit();
  return at::native::view(self, size);
}

at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<int64_t> offset) {
  static TrackedOp counter("aten::as_strided", KernelPath::kHot);
  counter.hit();
  return at::native::as_strided_tensorimpl(self, size, stride, offset);
}

at::Tensor reshape_alias(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride) {
  static TrackedOp counter("aten::_reshape_alias", KernelPath::kHot);
  counter.hit();
  return at::native::_reshape_alias(self, size, stride);
}

at::Tensor unfold(const at::Tensor& self, int64_t dimension, int64_t size, int64_t step) {
  static TrackedOp counter("aten::unfold", KernelPath::kHot);
  counter.hit();
  return at::native::unfold(self, dimension, size, step);
}

// tensor.record_stream(s): Note [Buffers] (the block is reused only after `s` has run the
// work it had queued when the tensor was freed).
void record_stream(at::Tensor& self, c10::Stream stream) {
  static TrackedOp counter("aten::record_stream", KernelPath::kHot);
  counter.hit();
  TORCH_CHECK(stream.device_type() == kNeuron, "record_stream: expected a neuron stream, got one on ",
              stream.device());
  neuron_rt::BufferRef buffer = buffer_ref_of(self.storage());
  if (!buffer) return;
  auto& s = NEURON_RT_CALL(runtime().stream(stream.device_index(), static_cast<int>(stream.id())));
  NEURON_RT_CALL(buffer->record_stream(s));
}

// Whether `self.data = from` may swap in `from`'s storage: true between dense
// neuron and dense CPU tensors, as between CUDA and CPU ones. Without it,
// module.to("neuron") would make new Parameters and untie shared weights.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  return self.layout() == at::kStrided && from.layout() == at::kStrided;
}

// A zero tensor (autograd's stand-in for all-zero gradients): no memory at all.
at::Tensor efficient_zero_tensor(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                                 std::optional<at::Layout> layout, std::optional<at::Device> device,
                                 std::optional<bool> pin_memory) {
  static TrackedOp counter("aten::_efficientzerotensor", KernelPath::kHot);
  counter.hit();
  at::native::ZeroTensorAllocator allocator(c10::Device(kNeuron, target_device(device)));
  auto keys = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1) | c10::DispatchKeySet(c10::DispatchKey::ZeroTensor);
  return at::detail::empty_generic(size, &allocator, keys, c10::dtype_or_default(dtype), std::nullopt);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_efficientzerotensor", TORCH_FN(efficient_zero_tensor));
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage));
  m.impl("set_.source_Storage", TORCH_FN(set_source_storage));
  m.impl("set_.source_Tensor", TORCH_FN(set_source_tensor));
  m.impl("set_", TORCH_FN(set_empty));
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
  m.impl("view", TORCH_FN(view));
  m.impl("as_strided", TORCH_FN(as_strided));
  m.impl("_reshape_alias", TORCH_FN(reshape_alias));
  m.impl("unfold", TORCH_FN(unfold));
  m.impl("record_stream", TORCH_FN(record_stream));
}

}  // namespace
}  // namespace torch_neuron
