#include "MetaPlanning.h"

#include <ATen/ops/empty_strided.h>
#include <c10/util/accumulate.h>

#include <cstring>
#include <mutex>

#include "../NeuronCommon.h"

namespace torch_neuron {
namespace {

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

}  // namespace

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

}  // namespace torch_neuron
