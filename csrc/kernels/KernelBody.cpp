#include "KernelBody.h"

#include <ATen/ops/empty_strided.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "../Dtype64.h"
#include "../HostViews.h"
#include "../Launch.h"
#include "../NeuronAllocator.h"
#include "OpPlan.h"

namespace torch_neuron {

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
    note_launch(LaunchPath::kDirect, name, call.device, LaunchOperands::of_tensors(inputs, results));
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
  note_launch(LaunchPath::kQueued, name, device, LaunchOperands::of_tensors(inputs, outputs));
  enqueue_views(call, [body, input_views, output_views]() mutable {
    std::vector<at::Tensor> results = body(input_views);
    for (size_t i = 0; i < results.size(); ++i) {
      if (output_views[i].defined() && results[i].defined()) output_views[i].copy_(results[i]);
    }
  });
  return outputs;
}

}  // namespace torch_neuron
