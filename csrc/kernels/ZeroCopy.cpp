#include "ZeroCopy.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/NestedTensorImpl.h>
#include <ATen/core/List.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/DeviceGuard.h>
#include <ATen/Config.h>
#include <ATen/Parallel.h>
#include <torch/library.h>
#if AT_PARALLEL_OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "../HostWait.h"
#include "../NeuronCommon.h"
#include "../NeuronGenerator.h"
#include "SmallMatmul.h"

namespace torch_neuron {

// ---- tensors over storages ------------------------------------------------------------------

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
      c10::DataPtr(storage->mutable_data(), c10::Device(c10::DeviceType::CPU)), redirecting_cpu_allocator(),
      /*resizable=*/true));
  return tensor_over(std::move(view_storage), c10::DispatchKey::CPU, tensor);
}

at::Tensor wrap_storage(c10::Storage storage, const at::Tensor& like) {
  return tensor_over(std::move(storage), c10::DispatchKey::PrivateUse1, like);
}

namespace {
c10::Storage neuron_storage(neuron_rt::BufferRef buffer, size_t nbytes) {
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), nbytes,
                                                            device_data_ptr(std::move(buffer)), neuron_allocator(),
                                                            /*resizable=*/true));
}

neuron_rt::BufferRef allocate_buffer(c10::DeviceIndex device, size_t bytes) {
  return neuron_rt::BufferRef::adopt(NEURON_RT_CALL(runtime().memory(device).allocate(bytes)));
}
}  // namespace

c10::Storage device_storage_for(const c10::Storage& cpu_storage, c10::DeviceIndex device) {
  auto* impl = cpu_storage.unsafeGetStorageImpl();
  const size_t nbytes = impl->nbytes();
  c10::DataPtr data = impl->set_data_ptr(c10::DataPtr(nullptr, c10::Device(c10::DeviceType::CPU)));
  if (neuron_rt::BufferRef buffer = take_redirected(data)) return neuron_storage(std::move(buffer), nbytes);
  impl->set_data_ptr_noswap(std::move(data));  // not device memory: copied below
  neuron_rt::BufferRef buffer = allocate_buffer(device, nbytes);
  if (nbytes && !impl->data()) {  // a storage without memory (e.g. of a zero tensor)
    auto& stream = current_stream(device);
    NEURON_RT_CALL(stream.enqueue([buffer, nbytes] {
      neuron_rt::GuardScope scope;
      scope.add(buffer.get());
      std::memset(buffer->data(), 0, nbytes);
    }));
  } else if (nbytes) {
    NEURON_RT_CALL(neuron_rt::copy_host_to_device(current_stream(device), buffer, 0, impl->data(),
                                                  neuron_rt::BufferRef(), nbytes, /*blocking=*/true));
  }
  return neuron_storage(std::move(buffer), nbytes);
}

at::Tensor adopt_output(const at::Tensor& cpu, c10::DeviceIndex device) {
  if (!cpu.defined() || cpu.device().type() != c10::DeviceType::CPU) return cpu;
  check_device_can_hold(cpu);
  return wrap_storage(device_storage_for(cpu.storage(), device), cpu);
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

bool asynchronous() { return !runtime().launch_blocking(); }

int64_t inline_bytes_limit() {
  static const int64_t limit = [] {
    const char* value = std::getenv("NEURON_SIM_INLINE_BYTES");
    return value && *value ? std::max<int64_t>(0, std::atoll(value)) : int64_t(64) << 10;
  }();
  return limit;
}

bool runs_at_call_when_idle(int64_t bytes, c10::DeviceIndex device) {
  const int64_t limit = inline_bytes_limit();
  if (limit == 0 || bytes > limit) return false;  // 0: every op that can be queued is (also empty ones)
  const neuron_rt::Stream& stream = current_stream(device);
  return stream.query() && !stream.failure();
}

c10::DeviceIndex run_here_on(c10::DeviceIndex device) {
  auto& rt = runtime();
  if (device < 0) device = c10::DeviceIndex(rt.current_device());
  NEURON_RT_CALL(rt.check_device(device));
  if (!rt.launch_blocking()) synchronize_stream(current_stream(device));
  return device;
}

// ---- HostCall --------------------------------------------------------------------------------

at::Tensor HostCall::to_host(const at::Tensor& tensor) {
  if (!tensor.defined() || tensor.device().type() != kNeuron) return tensor;
  if (tensor.is_nested()) {  // Note [Nested tensors]: a CPU nested tensor over a host view of its buffer
    const auto* nested = at::native::get_nested_tensor_impl(tensor);
    return at::detail::make_tensor<at::native::NestedTensorImpl>(
        to_host(nested->get_unsafe_storage_as_tensor()), nested->get_nested_sizes(), nested->get_nested_strides(),
        nested->get_storage_offsets());
  }
  for (auto& entry : views) {
    if (entry.second.unsafeGetStorageImpl() == tensor.storage().unsafeGetStorageImpl()) {
      return tensor_over(entry.first, c10::DispatchKey::CPU, tensor);  // one view storage per device storage
    }
  }
  at::Tensor view = host_view(tensor);
  views.emplace_back(view.storage(), tensor.storage());
  guard.add(buffer_ref_of(tensor.storage()).get());
  return view;
}

namespace {
// A CPU kernel that resized an out= argument gave its view storage new memory (from the
// redirect, so in device memory): move it into the device storage.
void sync_resized(std::pair<c10::Storage, c10::Storage>& entry, c10::DeviceIndex device) {
  auto* view_storage = entry.first.unsafeGetStorageImpl();
  auto* device_storage = entry.second.unsafeGetStorageImpl();
  if (view_storage->data() == device_storage->data() && view_storage->nbytes() == device_storage->nbytes()) {
    return;
  }
  c10::DataPtr data = view_storage->set_data_ptr(
      c10::DataPtr(view_storage->mutable_data(), c10::Device(c10::DeviceType::CPU)));  // the view keeps a borrowed pointer
  neuron_rt::BufferRef buffer = take_redirected(data);
  if (!buffer) {  // not device memory (cannot happen under a redirect): copy it in
    buffer = allocate_buffer(device, view_storage->nbytes());
    neuron_rt::GuardScope scope;
    scope.add(buffer.get());
    std::memcpy(buffer->data(), view_storage->data(), view_storage->nbytes());
  }
  device_storage->set_data_ptr_noswap(device_data_ptr(std::move(buffer)));
  device_storage->set_nbytes(view_storage->nbytes());
}
}  // namespace

namespace {
// Makes `t`, a CPU tensor, hold host memory: a kernel's CPU allocations under the redirect
// come from device memory, which metadata the host keeps reading must not (Note [Memory
// guard] closes it outside kernels). Tensors in host memory are returned as they are.
const at::Tensor& in_host_memory(const at::Tensor& t) {
  auto* impl = t.storage().unsafeGetStorageImpl();
  c10::DataPtr data = impl->set_data_ptr(c10::DataPtr(nullptr, c10::Device(c10::DeviceType::CPU)));
  neuron_rt::BufferRef buffer = take_redirected(data);
  if (!buffer) {
    impl->set_data_ptr_noswap(std::move(data));
    return t;
  }
  const size_t nbytes = impl->nbytes();
  c10::DataPtr host = redirecting_cpu_allocator()->allocate(nbytes);  // no redirect here: host memory
  neuron_rt::GuardScope scope;
  scope.add(buffer.get());
  if (nbytes) std::memcpy(host.get(), buffer->data(), nbytes);
  impl->set_data_ptr_noswap(std::move(host));
  return t;
}
}  // namespace

at::Tensor HostCall::to_device(const at::Tensor& cpu) {
  if (!cpu.defined() || cpu.device().type() != c10::DeviceType::CPU) return cpu;
  if (cpu.is_nested()) {  // Note [Nested tensors]: its buffer comes back, its metadata stays on the host
    const auto* nested = at::native::get_nested_tensor_impl(cpu);
    return at::detail::make_tensor<at::native::NestedTensorImpl>(
        to_device(nested->get_unsafe_storage_as_tensor()), in_host_memory(nested->get_nested_sizes()),
        in_host_memory(nested->get_nested_strides()), in_host_memory(nested->get_storage_offsets()));
  }
  check_device_can_hold(cpu);
  auto* storage = cpu.storage().unsafeGetStorageImpl();
  for (auto& entry : views) {
    if (entry.first.unsafeGetStorageImpl() == storage) {
      sync_resized(entry, device);
      return wrap_storage(entry.second, cpu);
    }
  }
  for (auto& entry : adopted) {
    if (entry.first.unsafeGetStorageImpl() == storage) return wrap_storage(entry.second, cpu);
  }
  adopted.emplace_back(cpu.storage(), device_storage_for(cpu.storage(), device));
  return wrap_storage(adopted.back().second, cpu);
}

void HostCall::sync_argument(const at::Tensor& original, const at::Tensor& view) {
  if (!original.defined() || original.device().type() != kNeuron || original.is_nested()) return;
  for (auto& entry : views) {
    if (entry.second.unsafeGetStorageImpl() == original.storage().unsafeGetStorageImpl()) {
      sync_resized(entry, device);
      break;
    }
  }
  auto* impl = original.unsafeGetTensorImpl();
  if (impl->sizes() != view.sizes() || impl->strides() != view.strides() ||
      impl->storage_offset() != view.storage_offset()) {
    impl->set_sizes_and_strides(view.sizes(), view.strides(), view.storage_offset());
  }
}

// ---- what the boxed path knows of an op ------------------------------------------------------

namespace {

struct TensorMeta {
  bool defined = false;
  std::vector<int64_t> sizes, strides;
  at::ScalarType dtype = at::kFloat;
};

// The outcome of running an op on meta tensors, for one argument signature.
struct MetaEntry {
  bool queueable = false;                      // false: run inline
  std::vector<std::vector<TensorMeta>> outputs;  // per non-aliased return (a list for Tensor[])
  std::vector<bool> output_is_list;
  std::vector<int64_t> dtype_key;              // the signature without sizes and strides
  std::vector<std::pair<size_t, TensorMeta>> resized;  // out= arguments the kernel resizes, and to what
};

struct SignatureHash {
  size_t operator()(const std::vector<int64_t>& key) const {
    size_t h = key.size();
    for (int64_t v : key) h ^= std::hash<int64_t>()(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h;
  }
};

enum Verdict : int { kRunInline = 0, kQueue = 1 };

struct OpPlan {
  std::string name;
  bool aten = true;                // in the aten namespace: under the redirect, may be queued
  bool view = false;               // returns an alias it does not write
  bool tensor_returns = true;      // every return is a Tensor or a Tensor[]
  bool on_device = true;           // TorchNeuron runs it on the device (else: on the CPU, in 64 bits)
  std::vector<bool> allows_cpu;    // per argument: CPU tensors accepted (indices of index ops, CTC lengths)
  std::vector<bool> is_generator;  // per argument: Generator? type
  std::vector<bool> is_written;    // per argument: written by the op (in-place, out=)
  // per argument: its value can change output dtypes or which outputs exist (a dtype, a
  // layout, a bool, a string), so it is part of the dtype signature; numbers are not
  std::vector<bool> value_in_dtype_key;
  bool random = false;             // takes a generator
  std::vector<int> write_alias_of; // per return: argument it writes and returns, or -1
  const Narrowing* narrowing = nullptr;
  Width64Calls* width64 = nullptr;  // how its calls with 64-bit values were computed
  mutable std::shared_mutex meta_mutex;
  mutable std::unordered_map<std::vector<int64_t>, std::shared_ptr<const MetaEntry>, SignatureHash> meta;
  // Per dtype signature: whether a call may be queued, decided on the first call (run
  // inline): meta and CPU kernels are separate code for some ops, so a call is queued only
  // once the meta outputs were seen to match the CPU's. (Queued functional ops run their
  // functional kernel and copy into the preallocated outputs: some out= kernels differ
  // from their functional forms, e.g. binary_cross_entropy.out's mean.)
  mutable std::unordered_map<std::vector<int64_t>, int, SignatureHash> verified;
};

bool is_tensor_type(const c10::TypePtr& type) {
  c10::TypePtr element = type;
  if (auto optional = element->cast<c10::OptionalType>()) element = optional->getElementType();
  if (element->kind() == c10::TypeKind::TensorType) return true;
  if (auto list = element->cast<c10::ListType>()) {
    c10::TypePtr inner = list->getElementType();
    if (auto optional = inner->cast<c10::OptionalType>()) inner = optional->getElementType();
    return inner->kind() == c10::TypeKind::TensorType;
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
  plan->aten = name.name.rfind("aten::", 0) == 0;
  plan->on_device = tracked_op(op).on_device();
  plan->narrowing = &narrowing_for(*schema);
  plan->width64 = &width64_calls(plan->name);
  const auto& arguments = schema->arguments();
  for (const auto& argument : arguments) {
    auto type = argument.real_type();
    if (auto optional = type->cast<c10::OptionalType>()) type = optional->getElementType();
    plan->is_generator.push_back(type->kind() == c10::TypeKind::GeneratorType);
    plan->random = plan->random || plan->is_generator.back();
    plan->is_written.push_back(argument.alias_info() && argument.alias_info()->isWrite());
    c10::TypePtr element = type;
    if (auto list = element->cast<c10::ListType>()) element = list->getElementType();
    const auto kind = element->kind();
    const std::string text = element->str();
    plan->value_in_dtype_key.push_back(kind == c10::TypeKind::BoolType || kind == c10::TypeKind::StringType ||
                                       kind == c10::TypeKind::DeviceObjType || text == "ScalarType" ||
                                       text == "Layout" || text == "MemoryFormat");
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
    } else if (ret.alias_info()) {
      plan->view = true;
    }
    plan->write_alias_of.push_back(index);
    plan->tensor_returns = plan->tensor_returns && is_tensor_type(ret.type());
  }
  // CPU tensors accepted as on CUDA: every argument of the index ops (their indices); the
  // lengths of the CTC loss and its backward, and only those (their Tensor overloads read the
  // lengths on the host, F.ctc_loss is commonly given CPU lengths; CUDA's kernel then checks
  // that log_probs and targets are on one device).
  const bool index_op = name.name.rfind("aten::index", 0) == 0 || name.name == "aten::_index_put_impl_";
  const bool ctc_loss = (name.name == "aten::_ctc_loss" || name.name == "aten::_ctc_loss_backward") &&
                        name.overload_name.rfind("Tensor", 0) == 0;
  for (const auto& argument : arguments) {
    const bool length = argument.name() == "input_lengths" || argument.name() == "target_lengths";
    plan->allows_cpu.push_back(index_op || (ctc_loss && length));
  }
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

template <typename Fn>
void for_each_tensor(const c10::IValue& value, Fn fn) {
  if (value.isTensor()) {
    fn(value.toTensor());
  } else if (list_has_tensors(value)) {
    for (const c10::IValue& element : value.toListRef()) {
      if (element.isTensor()) fn(element.toTensor());
    }
  }
}

// ---- running the CPU kernel on host views ----------------------------------------------------

// True when the tensors `for_each(fn)` visits mix a 64-bit tensor with a 32-bit one of the
// same kind (float64 and float32 or complex64, int64 and int32; wrapped Python numbers aside):
// narrowing would make their dtypes equal, hiding the kernel's dtype checks (mm's "expected m1
// and m2 to have the same dtype") and its type promotion (a float32 tensor and a 0-dim float64
// one make float32, which the widening would turn into float64; a complex64 tensor and a 0-dim
// float64 one make complex64). Such a call runs in 64 bits (Note [64-bit as 32-bit]).
template <typename ForEachTensor>
bool mixes_widths(ForEachTensor for_each) {
  bool wide_float = false, wide_int = false, narrow_float = false, narrow_int = false;
  for_each([&](const at::Tensor& t) {
    if (!t.defined() || t.unsafeGetTensorImpl()->is_wrapped_number()) return;
    const auto type = t.scalar_type();
    wide_float |= type == at::kDouble;
    wide_int |= type == at::kLong;
    narrow_float |= type == at::kFloat || type == at::kComplexFloat;
    narrow_int |= type == at::kInt;
  });
  return (wide_float && narrow_float) || (wide_int && narrow_int);
}

// Which sharing of memory between a written argument and another tensor argument counts.
enum class Sharing {
  kOtherView,  // any other view of its storage (the very same view is fine: in place on one tensor)
  kPartial,    // elements that may overlap without being the same view (partial or too hard to tell)
};
// True when a written argument shares memory with another tensor argument, as `sharing` says.
bool writes_aliased_memory(const OpPlan& plan, const c10::IValue* arguments, size_t count, Sharing sharing) {
  for (size_t w = 0; w < count; ++w) {
    if (!plan.is_written[w] || !arguments[w].isTensor() || !arguments[w].toTensor().defined()) continue;
    const at::Tensor& written = arguments[w].toTensor();
    if (!written.has_storage()) continue;
    const auto* storage = written.storage().unsafeGetStorageImpl();
    bool aliased = false;
    for (size_t i = 0; i < count && !aliased; ++i) {
      if (i == w) continue;
      for_each_tensor(arguments[i], [&](const at::Tensor& t) {
        if (!t.defined() || !t.has_storage() || t.storage().unsafeGetStorageImpl() != storage) return;
        if (sharing == Sharing::kPartial) {
          const auto status = at::get_overlap_status(written, t);
          aliased = aliased || status == at::MemOverlapStatus::Partial || status == at::MemOverlapStatus::TooHard;
          return;
        }
        const bool same_view = t.storage_offset() == written.storage_offset() && t.sizes() == written.sizes() &&
                               t.strides() == written.strides();
        aliased = aliased || !same_view;
      });
    }
    if (aliased) return true;
  }
  return false;
}

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
      for (const auto& [view, copy] : copies) {
        if (at::get_overlap_status(view, t) == at::MemOverlapStatus::Full && view.scalar_type() == t.scalar_type()) {
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
  stack->resize(begin);
  stack->insert(stack->end(), results.begin(), results.end());
}

// ---- queued: Note [Asynchronous kernels] ----------------------------------------------------

// The signature of a call's arguments for the meta cache; false when an argument has no
// signature (the call then runs inline).
bool signature_of(const OpPlan& plan, const c10::IValue* arguments, size_t count, std::vector<int64_t>& key,
                  std::vector<int64_t>& dtype_key) {
  bool mirror_values = false;  // whether the current argument's values go into dtype_key
  auto tensor = [&](const at::Tensor& t) {
    const size_t start = key.size();
    key.push_back(t.defined() ? 1 : 0);
    if (t.defined()) {
      key.push_back(int64_t(t.device().type()));
      key.push_back(int64_t(t.scalar_type()));
      key.push_back(t.unsafeGetTensorImpl()->is_wrapped_number());
      key.push_back(t.is_conj() | (t.is_neg() << 1));
      // the memory format, on which some kernels' output strides depend
      key.push_back(t.is_contiguous() | (t.is_contiguous(at::MemoryFormat::ChannelsLast) << 1) |
                    (t.is_contiguous(at::MemoryFormat::ChannelsLast3d) << 2));
    }
    dtype_key.insert(dtype_key.end(), key.begin() + start, key.end());
    if (!t.defined()) return;
    key.push_back(t.dim());
    for (int64_t s : t.sizes()) key.push_back(s);
    for (int64_t s : t.strides()) key.push_back(s);
  };
  auto bits = [](double d) {
    int64_t b;
    std::memcpy(&b, &d, sizeof(b));
    return b;
  };
  std::function<bool(const c10::IValue&)> value = [&](const c10::IValue& v) -> bool {
    if (v.isTensor()) {
      key.push_back(1);
      dtype_key.push_back(1);
      tensor(v.toTensor());
      return true;
    }
    const size_t start = key.size();
    struct Mirror {  // what a non-tensor value adds goes into dtype_key too, or only its kind
      std::vector<int64_t>& key;
      std::vector<int64_t>& dtype_key;
      size_t start;
      bool values;
      ~Mirror() {
        if (values) {
          dtype_key.insert(dtype_key.end(), key.begin() + start, key.end());
        } else if (key.size() > start) {
          dtype_key.push_back(key[start]);
        }
      }
    };
    if (v.isList()) {  // elements mirror themselves
      auto list = v.toListRef();
      key.push_back(11);
      key.push_back(int64_t(list.size()));
      dtype_key.push_back(11);
      dtype_key.push_back(int64_t(list.size()));
      for (const c10::IValue& element : list) {
        if (!value(element)) return false;
      }
      return true;
    }
    Mirror mirror{key, dtype_key, start, mirror_values};
    if (v.isNone()) {
      key.push_back(2);
    } else if (v.isInt()) {
      key.push_back(3);
      key.push_back(v.toInt());
    } else if (v.isDouble()) {
      key.push_back(4);
      key.push_back(bits(v.toDouble()));
    } else if (v.isBool()) {
      key.push_back(v.toBool() ? 6 : 5);
    } else if (v.isScalar()) {
      const at::Scalar s = v.toScalar();
      if (s.isComplex()) return false;
      key.push_back(7);
      key.push_back(int64_t(s.type()));
      key.push_back(s.isFloatingPoint() ? bits(s.toDouble()) : s.toLong());
    } else if (v.isString()) {
      key.push_back(8);
      key.push_back(int64_t(std::hash<std::string>()(v.toStringRef())));
    } else if (v.isDevice()) {
      key.push_back(9);
      key.push_back(int64_t(v.toDevice().type()));
    } else if (v.isGenerator()) {
      key.push_back(10);
    } else {
      return false;
    }
    return true;
  };
  for (size_t i = 0; i < count; ++i) {
    mirror_values = plan.value_in_dtype_key[i];
    if (!value(arguments[i])) return false;
  }
  return true;
}

TensorMeta meta_of(const at::Tensor& t) {
  TensorMeta meta;
  if (!t.defined()) return meta;
  meta.defined = true;
  meta.sizes = t.sizes().vec();
  meta.strides = t.strides().vec();
  meta.dtype = t.scalar_type();
  return meta;
}

MetaEntry compute_meta(const OpPlan& plan, const c10::OperatorHandle& op, const c10::IValue* arguments,
                       size_t count) {
  MetaEntry entry;
  auto to_meta = [](const at::Tensor& t) -> at::Tensor {
    if (!t.defined()) return t;
    if (t.device().type() == c10::DeviceType::CPU && t.dim() == 0) return t;  // CPU scalars stay
    return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::DeviceType::Meta));
  };
  torch::jit::Stack stack;
  for (size_t i = 0; i < count; ++i) {
    const c10::IValue& value = arguments[i];
    if (value.isTensor()) {
      stack.emplace_back(to_meta(value.toTensor()));
    } else if (list_has_tensors(value)) {
      stack.emplace_back(list_map(value, to_meta));
    } else if (plan.is_generator[i]) {
      stack.emplace_back();
    } else if (value.isDevice() && value.toDevice().type() == kNeuron) {
      stack.emplace_back(c10::Device(c10::DeviceType::Meta));
    } else {
      stack.push_back(value);
    }
  }
  const torch::jit::Stack written_before = stack;
  try {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &stack);
  } catch (const std::exception&) {
    return entry;  // no meta kernel, data-dependent outputs, or an error the CPU kernel will give
  }
  for (size_t i = 0; i < count; ++i) {  // out= arguments the kernel resizes: resized when queued
    if (!plan.is_written[i] || !written_before[i].isTensor()) continue;
    const at::Tensor& t = written_before[i].toTensor();
    const at::Tensor& original = arguments[i].toTensor();
    if (!t.defined() || !original.defined()) continue;
    if (t.sizes() != original.sizes() || t.strides() != original.strides()) entry.resized.emplace_back(i, meta_of(t));
  }
  for (size_t r = 0; r < stack.size(); ++r) {
    if (plan.write_alias_of[r] >= 0) continue;
    bool holdable = true;  // a result the device cannot hold is refused inline (check_device_can_hold)
    for_each_tensor(stack[r], [&](const at::Tensor& t) {
      holdable = holdable && (!t.defined() || (!t.is_quantized() && !c10::isQIntType(t.scalar_type()) &&
                                               t.layout() == at::kStrided));
    });
    if (!holdable) return entry;
    if (stack[r].isTensor()) {
      entry.outputs.push_back({meta_of(stack[r].toTensor())});
      entry.output_is_list.push_back(false);
    } else if (stack[r].isTensorList()) {
      std::vector<TensorMeta> list;
      for (const at::Tensor& t : stack[r].toTensorList()) list.push_back(meta_of(t));
      entry.outputs.push_back(std::move(list));
      entry.output_is_list.push_back(true);
    } else {
      return entry;
    }
  }
  entry.queueable = true;
  return entry;
}

std::shared_ptr<const MetaEntry> meta_for(const OpPlan& plan, const c10::OperatorHandle& op,
                                          const c10::IValue* arguments, size_t count) {
  thread_local std::vector<int64_t> key, dtype_key;
  key.clear();
  dtype_key.clear();
  if (!signature_of(plan, arguments, count, key, dtype_key)) return nullptr;
  {
    std::shared_lock<std::shared_mutex> lock(plan.meta_mutex);
    auto it = plan.meta.find(key);
    if (it != plan.meta.end()) return it->second;
  }
  auto entry = std::make_shared<MetaEntry>(compute_meta(plan, op, arguments, count));
  entry->dtype_key = dtype_key;
  std::unique_lock<std::shared_mutex> lock(plan.meta_mutex);
  if (plan.meta.size() >= 512) plan.meta.clear();  // shapes that keep changing: start over
  return plan.meta.emplace(key, std::move(entry)).first->second;
}

// True when the results of an inline run (on the stack from `begin`) are what `meta` said.
bool matches_meta(const OpPlan& plan, const MetaEntry& meta, const torch::jit::Stack& stack, size_t begin) {
  size_t m = 0;
  for (size_t r = 0; r < plan.write_alias_of.size(); ++r) {
    if (plan.write_alias_of[r] >= 0) continue;
    const c10::IValue& value = stack[begin + r];
    std::vector<at::Tensor> results;
    if (value.isTensor()) {
      results.push_back(value.toTensor());
    } else if (value.isTensorList()) {
      for (const at::Tensor& t : value.toTensorList()) results.push_back(t);
    } else {
      return false;
    }
    const auto& expected = meta.outputs.at(m++);
    if (expected.size() != results.size()) return false;
    for (size_t i = 0; i < results.size(); ++i) {
      const TensorMeta& e = expected[i];
      const at::Tensor& t = results[i];
      if (e.defined != t.defined()) return false;
      if (!t.defined()) continue;
      if (e.dtype != t.scalar_type() || t.sizes() != c10::IntArrayRef(e.sizes)) return false;
      if (t.numel() > 1 && t.strides() != c10::IntArrayRef(e.strides)) return false;
    }
  }
  return true;
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
  enqueue_views(call, [&plan, op, args = std::move(args), output_views = std::move(output_views), device]() mutable {
    launch_on_host(plan, op, std::move(args), output_views, device);
  });
  stack->resize(begin);
  stack->insert(stack->end(), results.begin(), results.end());
}

// A random op reaches this kernel for a neuron generator even when its tensors are on the
// CPU (the dispatcher picks the generator's backend): say that the generator is what is
// wrong, as CPU's kernels do for a CUDA generator.
void check_generator_device(const OpPlan& plan, const torch::jit::Stack& stack, size_t begin) {
  bool neuron_tensor = false, neuron_generator = false;
  for (size_t i = begin; i < stack.size(); ++i) {
    for_each_tensor(stack[i], [&](const at::Tensor& t) { neuron_tensor |= t.defined() && t.device().type() == kNeuron; });
    if (stack[i].isDevice()) neuron_tensor |= stack[i].toDevice().type() == kNeuron;
    if (plan.is_generator[i - begin] && stack[i].isGenerator()) {
      neuron_generator |= stack[i].toGenerator().device().type() == kNeuron;
    }
  }
  TORCH_CHECK(neuron_tensor || !neuron_generator, "Expected a 'cpu' device type for generator but found 'neuron' (",
              plan.name, "'s tensors are on the CPU; pass a CPU generator, or move the tensors to the neuron device)");
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

// ---- queued work on host views ---------------------------------------------------------------

int kernel_threads_setting() { return at::get_num_threads(); }

void use_kernel_threads(const neuron_rt::Stream& stream, int threads) {  // Note [Kernel threads]
  // Launch-blocking mode runs the task on the calling thread: its own setting stays.
  if (!stream.is_current_worker()) return;
#if AT_PARALLEL_OPENMP
  omp_set_num_threads(stream.host_waiting() ? threads : std::max(1, threads - 1));  // this thread's own setting
#endif
}

void enqueue_views(HostCall& call, std::function<void()> work) {
  std::vector<neuron_rt::BufferRef> buffers;
  for (auto& entry : call.views) buffers.push_back(buffer_ref_of(entry.second));
  // No redirect in a queued kernel: its outputs are preallocated (their memory lent to it),
  // and its scratch is host memory, so a queued kernel never needs device memory the
  // enqueuing thread may have taken meanwhile (it could not wait for it: Note [Buffers]).
  neuron_rt::Stream& stream = current_stream(call.device);
  const int threads = kernel_threads_setting();
  NEURON_RT_CALL(stream.enqueue([work = std::move(work), buffers = std::move(buffers), &stream, threads]() mutable {
    use_kernel_threads(stream, threads);
    neuron_rt::GuardScope guard;
    for (auto& buffer : buffers) guard.add(buffer.get());
    try {
      work();
    } catch (const c10::Error& error) {
      throw std::runtime_error(error.what_without_backtrace());  // the stream keeps the message
    }
    work = nullptr;  // the views it holds go before the buffers they borrow from
  }));
}

// ---- accelerator kernels written as bodies ---------------------------------------------------

namespace {
// Note [64-bit as 32-bit] for a kernel body: 32-bit copies of its 64-bit inputs in, its 32-bit
// results widened back (the body is also run on meta tensors, where this works alike). Inputs
// mixing widths run as they are, in 64 bits: the body's own rules then give each result its
// dtype (batch_norm_elemt's output stays float32 with float64 weights, as on CUDA); so does a
// call whose 32-bit form the kernel refuses (the CPU's int64 convolution has no int32 form).
// Calls on real data are counted in `calls`.
TensorBody narrowed_body(const TensorBody& body, Width64Calls* calls) {
  return [body, calls](const std::vector<at::Tensor>& inputs) {
    const bool real = std::none_of(inputs.begin(), inputs.end(), [](const at::Tensor& t) { return t.is_meta(); });
    if (mixes_widths([&](const auto& fn) { std::for_each(inputs.begin(), inputs.end(), fn); })) {
      if (real) calls->count(Width64::kMixedWidths);
      return body(inputs);
    }
    bool narrowed_float = false, narrowed_int = false;
    std::vector<at::Tensor> narrow;
    for (const at::Tensor& t : inputs) {
      if (t.defined() && is_64bit(t.scalar_type()) && !t.unsafeGetTensorImpl()->is_wrapped_number()) {
        (t.scalar_type() == at::kDouble ? narrowed_float : narrowed_int) = true;
        narrow.push_back(t.to(narrow_64bit(t.scalar_type())));
      } else {
        narrow.push_back(t);
      }
    }
    std::vector<at::Tensor> results;
    try {
      results = body(narrow);
    } catch (const c10::OutOfMemoryError&) {
      throw;
    } catch (const c10::Error&) {
      if (real) calls->count(Width64::kRefused);
      return body(inputs);
    }
    if (real) calls->count(Width64::k32Bit);
    for (at::Tensor& r : results) {
      if (!r.defined()) continue;
      const at::ScalarType type = widened_result(r.scalar_type(), narrowed_float, narrowed_int);
      if (type != r.scalar_type()) r = r.to(type);
    }
    return results;
  };
}

// Per kernel and input dtypes: whether the body's meta results matched its CPU results on
// the first call (Note [Asynchronous kernels]); only then is the kernel queued.
std::mutex g_kernel_verdicts_mutex;
std::unordered_map<std::string, bool>& kernel_verdicts() {
  static auto* verdicts = new std::unordered_map<std::string, bool>();
  return *verdicts;
}
}  // namespace

std::vector<at::Tensor> run_kernel(const char* name, const std::vector<at::Tensor>& inputs, const TensorBody& given,
                                   bool random) {
  DeviceCheck check;
  bool wide = false;
  std::string signature = name;
  for (const at::Tensor& t : inputs) {
    check.add(t, name);
    wide = wide || (t.defined() && is_64bit(t.scalar_type()));
    signature += t.defined() ? "|" + std::string(c10::toString(t.scalar_type())) : "|-";
  }
  const bool narrowing = wide && compute_64bit_as_32bit();
  if (wide && !narrowing) width64_calls(name).count(Width64::kNative);
  const TensorBody body = narrowing ? narrowed_body(given, &width64_calls(name)) : given;
  const c10::DeviceIndex device = check.device >= 0 ? check.device : c10::DeviceIndex(runtime().current_device());
  // The outputs' metadata, for a queued kernel: the body run on meta tensors (not cached by
  // operand sizes: what a body captures, a convolution's padding, a histogram's bins, also
  // shapes its outputs). A small call on an idle stream runs at the call instead (Note
  // [Small ops on an idle stream]), without the meta run.
  std::vector<at::Tensor> meta_results;
  bool queue = asynchronous() && !random;
  std::optional<bool> verdict;
  if (queue) {
    int64_t bytes = 0;
    for (const at::Tensor& t : inputs) bytes += bytes_of(t);
    queue = !runs_at_call_when_idle(bytes, device);
  }
  if (queue) {
    {
      std::lock_guard<std::mutex> lock(g_kernel_verdicts_mutex);
      auto it = kernel_verdicts().find(signature);
      if (it != kernel_verdicts().end()) verdict = it->second;
    }
    std::vector<at::Tensor> metas;
    for (const at::Tensor& t : inputs) {
      metas.push_back(t.defined() ? at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::DeviceType::Meta))
                                  : t);
    }
    try {
      if (!verdict || *verdict) meta_results = body(metas);
    } catch (const c10::Error&) {
      queue = false;  // no meta kernel, or an error the CPU kernel will give at the call
    }
    queue = queue && verdict.value_or(false);
  }
  if (!queue) {
    HostCall call;
    call.device = run_here_on(device);
    std::vector<at::Tensor> views;
    for (const at::Tensor& t : inputs) views.push_back(call.to_host(t));
    std::vector<at::Tensor> results;
    {
      AllocationRedirect redirect(call.device);
      results = body(views);
    }
    for (at::Tensor& result : results) result = call.to_device(result);
    if (asynchronous() && !verdict && !meta_results.empty()) {  // the first call: compare with the meta results
      bool same = meta_results.size() == results.size();
      for (size_t i = 0; i < results.size() && same; ++i) {
        const at::Tensor &m = meta_results[i], &r = results[i];
        same = m.defined() == r.defined() &&
               (!r.defined() || (m.scalar_type() == r.scalar_type() && m.sizes() == r.sizes() &&
                                 (r.numel() <= 1 || m.strides() == r.strides())));
      }
      std::lock_guard<std::mutex> lock(g_kernel_verdicts_mutex);
      kernel_verdicts()[signature] = same;
    }
    return results;
  }
  std::vector<at::Tensor> outputs;
  HostCall call;
  call.device = device;
  std::vector<at::Tensor> input_views, output_views;
  for (const at::Tensor& t : inputs) input_views.push_back(call.to_host(t));
  for (const at::Tensor& m : meta_results) {
    outputs.push_back(m.defined() ? at::empty_strided(m.sizes(), m.strides(),
                                                      at::TensorOptions().dtype(m.scalar_type()).device(kNeuron, device))
                                  : at::Tensor());
    output_views.push_back(call.to_host(outputs.back()));
  }
  enqueue_views(call, [body, input_views, output_views]() mutable {
    std::vector<at::Tensor> results = body(input_views);
    for (size_t i = 0; i < results.size(); ++i) {
      if (output_views[i].defined() && results[i].defined()) output_views[i].copy_(results[i]);
    }
  });
  return outputs;
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
