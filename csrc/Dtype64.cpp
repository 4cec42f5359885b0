#include "Dtype64.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <unordered_set>

namespace torch_neuron {

namespace {

std::atomic<bool> g_64bit_as_32bit{[] {
  const char* setting = std::getenv("NEURON_SIM_NATIVE_64BIT");
  return !(setting && std::string(setting) == "1");
}()};

bool is_index_argument(const std::string& name) {
  static const std::unordered_set<std::string> names = {
      "index", "indices", "target", "offsets", "indices_or_sections", "boundaries", "sorted_sequence",
      "repeats", "lengths", "batch_sizes", "sorter", "tensor_indices_or_sections", "split_sizes",
      // the indices out= arguments of max.dim_max and min.dim_min
      "max_values", "min_indices"};
  return names.count(name) > 0;
}

// Ops whose outputs are input values moved or selected without arithmetic, or integers
// generated exactly (base names, "aten::" omitted).
bool is_exact_op(const std::string& base, const std::string& overload) {
  static const std::unordered_set<std::string> exact = {
      // integer sequences and random integers (sizes and ranges depend on the dtype)
      "arange", "range", "randperm", "random_", "randint",
      // data movement
      "cat", "stack", "index_select", "index", "gather", "take", "masked_select", "masked_scatter", "flip",
      "roll", "repeat", "clone", "_to_copy", "copy_", "_copy_from", "_copy_from_and_resize", "contiguous",
      "where", "masked_fill", "masked_fill_", "fill", "fill_", "zero_", "tril", "triu", "tril_", "triu_",
      "constant_pad_nd", "reflection_pad1d", "reflection_pad2d", "reflection_pad3d", "replication_pad1d",
      "replication_pad2d", "replication_pad3d", "slice_scatter", "select_scatter", "diagonal_scatter",
      "as_strided_scatter", "index_put", "index_put_", "_index_put_impl_", "index_copy", "index_copy_",
      "index_fill", "index_fill_", "unfold_copy", "narrow_copy", "split_with_sizes_copy", "unbind_copy",
      "expand_copy", "permute_copy", "t_copy", "view_copy", "_unsafe_view", "alias_copy", "diag_embed",
      "block_diag", "tile", "movedim", "swapaxes", "rot90", "flatten_dense_tensors",
      "unflatten_dense_tensors", "_stack", "pixel_shuffle", "pixel_unshuffle", "channel_shuffle",
      "im2col", "col2im"};
  if (base == "scatter" || base == "scatter_") return overload.find("reduce") == std::string::npos;
  return exact.count(base) > 0;
}

Narrowing make_rule(const c10::FunctionSchema& schema) {
  Narrowing rule;
  const auto& name = schema.operator_name();
  std::string base = name.name;
  if (base.rfind("aten::", 0) == 0) base = base.substr(6);
  rule.exact = is_exact_op(base, name.overload_name);
  for (const auto& argument : schema.arguments()) {
    rule.index_argument.push_back(is_index_argument(argument.name()));
    rule.value_argument.push_back(!rule.exact && !rule.index_argument.back());
    if (argument.name() == "dtype" || argument.name() == "out_int32") {
      rule.dtype_argument = int(rule.value_argument.size()) - 1;
    }
  }
  return rule;
}

}  // namespace

bool compute_64bit_as_32bit() { return g_64bit_as_32bit.load(std::memory_order_relaxed); }
void set_compute_64bit_as_32bit(bool value) { g_64bit_as_32bit.store(value); }

const Narrowing& narrowing_for(const c10::FunctionSchema& schema) {
  static std::shared_mutex mutex;
  static auto* rules = new std::unordered_map<const c10::FunctionSchema*, std::unique_ptr<Narrowing>>();
  {
    std::shared_lock<std::shared_mutex> lock(mutex);
    auto it = rules->find(&schema);
    if (it != rules->end()) return *it->second;
  }
  auto rule = std::make_unique<Narrowing>(make_rule(schema));
  std::unique_lock<std::shared_mutex> lock(mutex);
  auto& slot = (*rules)[&schema];
  if (!slot) slot = std::move(rule);
  return *slot;
}

const Narrowing& narrowing_for(const std::string& qualified_name) {
  const size_t dot = qualified_name.find('.');
  const std::string name = qualified_name.substr(0, dot);
  const std::string overload = dot == std::string::npos ? "" : qualified_name.substr(dot + 1);
  auto op = c10::Dispatcher::singleton().findSchema({name, overload});
  TORCH_CHECK(op.has_value(), "narrowing_rule: no operator named '", qualified_name,
              "' (expected a qualified name with its overload, e.g. 'aten::add.Tensor')");
  return narrowing_for(op->schema());
}

const char* width64_name(Width64 how) {
  switch (how) {
    case Width64::k32Bit: return "32-bit";
    case Width64::kDataMovement: return "data movement";
    case Width64::kOnCpu: return "on the CPU in TorchNeuron";
    case Width64::kMixedWidths: return "mixed widths";
    case Width64::kLargeScalar: return "scalar beyond 32 bits";
    case Width64::kAliased: return "aliased operands";
    case Width64::kRefused: return "32-bit form refused";
    case Width64::kNative: return "NEURON_SIM_NATIVE_64BIT=1";
    case Width64::kNotAten: return "custom op";
    case Width64::kCount: break;
  }
  return "?";
}

namespace {
std::mutex g_width64_mutex;
std::unordered_map<std::string, std::unique_ptr<Width64Calls>>& width64_registry() {
  static auto* registry = new std::unordered_map<std::string, std::unique_ptr<Width64Calls>>();
  return *registry;
}
}  // namespace

Width64Calls& width64_calls(const std::string& op) {
  std::lock_guard<std::mutex> lock(g_width64_mutex);
  auto& slot = width64_registry()[op];
  if (!slot) {
    slot = std::make_unique<Width64Calls>();
    slot->op = op;
  }
  return *slot;
}

std::vector<std::tuple<std::string, std::string, uint64_t>> width64_counts() {
  std::lock_guard<std::mutex> lock(g_width64_mutex);
  std::vector<std::tuple<std::string, std::string, uint64_t>> counts;
  for (const auto& entry : width64_registry()) {
    for (int how = 0; how < int(Width64::kCount); ++how) {
      const uint64_t n = entry.second->calls[how].load(std::memory_order_relaxed);
      if (n) counts.emplace_back(entry.first, width64_name(Width64(how)), n);
    }
  }
  return counts;
}

void clear_width64_counts() {
  std::lock_guard<std::mutex> lock(g_width64_mutex);
  for (auto& entry : width64_registry()) {
    for (auto& n : entry.second->calls) n.store(0, std::memory_order_relaxed);
  }
}

bool scalars_fit_32bit(const c10::IValue* arguments, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    const c10::IValue& value = arguments[i];
    int64_t v = 0;
    if (value.isInt()) {
      v = value.toInt();
    } else if (value.isScalar() && value.toScalar().isIntegral(false)) {
      v = value.toScalar().toLong();
    } else if (value.isTensor() && value.toTensor().defined() &&
               value.toTensor().unsafeGetTensorImpl()->is_wrapped_number() &&
               value.toTensor().scalar_type() == at::kLong) {
      v = *static_cast<const int64_t*>(value.toTensor().const_data_ptr());
    } else {
      continue;
    }
    if (v < INT32_MIN || v > INT32_MAX) return false;
  }
  return true;
}

bool typed_on_request(const Narrowing& rule, const c10::IValue* arguments, size_t count) {
  if (rule.dtype_argument < 0 || size_t(rule.dtype_argument) >= count) return false;
  const c10::IValue& value = arguments[rule.dtype_argument];
  return !value.isNone() && !(value.isBool() && !value.toBool());
}

}  // namespace torch_neuron
