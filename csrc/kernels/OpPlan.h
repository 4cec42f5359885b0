// What the generic path (Generic.cpp) knows of an op, from its schema, once per op; and the
// helpers the generic path, the meta planning (MetaPlanning.cpp) and kernel bodies
// (KernelBody.cpp) share. Internal to csrc/kernels/.
//
// Thread safety: plan_for() may be called from any thread; a plan's meta caches are guarded by
// its meta_mutex.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <functional>
#include <memory>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "../Dtype64.h"

namespace torch_neuron {

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
  // Note [Adaptive Eager Execution] (Launch.h): queued, it may join its stream's concatenation
  // buffer: tagged pointwise, or a reduction or data movement the heuristics admit.
  bool fusable = false;
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

// The plan of `op` (made on its first call, kept for the process).
const OpPlan& plan_for(const c10::OperatorHandle& op);

// `value` (a Tensor[] or a list holding tensors) with each tensor replaced by fn(tensor).
c10::IValue list_map(const c10::IValue& value, const std::function<at::Tensor(const at::Tensor&)>& fn);
// Whether `value` is a list whose elements are (optional) tensors.
bool list_has_tensors(const c10::IValue& value);

// Calls fn(tensor) for `value` if it is a tensor, or for each tensor of a list.
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
// Note [Adaptive Eager Execution] (Launch.h): whether a concatenation group admits `op`.
bool fusable_op(const c10::OperatorHandle& op);
bool writes_aliased_memory(const OpPlan& plan, const c10::IValue* arguments, size_t count, Sharing sharing);

// A random op reaches the generic path for a neuron generator even when its tensors are on the
// CPU (the dispatcher picks the generator's backend): raises, saying that the generator is what
// is wrong, as CPU's kernels do for a CUDA generator.
void check_generator_device(const OpPlan& plan, const torch::jit::Stack& stack, size_t begin);

}  // namespace torch_neuron
