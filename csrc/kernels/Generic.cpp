#include "Generic.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/core/List.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <optional>

#include "../HostViews.h"
#include "../Launch.h"
#include "../NeuronGenerator.h"
#include "../OpTracking.h"
#include "MetaPlanning.h"
#include "OpPlan.h"
#include "SmallMatmul.h"

namespace torch_neuron {
namespace {

// aten::mm of two 2-D bfloat16 host tensors whose shape takes the brgemm kernel at this
// thread's count (Note [Small bfloat16 matmuls]; probes the shape the first time).
bool is_small_bf16_mm(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  if (stack.size() != 2 || !stack[0].isTensor() || !stack[1].isTensor()) return false;
  const auto& name = op.operator_name();
  return name.name == "aten::mm" && name.overload_name.empty() && stack[0].toTensor().device().is_cpu() &&
         stack[1].toTensor().device().is_cpu() && small_matmul_suits(stack[0].toTensor(), stack[1].toTensor());
}

// Runs `op` on host arguments (neuron tensors replaced by host views) with Note [64-bit as
// 32-bit]; the call's device is `device` (the redirect is the caller's). Returns the CPU
// results. When `outputs` is given (queued functional ops), the results are written into
// those host views of the preallocated outputs instead.
torch::jit::Stack launch_on_host(const OpPlan& plan, const c10::OperatorHandle& op, torch::jit::Stack args,
                                 const std::vector<at::Tensor>& outputs, c10::DeviceIndex device) {
  const size_t num_arguments = args.size();
  const Narrowing& rule = *plan.narrowing;
  bool narrowed_float = false, narrowed_int = false;
  torch::jit::Stack wide;  // the arguments before narrowing, when narrowed
  // Note [Nested tensors]: nested arguments take the CPU's nested kernels, as they are.
  bool has_nested = false;
  for (size_t i = 0; i < num_arguments; ++i) {
    for_each_tensor(args[i], [&](const at::Tensor& t) { has_nested = has_nested || (t.defined() && t.is_nested()); });
  }
  const c10::DispatchKeySet cpu_kernel(has_nested ? c10::DispatchKey::NestedTensorCPU : c10::DispatchKey::CPU);
  // Whether the call has 64-bit values, and then whether it narrows them or why it does not.
  bool has_64bit_values = false;
  for (size_t i = 0; i < num_arguments && !has_64bit_values && !has_nested; ++i) {
    if (rule.index_argument[i]) continue;
    for_each_tensor(args[i], [&](const at::Tensor& t) {
      has_64bit_values = has_64bit_values || (t.defined() && is_64bit(t.scalar_type()) &&
                                              !t.unsafeGetTensorImpl()->is_wrapped_number());
    });
  }
  Width64 how = Width64::k32Bit;
  if (!has_64bit_values) {
  } else if (!compute_64bit_as_32bit()) {
    how = Width64::kNative;
  } else if (!plan.aten) {
    how = Width64::kNotAten;
  } else if (rule.exact) {
    how = Width64::kDataMovement;
  } else if (!plan.on_device) {
    how = Width64::kOnCpu;
  } else if (mixes_widths([&](const auto& fn) {
               for (size_t i = 0; i < num_arguments; ++i) {
                 if (rule.value_argument[i]) for_each_tensor(args[i], fn);
               }
             })) {
    how = Width64::kMixedWidths;
  } else if (!scalars_fit_32bit(args.data(), num_arguments)) {
    how = Width64::kLargeScalar;
  } else if (writes_aliased_memory(plan, args.data(), num_arguments, Sharing::kPartial)) {
    how = Width64::kAliased;
  }
  if (has_64bit_values && how == Width64::k32Bit) {
    // One narrowed copy per view: arguments that are the same view of memory (in place,
    // out= one of the inputs) stay one tensor, so the kernel sees them alias as on the CPU.
    std::vector<std::pair<at::Tensor, at::Tensor>> copies;  // (view, its narrowed copy)
    auto narrow = [&](const at::Tensor& t) -> at::Tensor {
      if (!t.defined() || !is_64bit(t.scalar_type()) || t.unsafeGetTensorImpl()->is_wrapped_number()) return t;
      (t.scalar_type() == at::kDouble ? narrowed_float : narrowed_int) = true;
      // The very same view only: equal first and last bytes and strides (MemOverlapStatus::Full)
      // also hold for a (n, 1) column and its (1, n) transpose, which are different tensors.
      for (const auto& [view, copy] : copies) {
        if (view.is_alias_of(t) && view.storage_offset() == t.storage_offset() && view.sizes() == t.sizes() &&
            view.strides() == t.strides() && view.scalar_type() == t.scalar_type() && view.is_conj() == t.is_conj() &&
            view.is_neg() == t.is_neg()) {
          return copy;
        }
      }
      copies.emplace_back(t, t.to(narrow_64bit(t.scalar_type())));
      return copies.back().second;
    };
    for (size_t i = 0; i < num_arguments; ++i) {
      if (!rule.value_argument[i]) continue;
      c10::IValue& value = args[i];
      if (value.isTensor()) {
        at::Tensor narrowed = narrow(value.toTensor());
        if (narrowed.is_same(value.toTensor())) continue;
        if (wide.empty()) wide = args;
        value = std::move(narrowed);
      } else if (list_has_tensors(value)) {
        c10::IValue narrowed = list_map(value, narrow);
        if (wide.empty()) wide = args;
        value = std::move(narrowed);
      }
    }
  }
  // What each written (in-place / out=) argument was given: its host view, or its narrowed copy.
  std::vector<std::pair<size_t, at::Tensor>> written;
  for (size_t i = 0; i < num_arguments; ++i) {
    if (plan.is_written[i] && args[i].isTensor()) written.emplace_back(i, args[i].toTensor());
  }
  torch::jit::Stack stack = args;
  // Note [Small bfloat16 matmuls]: a queued (or first-of-its-signature) bf16 aten::mm takes
  // the brgemm kernel too. Its shape is probed here, before the output lending below, so
  // that the probe's own tensors never take the lent memory.
  const bool small_mm = wide.empty() && is_small_bf16_mm(op, stack);
  // Queued functional op with one output: the kernel's output is allocated in the
  // preallocated output's memory when the sizes match (no second buffer, no copy below).
  // Not with several outputs: a kernel allocating them in another order would swap them.
  std::optional<LendOutputs> lend;
  if (outputs.size() == 1 && wide.empty()) {
    std::vector<c10::Storage> storages;
    for (const at::Tensor& out : outputs) {
      if (out.defined() && out.storage_offset() == 0) storages.push_back(out.storage());
    }
    lend.emplace(storages);
  }
  if (small_mm) {
    at::Tensor out = small_matmul(stack[0].toTensor(), stack[1].toTensor());  // in the lent memory
    stack.clear();
    stack.emplace_back(std::move(out));
  } else if (wide.empty()) {
    op.redispatchBoxed(cpu_kernel, &stack);
  } else {
    try {
      op.redispatchBoxed(cpu_kernel, &stack);
    } catch (const c10::OutOfMemoryError&) {
      throw;
    } catch (const c10::Error&) {
      // the 32-bit form is refused: compute in 64 bits (nothing was written yet: written
      // arguments are narrowed copies)
      how = Width64::kRefused;
      stack = wide;
      wide.clear();
      narrowed_float = narrowed_int = false;
      for (auto& entry : written) entry.second = stack[entry.first].toTensor();
      op.redispatchBoxed(cpu_kernel, &stack);
    }
  }
  if (has_64bit_values) plan.width64->count(how);
  // Written arguments given narrowed copies: copy the results back into the 64-bit views.
  for (auto& [index, given] : written) {
    if (wide.empty()) break;
    const c10::IValue& original = wide[index];
    if (original.isTensor() && !original.toTensor().is_same(given)) {
      at::Tensor target = original.toTensor();
      if (target.sizes() != given.sizes()) target.resize_(given.sizes());
      target.copy_(given);
    }
  }
  const bool requested = typed_on_request(rule, wide.empty() ? args.data() : wide.data(), num_arguments);
  auto widen = [&](const at::Tensor& t) -> at::Tensor {
    if (!t.defined() || requested) return t;
    const at::ScalarType type = widened_result(t.scalar_type(), narrowed_float, narrowed_int);
    return type == t.scalar_type() ? t : t.to(type);
  };
  // Results: written arguments come back as the wide views; fresh results are widened.
  for (size_t r = 0; r < stack.size(); ++r) {
    const int argument = plan.write_alias_of[r];
    if (argument >= 0 && stack[r].isTensor()) {
      stack[r] = wide.empty() ? args[argument] : wide[argument];
    } else if (stack[r].isTensor()) {
      stack[r] = widen(stack[r].toTensor());
    } else if (list_has_tensors(stack[r])) {
      stack[r] = list_map(stack[r], widen);
    }
  }
  if (!outputs.empty()) {  // queued functional op: into the preallocated outputs
    size_t next = 0;
    for (size_t r = 0; r < stack.size(); ++r) {
      if (plan.write_alias_of[r] >= 0) continue;
      for_each_tensor(stack[r], [&](const at::Tensor& result) {
        const at::Tensor& out = outputs.at(next++);
        if (!out.defined() || !result.defined()) return;
        const bool in_place = result.const_data_ptr() == out.const_data_ptr() && result.sizes() == out.sizes() &&
                              result.strides() == out.strides();
        if (!in_place) out.copy_(result);
      });
    }
    return {};
  }
  return stack;
}

// ---- inline: on the calling thread ----------------------------------------------------------

void run_inline(const OpPlan& plan, const c10::OperatorHandle& op, torch::jit::Stack* stack, size_t begin,
                c10::DeviceIndex device, bool drain) {
  if (drain) device = run_here_on(device);
  const size_t num_arguments = stack->size() - begin;
  HostCall call;
  call.device = device;
  torch::jit::Stack originals(stack->begin() + begin, stack->end());
  torch::jit::Stack args(stack->begin() + begin, stack->end());
  for (size_t i = 0; i < num_arguments; ++i) {
    c10::IValue& value = args[i];
    if (value.isTensor()) {
      value = call.to_host(value.toTensor());
    } else if (list_has_tensors(value)) {
      value = list_map(value, [&](const at::Tensor& t) { return call.to_host(t); });
    } else if (plan.is_generator[i]) {
      value = cpu_generator_for(value.isNone() ? std::nullopt : std::optional<at::Generator>(value.toGenerator()), device);
    } else if (value.isDevice() && value.toDevice().type() == kNeuron) {
      value = c10::Device(c10::DeviceType::CPU);
    }
  }
  const torch::jit::Stack host_args = args;
  torch::jit::Stack results;
  {
    c10::DeviceGuard guard(c10::Device(kNeuron, device));
    // Only aten kernels allocate from the device: a custom op's code may keep what it
    // allocates (its outputs are copied to the device below).
    std::optional<AllocationRedirect> redirect;
    if (plan.aten) redirect.emplace(device);
    results = launch_on_host(plan, op, std::move(args), {}, device);
  }
  // Written arguments: give the device tensors the metadata the kernel set on their views.
  for (size_t i = 0; i < num_arguments; ++i) {
    if (plan.is_written[i] && originals[i].isTensor()) {
      call.sync_argument(originals[i].toTensor(), host_args[i].toTensor());
    }
  }
  for (size_t r = 0; r < results.size(); ++r) {
    c10::IValue& value = results[r];
    const int argument = plan.write_alias_of[r];
    if (argument >= 0 && value.isTensor()) {
      value = originals[argument];
    } else if (value.isTensor()) {
      value = call.to_device(value.toTensor());
    } else if (list_has_tensors(value)) {
      value = list_map(value, [&](const at::Tensor& t) { return call.to_device(t); });
    }
  }
  note_launch(LaunchPath::kGeneric, plan.name.c_str(), device, LaunchOperands::boxed(originals, results));
  stack->resize(begin);
  stack->insert(stack->end(), results.begin(), results.end());
}

// The task's host arguments: fresh views of neuron tensors (through `call`), CPU values
// copied now (the caller may change them, and a task must hold nothing Python owns), the
// device's generator engine, the CPU for the neuron device.
torch::jit::Stack host_arguments(const OpPlan& plan, const c10::IValue* arguments, size_t count, HostCall& call,
                                 c10::DeviceIndex device) {
  torch::jit::Stack args;
  auto host = [&](const at::Tensor& t) -> at::Tensor {
    if (!t.defined() || t.device().type() == kNeuron) return call.to_host(t);
    at::Tensor copy = t.clone();
    if (t.unsafeGetTensorImpl()->is_wrapped_number()) copy.unsafeGetTensorImpl()->set_wrapped_number(true);
    return copy;
  };
  for (size_t i = 0; i < count; ++i) {
    const c10::IValue& value = arguments[i];
    if (value.isTensor()) {
      args.emplace_back(host(value.toTensor()));
    } else if (list_has_tensors(value)) {
      args.emplace_back(list_map(value, host));
    } else if (plan.is_generator[i]) {
      args.emplace_back(cpu_generator_for(value.isNone() ? std::nullopt : std::optional<at::Generator>(value.toGenerator()), device));
    } else if (value.isDevice() && value.toDevice().type() == kNeuron) {
      args.emplace_back(c10::Device(c10::DeviceType::CPU));
    } else {
      args.push_back(value);
    }
  }
  return args;
}

// Note [Small ops on an idle stream]: the operands and the outputs the meta kernel gave.
bool runs_inline_when_idle(const MetaEntry& meta, const c10::IValue* arguments, size_t count,
                           c10::DeviceIndex device) {
  const int64_t limit = inline_bytes_limit();
  int64_t bytes = 0;
  for (size_t i = 0; i < count && bytes <= limit; ++i) {
    for_each_tensor(arguments[i], [&](const at::Tensor& t) { bytes += bytes_of(t); });
  }
  for (const auto& metas : meta.outputs) {
    for (const TensorMeta& t : metas) {
      if (t.defined) bytes += c10::multiply_integers(t.sizes) * int64_t(c10::elementSize(t.dtype));
    }
  }
  return runs_at_call_when_idle(bytes, device);
}

void enqueue(const OpPlan& plan, const c10::OperatorHandle& op, torch::jit::Stack* stack, size_t begin,
             c10::DeviceIndex device, const MetaEntry& meta_entry) {
  const MetaEntry* meta = &meta_entry;
  const size_t num_arguments = stack->size() - begin;
  const c10::IValue* arguments = stack->data() + begin;
  // out= arguments the kernel would resize get their new metadata now (a larger storage is
  // allocated, the old bytes copied on the stream), so the queued kernel finds them sized.
  for (const auto& [index, target] : meta->resized) {
    at::Tensor out = arguments[index].toTensor();
    out.resize_(target.sizes);
    if (out.strides() != c10::IntArrayRef(target.strides)) out.as_strided_(target.sizes, target.strides);
  }

  // Outputs on the device, then the task's host arguments (fresh views; CPU values copied
  // now: the caller may change them, and the task must hold nothing Python owns).
  const auto options = at::TensorOptions().device(kNeuron, device);
  std::vector<c10::IValue> results;
  std::vector<at::Tensor> new_outputs;
  for (size_t r = 0, m = 0; r < plan.write_alias_of.size(); ++r) {
    if (plan.write_alias_of[r] >= 0) {
      results.push_back(arguments[plan.write_alias_of[r]]);
      continue;
    }
    const auto& metas = meta->outputs[m];
    std::vector<at::Tensor> made;
    for (const TensorMeta& t : metas) {
      made.push_back(t.defined ? at::empty_strided(t.sizes, t.strides, options.dtype(t.dtype)) : at::Tensor());
      new_outputs.push_back(made.back());
    }
    results.push_back(meta->output_is_list[m] ? c10::IValue(c10::List<at::Tensor>(made)) : c10::IValue(made[0]));
    ++m;
  }
  HostCall call;
  call.device = device;
  torch::jit::Stack args = host_arguments(plan, arguments, num_arguments, call, device);
  std::vector<at::Tensor> output_views;
  for (const at::Tensor& out : new_outputs) output_views.push_back(call.to_host(out));
  note_launch(LaunchPath::kQueued, plan.name.c_str(), device,
              LaunchOperands::boxed(c10::ArrayRef<c10::IValue>(arguments, num_arguments), results));
  enqueue_views(
      call,
      [&plan, op, args = std::move(args), output_views = std::move(output_views), device]() mutable {
        launch_on_host(plan, op, std::move(args), output_views, device);
      },
      plan.name.c_str(), plan.fusable);
  stack->resize(begin);
  stack->insert(stack->end(), results.begin(), results.end());
}

}  // namespace

void run_zero_copy(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const OpPlan& plan = plan_for(op);
  // An op without a CPU kernel (PyTorch implements some for accelerators only: Note
  // [Accelerator-only ops] in AcceleratorOnly.cpp) has nothing for this path to run: say so,
  // rather than the dispatcher's message about the 'CPU' backend.
  const size_t num_arguments = op.schema().arguments().size();
  const size_t begin = stack->size() - num_arguments;
  // Note [Nested tensors]: nested arguments take the CPU's nested kernels.
  bool nested = false;
  for (size_t i = 0; i < num_arguments; ++i) {
    for_each_tensor((*stack)[begin + i], [&](const at::Tensor& t) { nested = nested || (t.defined() && t.is_nested()); });
  }
  TORCH_CHECK_NOT_IMPLEMENTED(op.hasComputedKernelForDispatchKey(nested ? c10::DispatchKey::NestedTensorCPU
                                                                        : c10::DispatchKey::CPU),
                              "Could not run '",
                              plan.name, "' on the neuron device: it has no neuron kernel, and no CPU kernel for the ",
                              "simulated device to compute with (PyTorch implements it for other devices only, ",
                              "e.g. CUDA). See COVERAGE.md, \"Accelerator-only ops\".");
  if (plan.random) check_generator_device(plan, *stack, begin);
  DeviceCheck check;
  for (size_t i = 0; i < num_arguments; ++i) {
    const c10::IValue& value = (*stack)[begin + i];
    if (value.isTensor() || list_has_tensors(value)) {
      for_each_tensor(value, [&](const at::Tensor& t) { check.add(t, plan.name.c_str(), plan.allows_cpu[i]); });
    } else if (value.isDevice() && value.toDevice().type() == kNeuron && check.device < 0) {
      check.device = value.toDevice().has_index() ? value.toDevice().index()
                                                  : c10::DeviceIndex(runtime().current_device());
    }
  }
  c10::DeviceIndex device = check.device >= 0 ? check.device : c10::DeviceIndex(runtime().current_device());
  NEURON_RT_CALL(runtime().check_device(device));
  if (asynchronous()) {
    // A view reads no data: no need to wait for the stream.
    if (plan.view) return run_inline(plan, op, stack, begin, device, /*drain=*/false);
    // Note [Nested tensors]: no meta kernels to describe them ahead; they run at the call.
    if (nested) return run_inline(plan, op, stack, begin, device, /*drain=*/true);
    const c10::IValue* arguments = stack->data() + begin;
    // Random ops run at the call, in program order (a queued draw would happen in the order
    // the streams' workers run, which varies); so do ops writing an argument that shares
    // memory with another (the CPU kernel's overlap checks must raise at the call).
    std::shared_ptr<const MetaEntry> meta;
    if (plan.aten && plan.tensor_returns && !plan.random && !writes_aliased_memory(plan, arguments, num_arguments, Sharing::kOtherView)) {
      meta = meta_for(plan, op, arguments, num_arguments);
    }
    if (meta && meta->queueable) {
      std::optional<int> verdict;
      {
        std::shared_lock<std::shared_mutex> lock(plan.meta_mutex);
        auto it = plan.verified.find(meta->dtype_key);
        if (it != plan.verified.end()) verdict = it->second;
      }
      if (verdict && *verdict == kQueue) {
        if (runs_inline_when_idle(*meta, arguments, num_arguments, device)) {
          return run_inline(plan, op, stack, begin, device, /*drain=*/false);  // the stream is idle
        }
        return enqueue(plan, op, stack, begin, device, *meta);
      }
      if (!verdict) {  // first call of this dtype signature: inline, and compare with the meta kernel
        std::vector<at::Tensor> resized;
        for (const auto& entry : meta->resized) resized.push_back(arguments[entry.first].toTensor());
        run_inline(plan, op, stack, begin, device, /*drain=*/true);
        bool same = matches_meta(plan, *meta, *stack, begin);
        for (size_t i = 0; i < resized.size() && same; ++i) {
          const TensorMeta& target = meta->resized[i].second;
          same = resized[i].sizes() == c10::IntArrayRef(target.sizes) &&
                 (resized[i].numel() <= 1 || resized[i].strides() == c10::IntArrayRef(target.strides));
        }
        std::unique_lock<std::shared_mutex> lock(plan.meta_mutex);
        plan.verified[meta->dtype_key] = same ? kQueue : kRunInline;
        return;
      }
    }
  }
  run_inline(plan, op, stack, begin, device, /*drain=*/true);
}

void check_scatter_in_place(const char* name, const at::Tensor& self, c10::ArrayRef<const at::Tensor*> others) {
  TORCH_CHECK(self.device().type() == kNeuron, name, ": self is on ", self.device(),
              " and another operand on neuron; move self to the neuron device (in place, it is written there)");
  for (const at::Tensor* other : others) {
    if (!other->defined()) continue;
    TORCH_CHECK(other->device() == self.device(), name, ": an operand is on ", other->device(), " and self on ",
                self.device(), "; move it to ", self.device(), " (index and values must be on self's device, as on CUDA)");
  }
  at::assert_no_internal_overlap(self);
  for (const at::Tensor* other : others) {
    if (other->defined()) at::assert_no_overlap(self, *other);
  }
}

namespace {
void zero_copy_fallback(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  run_tracked(tracked_op(op), [&] { run_zero_copy(op, stack); });
}

// The scatters in place (registered below): their checks at the call, then the generic path.
void scatter_in_place(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  const size_t count = op.schema().arguments().size();
  const size_t begin = stack->size() - count;
  const at::Tensor& self = (*stack)[begin].toTensor();
  c10::SmallVector<const at::Tensor*, 4> others;
  for (size_t i = begin + 1; i < stack->size(); ++i) {
    if ((*stack)[i].isTensor()) others.push_back(&(*stack)[i].toTensor());
  }
  check_scatter_in_place(op.schema().name().c_str(), self, others);
  zero_copy_fallback(op, keys, stack);
}
}  // namespace

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&zero_copy_fallback>());
}

// Ops with both a CPU kernel and a CompositeExplicitAutograd decomposition: without a
// kernel of ours the decomposition would run (other numerics than the CPU kernel, or
// a device check that refuses neuron). They take the generic path to the CPU kernel.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* name : {"addr", "addr.out", "native_layer_norm", "native_group_norm", "_stack",
                           "_stack.out", "any.dims", "any.dims_out", "all.dims", "all.dims_out",
                           "linalg__powsum", "mode", "mode.values"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&zero_copy_fallback>());
  }
  // Scatters into their destination in place: PyTorch's non-functional composite ran the
  // functional op (a copy of the whole destination) and copy_ back (another), two full copies
  // where the op writes a few rows. They take the CPU kernel in place (index_copy_ has a hot
  // kernel of its own, Hot.cpp).
  for (const char* name : {"scatter_.src", "scatter_.value", "scatter_.reduce", "scatter_.value_reduce",
                           "scatter_add_", "scatter_reduce_.two", "index_add_", "index_reduce_"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&scatter_in_place>());
  }
}

// Conjugate and negative views reach _copy_from as they are (it copies them
// correctly); materializing them first would call copy_ -> _copy_from again.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

}  // namespace torch_neuron
