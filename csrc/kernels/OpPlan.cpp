#include "OpPlan.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/core/List.h>

#include <mutex>
#include <unordered_set>

#include "../NeuronCommon.h"
#include "../OpTracking.h"

namespace torch_neuron {
namespace {
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

}  // namespace

// Note [Adaptive Eager Execution]: the ops a concatenation group admits: every op ATen tags
// pointwise (elementwise: add, mul, silu, where, casts, comparisons, in place or not), and the
// reductions and data movement that sit between them in a model's eager step (a norm's mean, a
// softmax, rotary embeddings' cat). Matmuls, attention, scatters, random draws and ops whose
// outputs depend on data are not: they end a group (the next op opens another).
bool fusable_op(const c10::OperatorHandle& op) {
  if (op.hasTag(at::Tag::pointwise)) return true;
  static const std::unordered_set<std::string> admitted = {
      "aten::sum", "aten::mean", "aten::amax", "aten::amin", "aten::prod", "aten::var", "aten::std",
      "aten::var_mean", "aten::logsumexp", "aten::linalg_vector_norm", "aten::_softmax", "aten::_log_softmax",
      "aten::cumsum", "aten::cat", "aten::clone", "aten::_to_copy", "aten::fill_", "aten::zero_"};
  return admitted.count(op.operator_name().name) != 0;
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
  plan->fusable = plan->aten && !plan->random && !plan->view && fusable_op(op);
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


}  // namespace torch_neuron
