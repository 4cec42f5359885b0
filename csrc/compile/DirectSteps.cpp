#include "DirectSteps.h"

#include <unordered_map>
#include <vector>

#include "../kernels/DirectKernels.h"

namespace torch_neuron {

int value_at(const ProgramExecutor::Step& step, size_t position) {
  for (const auto& slot : step.tensors) {
    if (slot.position == position && slot.list_index < 0) return slot.value;
  }
  return -1;
}

namespace {


// One builder per op the table (DirectKernels.h) marks `program`; a builder returns nullptr
// where the step's arguments do not fit (a Python number where the schema has a tensor is not a
// value: such a node takes the dispatcher).
using DirectBuilder = Direct (*)(const ProgramExecutor::Step& step);

#define OUT(v) const_cast<at::Tensor&>(v(out))

// A unary op's step: kernel(out, a).
Direct unary(const ProgramExecutor::Step& step, void (*kernel)(at::Tensor&, const at::Tensor&)) {
  const int out = step.outputs[0], a = value_at(step, 0);
  if (a < 0) return nullptr;
  return [=](const auto&, const Get& v) { kernel(OUT(v), v(a)); };
}

// add/sub/mul/div: the second operand is a value, or a Python number (x * 0.125, x + eps)
// that build() made a wrapped-number tensor, as eager does (the tensor's dtype wins).
Direct binary(const ProgramExecutor::Step& step) {
  const std::string& name = step.name;
  const int out = step.outputs[0], a = value_at(step, 0), b = value_at(step, 1);
  const auto& args = step.arguments;
  const bool number = a >= 0 && b < 0 && args.size() > 1 && args[1].isTensor() &&
                      args[1].toTensor().unsafeGetTensorImpl()->is_wrapped_number();
  if (a < 0 || (b < 0 && !number)) return nullptr;
  const at::Tensor scalar = number ? args[1].toTensor() : at::Tensor();
  auto second = [b, scalar](const Get& v) -> const at::Tensor& { return b >= 0 ? v(b) : scalar; };
  if (name == "aten::add.Tensor" || name == "aten::sub.Tensor") {
    const at::Scalar alpha = args[2].toScalar();
    if (name == "aten::add.Tensor") return [=](const auto&, const Get& v) { direct::add_out(OUT(v), v(a), second(v), alpha); };
    return [=](const auto&, const Get& v) { direct::sub_out(OUT(v), v(a), second(v), alpha); };
  }
  if (name == "aten::mul.Tensor") return [=](const auto&, const Get& v) { direct::mul_out(OUT(v), v(a), second(v)); };
  return [=](const auto&, const Get& v) { direct::div_out(OUT(v), v(a), second(v)); };
}
const std::unordered_map<std::string, DirectBuilder>& direct_builders() {
  static const auto* builders = new std::unordered_map<std::string, DirectBuilder>{
      {"aten::mm", [](const ProgramExecutor::Step& step) -> Direct {
         const int out = step.outputs[0], a = value_at(step, 0), b = value_at(step, 1);
         if (a < 0 || b < 0) return nullptr;
         return [=](const auto&, const Get& v) { direct::mm_out(OUT(v), v(a), v(b), /*small=*/false); };
       }},
      {"aten::bmm", [](const ProgramExecutor::Step& step) -> Direct {
         const int out = step.outputs[0], a = value_at(step, 0), b = value_at(step, 1);
         if (a < 0 || b < 0) return nullptr;
         return [=](const auto&, const Get& v) { direct::bmm_out(OUT(v), v(a), v(b)); };
       }},
      {"aten::addmm", [](const ProgramExecutor::Step& step) -> Direct {
         const int out = step.outputs[0], a = value_at(step, 0), b = value_at(step, 1), c = value_at(step, 2);
         if (a < 0 || b < 0 || c < 0) return nullptr;
         const at::Scalar beta = step.arguments[3].toScalar(), alpha = step.arguments[4].toScalar();
         return [=](const auto&, const Get& v) { direct::addmm_out(OUT(v), v(a), v(b), v(c), beta, alpha); };
       }},
      {"aten::add.Tensor", [](const ProgramExecutor::Step& step) { return binary(step); }},
      {"aten::sub.Tensor", [](const ProgramExecutor::Step& step) { return binary(step); }},
      {"aten::mul.Tensor", [](const ProgramExecutor::Step& step) { return binary(step); }},
      {"aten::div.Tensor", [](const ProgramExecutor::Step& step) { return binary(step); }},
      {"aten::neg", [](const ProgramExecutor::Step& step) { return unary(step, direct::neg_out); }},
      {"aten::rsqrt", [](const ProgramExecutor::Step& step) { return unary(step, direct::rsqrt_out); }},
      {"aten::silu", [](const ProgramExecutor::Step& step) { return unary(step, direct::silu_out); }},
      {"aten::cos", [](const ProgramExecutor::Step& step) { return unary(step, direct::cos_out); }},
      {"aten::sin", [](const ProgramExecutor::Step& step) { return unary(step, direct::sin_out); }},
      {"aten::pow.Tensor_Scalar", [](const ProgramExecutor::Step& step) -> Direct {
         const int out = step.outputs[0], a = value_at(step, 0);
         if (a < 0) return nullptr;
         const at::Scalar exponent = step.arguments[1].toScalar();
         return [=](const auto&, const Get& v) { direct::pow_out(OUT(v), v(a), exponent); };
       }},
      {"aten::mean.dim", [](const ProgramExecutor::Step& step) -> Direct {
         const int out = step.outputs[0], a = value_at(step, 0);
         const auto& args = step.arguments;
         if (a < 0 || !args[3].isNone()) return nullptr;
         const std::vector<int64_t> dims = args[1].isNone() ? std::vector<int64_t>{} : args[1].toIntVector();
         const bool keepdim = args[2].toBool();
         const bool all = args[1].isNone();
         return [=](const auto&, const Get& v) {
           direct::mean_out(OUT(v), v(a), all ? at::OptionalIntArrayRef() : at::OptionalIntArrayRef(dims), keepdim,
                            std::nullopt);
         };
       }},
      {"aten::_softmax", [](const ProgramExecutor::Step& step) -> Direct {
         const int out = step.outputs[0], a = value_at(step, 0);
         if (a < 0) return nullptr;
         const int64_t dim = step.arguments[1].toInt();
         const bool half = step.arguments[2].toBool();
         return [=](const auto&, const Get& v) { direct::softmax_out(OUT(v), v(a), dim, half); };
       }},
      {"aten::where.self", [](const ProgramExecutor::Step& step) -> Direct {
         const int out = step.outputs[0], a = value_at(step, 0), b = value_at(step, 1), c = value_at(step, 2);
         if (a < 0 || b < 0 || c < 0) return nullptr;
         return [=](const auto&, const Get& v) { direct::where_out(OUT(v), v(a), v(b), v(c)); };
       }},
      // between values of the device: a (converting) copy
      {"aten::clone", [](const ProgramExecutor::Step& step) { return unary(step, direct::copy_); }},
      {"aten::_to_copy", [](const ProgramExecutor::Step& step) { return unary(step, direct::copy_); }},
      {"aten::copy_", [](const ProgramExecutor::Step& step) -> Direct {  // in place, into its first argument
         const int a = value_at(step, 0), b = value_at(step, 1);
         if (a < 0 || b < 0) return nullptr;
         return [=](const auto&, const Get& v) { direct::copy_(const_cast<at::Tensor&>(v(a)), v(b)); };
       }},
      {"aten::index_copy_", [](const ProgramExecutor::Step& step) -> Direct {  // in place (a static KV cache's update)
         const int a = value_at(step, 0), c = value_at(step, 2), source = value_at(step, 3);
         if (a < 0 || c < 0 || source < 0) return nullptr;
         const int64_t dim = step.arguments[1].toInt();
         return [=](const auto&, const Get& v) { direct::index_copy_(const_cast<at::Tensor&>(v(a)), dim, v(c), v(source)); };
       }},
      {"aten::cat", [](const ProgramExecutor::Step& step) -> Direct {  // its list, in order (rotate_half, KV concatenations)
         if (step.outputs.empty() || step.outputs[0] < 0) return nullptr;
         const int out = step.outputs[0];
         std::vector<int> parts;
         for (const auto& slot : step.tensors) {
           if (slot.position != 0 || slot.list_index < 0) continue;
           if (slot.value < 0) return nullptr;
           if (static_cast<size_t>(slot.list_index) >= parts.size()) parts.resize(slot.list_index + 1, -1);
           parts[slot.list_index] = slot.value;
         }
         for (int part : parts) {
           if (part < 0) return nullptr;
         }
         const int64_t dim = step.arguments[1].toInt();
         return [=](const auto&, const Get& v) {
           std::vector<at::Tensor> tensors;
           tensors.reserve(parts.size());
           for (int part : parts) tensors.push_back(v(part));
           direct::cat_out(OUT(v), tensors, dim);
         };
       }},
  };
  return *builders;
}

}  // namespace

Direct direct_kernel(const std::string& name, const ProgramExecutor::Step& step) {
  const auto found = direct_builders().find(name);
  if (found == direct_builders().end()) return nullptr;
  const bool in_place = name == "aten::copy_" || name == "aten::index_copy_";
  if (!in_place && (step.outputs.empty() || step.outputs[0] < 0)) return nullptr;
  return found->second(step);
}

std::vector<std::string> program_direct_ops() {
  std::vector<std::string> names;
  for (const auto& entry : direct_builders()) names.push_back(entry.first);
  return names;
}

}  // namespace torch_neuron
