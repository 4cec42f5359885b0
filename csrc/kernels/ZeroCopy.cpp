#include "ZeroCopy.h"

#include <ATen/core/List.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "../NeuronAllocator.h"
#include "../NeuronCommon.h"
#include "../NeuronGenerator.h"

namespace torch_neuron {

at::Tensor tensor_over(c10::Storage storage, c10::DispatchKey key, const at::Tensor& like) {
  auto tensor = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(key),
                                                          like.dtype());
  tensor.unsafeGetTensorImpl()->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
  if (like.is_conj()) tensor._set_conj(true);
  if (like.is_neg()) tensor._set_neg(true);
  return tensor;
}

at::Tensor host_view(const at::Tensor& tensor) {
  auto* storage = tensor.storage().unsafeGetStorageImpl();
  c10::Storage view_storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), storage->nbytes(),
      c10::DataPtr(storage->mutable_data(), c10::Device(c10::DeviceType::CPU)),
      redirecting_cpu_allocator(), /*resizable=*/true));
  return tensor_over(std::move(view_storage), c10::DispatchKey::CPU, tensor);
}

at::Tensor wrap_storage(c10::Storage storage, const at::Tensor& like) {
  return tensor_over(std::move(storage), c10::DispatchKey::PrivateUse1, like);
}

namespace {
c10::Storage adopt_storage(c10::StorageImpl* cpu_storage, c10::DeviceIndex device) {
  c10::DataPtr data = cpu_storage->set_data_ptr(
      c10::DataPtr(nullptr, c10::Device(c10::DeviceType::CPU)));
  data.unsafe_set_device(c10::Device(kNeuron, device));
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), cpu_storage->nbytes(), std::move(data),
      neuron_allocator(), /*resizable=*/true));
}

c10::Storage copy_storage_to_device(c10::StorageImpl* cpu_storage, c10::DeviceIndex device) {
  c10::DeviceGuard guard(c10::Device(kNeuron, device));
  c10::DataPtr data = neuron_allocator()->allocate(cpu_storage->nbytes());
  if (cpu_storage->nbytes() && !cpu_storage->data()) {  // a storage without memory (e.g. of a zero tensor)
    auto& stream = current_stream(device);
    NEURON_RT_CALL(stream.synchronize());
    std::memset(data.get(), 0, cpu_storage->nbytes());
  } else if (cpu_storage->nbytes()) {
    NEURON_RT_CALL(neuron_rt::copy_host_to_device(current_stream(device), data.get(),
                                                  cpu_storage->data(), cpu_storage->nbytes(), true));
  }
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), cpu_storage->nbytes(), std::move(data),
      neuron_allocator(), /*resizable=*/true));
}

}  // namespace

c10::Storage device_storage_for(c10::StorageImpl* cpu_storage, c10::DeviceIndex device) {
  if (is_redirected_allocation(cpu_storage->data_ptr()) || cpu_storage->nbytes() == 0) {
    return adopt_storage(cpu_storage, device);
  }
  return copy_storage_to_device(cpu_storage, device);
}

at::Tensor adopt_output(const at::Tensor& cpu, c10::DeviceIndex device) {
  if (!cpu.defined() || cpu.device().type() != c10::DeviceType::CPU) return cpu;
  return wrap_storage(device_storage_for(cpu.storage().unsafeGetStorageImpl(), device), cpu);
}

void DeviceCheck::add(const at::Tensor& tensor, const char* op_name, bool allow_cpu) {
  if (!tensor.defined()) return;
  const auto type = tensor.device().type();
  if (type == kNeuron) {
    const auto index = tensor.device().index();
    if (device < 0) {
      device = index;
    } else {
      TORCH_CHECK(device == index,
                  "Expected all tensors to be on the same device, but found at least two devices, "
                  "neuron:", int(device), " and neuron:", int(index), "! (when checking arguments for ", op_name,
                  "). Move them to one device with .to('neuron:N')");
    }
    return;
  }
  if (type == c10::DeviceType::CPU && (allow_cpu || tensor.dim() == 0)) return;
  TORCH_CHECK(false,
              "Expected all tensors to be on the same device, but found at least two devices, neuron:",
              int(device < 0 ? 0 : device), " and ", tensor.device(), "! (when checking arguments for ",
              op_name, "). Move the ", tensor.device().type() == c10::DeviceType::CPU ? "CPU" : "other",
              " tensor to the neuron device with .to('neuron')");
}

c10::DeviceIndex run_here_on(c10::DeviceIndex device) {
  auto& rt = runtime();
  if (device < 0) device = c10::DeviceIndex(rt.current_device());
  NEURON_RT_CALL(rt.check_device(device));
  if (!rt.launch_blocking()) NEURON_RT_CALL(current_stream(device).synchronize());
  return device;
}

// ---- the boxed zero-copy path ---------------------------------------------------------------

namespace {
std::atomic<bool> g_64bit_as_32bit{[] {
  const char* setting = std::getenv("NEURON_SIM_NATIVE_64BIT");
  return !(setting && std::string(setting) == "1");
}()};
}  // namespace

bool compute_64bit_as_32bit() { return g_64bit_as_32bit.load(std::memory_order_relaxed); }
void set_compute_64bit_as_32bit(bool value) { g_64bit_as_32bit.store(value); }

namespace {

// What the boxed path needs to know of an op, computed once per schema.
struct OpPlan {
  std::string name;
  std::vector<bool> is_generator;  // per argument: Generator? type
  std::vector<int> write_alias_of; // per return: argument it writes and returns, or -1
  std::vector<bool> is_index;      // per argument: an index/target tensor (kept 64-bit)
  std::vector<bool> is_written;    // per argument: written by the op (in-place, out=)
  bool allow_cpu_tensors = false;  // indices of index ops may live on the CPU
  bool narrow_64bit = true;        // Note [64-bit as 32-bit] applies
  int dtype_argument = -1;         // `dtype` / `out_int32` argument: outputs typed on request
};

bool is_index_argument(const std::string& name) {
  static const char* names[] = {"index", "indices", "target", "offsets", "indices_or_sections",
                                "boundaries", "sorted_sequence", "repeats", "lengths", "batch_sizes",
                                "sorter", "tensor_indices_or_sections", "split_sizes"};
  for (const char* candidate : names) {
    if (name == candidate) return true;
  }
  return false;
}

const OpPlan& plan_for(const c10::OperatorHandle& op) {
  static std::shared_mutex mutex;
  static auto* plans = new std::unordered_map<const c10::FunctionSchema*, std::unique_ptr<OpPlan>>();
  const c10::FunctionSchema* schema = &op.schema();
  {
    std::shared_lock<std::shared_mutex> lock(mutex);
    auto it = plans->find(schema);
    if (it != plans->end()) return *it->second;
  }
  auto plan = std::make_unique<OpPlan>();
  const auto& name = op.operator_name();
  plan->name = name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
  const auto& arguments = schema->arguments();
  for (const auto& argument : arguments) {
    auto type = argument.real_type();
    if (auto optional = type->cast<c10::OptionalType>()) type = optional->getElementType();
    plan->is_generator.push_back(type->kind() == c10::TypeKind::GeneratorType);
    plan->is_index.push_back(is_index_argument(argument.name()));
    plan->is_written.push_back(argument.alias_info() && argument.alias_info()->isWrite());
    if (argument.name() == "dtype" || argument.name() == "out_int32") {
      plan->dtype_argument = int(plan->is_written.size()) - 1;
    }
  }
  // Integer sequences and random integers are generated exactly (sizes and ranges
  // depend on the dtype), as the device's runtime does for them.
  for (const char* prefix : {"aten::arange", "aten::range", "aten::randperm", "aten::random_",
                             "aten::randint"}) {
    if (name.name.rfind(prefix, 0) == 0) plan->narrow_64bit = false;
  }
  for (const auto& ret : schema->returns()) {
    int index = -1;
    if (ret.alias_info() && ret.alias_info()->isWrite()) {
      for (size_t a = 0; a < arguments.size(); ++a) {
        const auto* info = arguments[a].alias_info();
        if (info && info->isWrite() && info->beforeSets() == ret.alias_info()->beforeSets()) {
          index = int(a);
          break;
        }
      }
    }
    plan->write_alias_of.push_back(index);
  }
  plan->allow_cpu_tensors = name.name.rfind("aten::index", 0) == 0 ||
                            name.name == "aten::_index_put_impl_";
  std::unique_lock<std::shared_mutex> lock(mutex);
  auto& slot = (*plans)[schema];
  if (!slot) slot = std::move(plan);
  return *slot;
}

c10::IValue list_map(const c10::IValue& value, const std::function<at::Tensor(const at::Tensor&)>& fn) {
  if (value.isTensorList()) {
    c10::List<at::Tensor> result;
    auto list = value.toTensorList();
    result.reserve(list.size());
    for (const at::Tensor& tensor : list) result.push_back(fn(tensor));
    return result;
  }
  auto list = value.toList();
  c10::impl::GenericList result(list.elementType());
  result.reserve(list.size());
  for (const c10::IValue& element : list) {
    result.push_back(element.isTensor() ? c10::IValue(fn(element.toTensor())) : element);
  }
  return result;
}

bool list_has_tensors(const c10::IValue& value) {
  if (value.isTensorList()) return true;
  if (!value.isList()) return false;
  auto type = value.toList().elementType();
  if (auto optional = type->cast<c10::OptionalType>()) type = optional->getElementType();
  return type->kind() == c10::TypeKind::TensorType;
}

}  // namespace

void run_zero_copy(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const OpPlan& plan = plan_for(op);
  const size_t num_arguments = op.schema().arguments().size();
  const size_t begin = stack->size() - num_arguments;

  DeviceCheck check;
  for (size_t i = 0; i < num_arguments; ++i) {
    const c10::IValue& value = (*stack)[begin + i];
    if (value.isTensor()) {
      check.add(value.toTensor(), plan.name.c_str(), plan.allow_cpu_tensors);
    } else if (list_has_tensors(value)) {
      for (const c10::IValue& element : value.toListRef()) {
        if (element.isTensor()) check.add(element.toTensor(), plan.name.c_str(), plan.allow_cpu_tensors);
      }
    } else if (value.isDevice() && value.toDevice().type() == kNeuron && check.device < 0) {
      check.device = value.toDevice().has_index() ? value.toDevice().index()
                                                  : c10::DeviceIndex(runtime().current_device());
    }
  }
  const c10::DeviceIndex device = run_here_on(check.device);

  HostCall call;
  call.device = device;
  std::vector<c10::IValue> originals(stack->begin() + begin, stack->end());
  for (size_t i = 0; i < num_arguments; ++i) {
    c10::IValue& value = (*stack)[begin + i];
    if (value.isTensor()) {
      value = call.to_host(value.toTensor());
    } else if (list_has_tensors(value)) {
      value = list_map(value, [&](const at::Tensor& t) { return call.to_host(t); });
    } else if (plan.is_generator[i]) {
      value = engine_for(value.isNone() ? std::nullopt : std::optional<at::Generator>(value.toGenerator()), device);
    } else if (value.isDevice() && value.toDevice().type() == kNeuron) {
      value = c10::Device(c10::DeviceType::CPU);
    }
  }
  // Note [64-bit as 32-bit]: narrow 64-bit value arguments. When the 32-bit attempt
  // raises (e.g. a kernel that insists on int64 outputs), the op runs again in 64
  // bits: nothing was written yet, as written arguments are narrowed copies.
  bool narrowed_float = false, narrowed_int = false;
  std::vector<c10::IValue> host_arguments;  // the arguments before narrowing, when narrowed
  // An integer scalar beyond the int32 range (e.g. iinfo(int64).min as a fill value, as
  // a Python number or a one-element tensor) would wrap; such an op runs in 64 bits.
  bool scalars_fit = true;
  for (size_t i = 0; i < num_arguments && scalars_fit; ++i) {
    const c10::IValue& value = (*stack)[begin + i];
    int64_t v = 0;
    if (value.isInt()) {
      v = value.toInt();
    } else if (value.isScalar() && value.toScalar().isIntegral(false)) {
      v = value.toScalar().toLong();
    } else if (value.isTensor() && value.toTensor().defined() && value.toTensor().numel() == 1 &&
               value.toTensor().scalar_type() == at::kLong) {
      v = *static_cast<const int64_t*>(value.toTensor().const_data_ptr());
    }
    scalars_fit = v >= INT32_MIN && v <= INT32_MAX;
  }
  if (compute_64bit_as_32bit() && plan.narrow_64bit && scalars_fit) {
    auto narrow = [&](const at::Tensor& t) -> at::Tensor {
      if (!t.defined() || !is_64bit(t.scalar_type()) || t.unsafeGetTensorImpl()->is_wrapped_number()) {
        return t;
      }
      (t.scalar_type() == at::kDouble ? narrowed_float : narrowed_int) = true;
      AllocationRedirect redirect(device);
      return t.to(narrow_64bit(t.scalar_type()));
    };
    for (size_t i = 0; i < num_arguments; ++i) {
      if (plan.is_index[i]) continue;
      c10::IValue& value = (*stack)[begin + i];
      if (value.isTensor()) {
        at::Tensor narrowed = narrow(value.toTensor());
        if (narrowed.is_same(value.toTensor())) continue;
        if (host_arguments.empty()) host_arguments.assign(stack->begin() + begin, stack->end());
        value = std::move(narrowed);
      } else if (list_has_tensors(value)) {
        c10::IValue narrowed = list_map(value, narrow);
        if (host_arguments.empty()) host_arguments.assign(stack->begin() + begin, stack->end());
        value = std::move(narrowed);
      }
    }
  }
  // What each written (in-place / out=) argument was given: its host view, or its
  // narrowed copy; results are taken from here, also for ops that return nothing.
  std::vector<std::pair<int, at::Tensor>> written;
  for (size_t i = 0; i < num_arguments; ++i) {
    if (plan.is_written[i] && (*stack)[begin + i].isTensor()) written.emplace_back(int(i), (*stack)[begin + i].toTensor());
  }
  {
    c10::DeviceGuard guard(c10::Device(kNeuron, device));
    AllocationRedirect redirect(device);
    if (host_arguments.empty()) {
      op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
    } else {
      try {
        op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
      } catch (const c10::OutOfMemoryError&) {
        throw;
      } catch (const c10::Error&) {
        stack->resize(begin);
        stack->insert(stack->end(), host_arguments.begin(), host_arguments.end());
        host_arguments.clear();
        narrowed_float = narrowed_int = false;
        for (auto& entry : written) entry.second = (*stack)[begin + entry.first].toTensor();
        op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
      }
    }
  }
  // Written arguments: copy narrowed results back into the 64-bit host view, then
  // give the device tensor the metadata the kernel set (a resize of an out=).
  for (auto& [index, given] : written) {
    at::Tensor target = given;
    if (!host_arguments.empty()) {
      const c10::IValue& wide = host_arguments[index];
      if (wide.isTensor() && !wide.toTensor().is_same(given)) {
        target = wide.toTensor();
        AllocationRedirect redirect(device);
        if (target.sizes() != given.sizes()) target.resize_(given.sizes());
        target.copy_(given);
      }
    }
    call.sync_argument(originals[index].toTensor(), target);
  }
  const bool typed_on_request =
      plan.dtype_argument >= 0 && !originals[plan.dtype_argument].isNone() &&
      !(originals[plan.dtype_argument].isBool() && !originals[plan.dtype_argument].toBool());
  auto widen = [&](const at::Tensor& t) -> at::Tensor {
    if (!t.defined() || typed_on_request) return t;
    if ((narrowed_float && t.scalar_type() == at::kFloat) || (narrowed_int && t.scalar_type() == at::kInt)) {
      AllocationRedirect redirect(device);
      return t.to(t.scalar_type() == at::kFloat ? at::kDouble : at::kLong);
    }
    return t;
  };
  const size_t num_returns = op.schema().returns().size();
  const size_t out_begin = stack->size() - num_returns;
  for (size_t r = 0; r < num_returns; ++r) {
    c10::IValue& value = (*stack)[out_begin + r];
    const int argument = plan.write_alias_of[r];
    if (argument >= 0 && value.isTensor()) {
      value = originals[argument];
    } else if (value.isTensor()) {
      value = call.to_device(widen(value.toTensor()));
    } else if (list_has_tensors(value)) {
      value = list_map(value, [&](const at::Tensor& t) { return call.to_device(widen(t)); });
    }
  }
}

namespace {
void zero_copy_fallback(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  run_tracked(tracked_op(op), [&] { run_zero_copy(op, stack); });
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
