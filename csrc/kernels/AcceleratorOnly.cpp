// Note [Accelerator-only ops]
// Ops that have a CUDA kernel and no CPU kernel, and that PyTorch's own code calls for a
// non-CPU device, so they reach the neuron device in ordinary programs. The generic path
// (kernels/Generic.cpp) runs an op's CPU kernel, which these ops do not have; each gets a kernel
// here that follows CUDA's contract (outputs, dtypes, workspace layouts). The class, how it
// was found and what each op got: COVERAGE.md, "Accelerator-only ops". The fused recurrent
// cells are in Recurrent.cpp.
//
//  - SyncBatchNorm (torch/nn/modules/batchnorm.py, _functions.py) runs on "cuda", "xpu",
//    "hpu" and the PrivateUse1 device when a process group of more than one rank exists, with
//    batch_norm_stats, batch_norm_gather_stats(_with_counts), batch_norm_elemt(.out),
//    batch_norm_backward_reduce and batch_norm_backward_elemt (ATen's Normalization.cu).
//    Statistics are in the accumulate type (float32 for half and bfloat16 inputs).
//  - _fused_dropout (p is the probability to keep; mask of dtype uint8) and _masked_scale,
//    its backward (derivatives.yaml: _fused_dropout_backward -> _masked_scale).
//
// Kernels are bodies over host views (run_kernel), as in Accelerator.cpp, so an op is
// tracked once, under its own name. TorchNeuron 2.13 has the five batch_norm_* ops above in
// its native set (they are reported as executed); _fused_dropout and _masked_scale are not
// (reported as fallback ops).
#include <ATen/TensorOperators.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_masked_scale.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/full.h>
#include <ATen/ops/var_mean.h>
#include <torch/library.h>

#include "../NeuronCommon.h"
#include "../NeuronGenerator.h"
#include "../Dtype64.h"
#include "../HostViews.h"
#include "../Launch.h"
#include "../OpTracking.h"
#include "Generic.h"
#include "KernelBody.h"

namespace torch_neuron {
namespace {

const at::Tensor& value_or_undefined(const std::optional<at::Tensor>& t) {
  static const at::Tensor undefined;
  return t && t->defined() ? *t : undefined;
}

// CUDA's accumulate type: float32 for half and bfloat16.
at::ScalarType accumulate_type(at::ScalarType type) {
  return type == at::kHalf || type == at::kBFloat16 ? at::kFloat : type;
}

at::Tensor widened(const at::Tensor& t) {
  if (!t.defined()) return t;
  return t.to(accumulate_type(t.scalar_type()));
}

// Per-channel statistics [C] shaped to broadcast against an input [N, C, *].
at::Tensor per_channel(const at::Tensor& stat, int64_t dims) {
  std::vector<int64_t> shape(dims, 1);
  shape[1] = stat.numel();
  return stat.reshape(shape);
}

// Every dimension but the channels' (1).
std::vector<int64_t> reduced_dims(int64_t dims) {
  std::vector<int64_t> reduced{0};
  for (int64_t d = 2; d < dims; ++d) reduced.push_back(d);
  return reduced;
}

void check_batch_norm_input(const char* op, const at::Tensor& input) {
  TORCH_CHECK(input.dim() >= 2, op, ": expected an input with at least 2 dimensions (N, C, ...), got ",
              input.dim(), "-D");
  TORCH_CHECK(at::isFloatingType(input.scalar_type()), op, ": expected a floating input, got ",
              input.scalar_type());
}

std::tuple<at::Tensor, at::Tensor> batch_norm_stats(const at::Tensor& input, double eps) {
  static TrackedOp counter("aten::batch_norm_stats", KernelPath::kHot);
  return run_tracked(counter, [&]() -> std::tuple<at::Tensor, at::Tensor> {
    check_batch_norm_input("batch_norm_stats", input);
    TensorBody body = [eps](const std::vector<at::Tensor>& in) {
      auto [var, mean] = at::var_mean(widened(in[0]), reduced_dims(in[0].dim()), /*correction=*/0, /*keepdim=*/false);
      return std::vector<at::Tensor>{mean, (var + eps).rsqrt()};
    };
    auto r = run_kernel("aten::batch_norm_stats", {input}, body);
    return {r[0], r[1]};
  });
}

// ((input - mean) * invstd) * weight + bias, in the accumulate type (eps is unused, as on CUDA).
at::Tensor elemt_body(const std::vector<at::Tensor>& in) {
  const at::Tensor& input = in[0];
  const int64_t dims = input.dim();
  at::Tensor out = (widened(input) - per_channel(widened(in[3]), dims)) * per_channel(widened(in[4]), dims);
  if (in[1].defined()) out = out * per_channel(widened(in[1]), dims);
  if (in[2].defined()) out = out + per_channel(widened(in[2]), dims);
  return out.to(input.scalar_type());
}

at::Tensor batch_norm_elemt(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                            const std::optional<at::Tensor>& bias, const at::Tensor& mean, const at::Tensor& invstd,
                            double eps) {
  static TrackedOp counter("aten::batch_norm_elemt", KernelPath::kHot);
  return run_tracked(counter, [&]() -> at::Tensor {
    check_batch_norm_input("batch_norm_elemt", input);
    TensorBody body = [](const std::vector<at::Tensor>& in) { return std::vector<at::Tensor>{elemt_body(in)}; };
    return run_kernel("aten::batch_norm_elemt",
                      {input, value_or_undefined(weight), value_or_undefined(bias), mean, invstd}, body)[0];
  });
}

at::Tensor& batch_norm_elemt_out(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                                 const std::optional<at::Tensor>& bias, const at::Tensor& mean,
                                 const at::Tensor& invstd, double eps, at::Tensor& out) {
  static TrackedOp counter("aten::batch_norm_elemt.out", KernelPath::kHot);
  return run_tracked(counter, [&]() -> at::Tensor& {
    const char* op = "batch_norm_elemt.out";
    check_batch_norm_input("batch_norm_elemt", input);
    // `out` on the inputs' device, as CUDA's TensorIterator requires (DeviceCheck alone would let
    // a 0-dim CPU `out` through as a scalar operand).
    DeviceCheck check;
    for (const at::Tensor* t : {&input, &mean, &invstd}) check.add(*t, op);
    TORCH_CHECK(out.device().type() == kNeuron,
                "Expected all tensors to be on the same device, but found at least two devices, neuron:",
                int(check.device < 0 ? 0 : check.device), " and ", out.device(), "! (when checking argument out for ",
                op, "). Pass an `out` tensor on the input's device, e.g. torch.empty(0, device=input.device)");
    check.add(out, op);
    TensorBody body = [](const std::vector<at::Tensor>& in) { return std::vector<at::Tensor>{elemt_body(in)}; };
    at::Tensor result = run_kernel("aten::batch_norm_elemt.out",
                                   {input, value_or_undefined(weight), value_or_undefined(bias), mean, invstd}, body)[0];
    at::native::resize_output(out, result.sizes());
    out.copy_(result);
    return out;
  });
}

// CUDA's batch_norm_reduce_statistics_kernel, per channel over the ranks j:
//   n = sum count_j, mean = sum count_j mean_j / n,
//   var_n = sum count_j var_j + sum count_j (mean_j - mean)^2 with var_j = 1/invstd_j^2 - eps,
//   invstd = 1/sqrt(var_n/n + eps); running stats: (1-momentum) old + momentum (mean, var_n/(n-1)).
std::tuple<at::Tensor, at::Tensor> gather_stats(const char* name, const at::Tensor& input, const at::Tensor& mean,
                                                const at::Tensor& invstd, const at::Tensor& running_mean,
                                                const at::Tensor& running_var, double momentum, double eps,
                                                const at::Tensor& counts, int64_t count) {
  TORCH_CHECK(mean.dim() == 2 && invstd.sizes() == mean.sizes(), name,
              ": expected mean and invstd of size [world_size, C], got ", mean.sizes(), " and ", invstd.sizes());
  TORCH_CHECK(!counts.defined() || counts.numel() == mean.size(0), name, ": expected ", mean.size(0),
              " counts, got ", counts.numel());
  // Each running statistic is updated when given, the other may be absent (as on CUDA).
  for (const auto& [what, stat] : {std::pair<const char*, const at::Tensor*>{"running_mean", &running_mean},
                                   std::pair<const char*, const at::Tensor*>{"running_var", &running_var}}) {
    TORCH_CHECK(!stat->defined() || stat->numel() == mean.size(1), name, ": expected ", what, " of ", mean.size(1),
                " elements (one per channel, as mean has), got ", stat->sizes());
  }
  // Without `counts`, every rank counts `count` elements.
  TensorBody body = [momentum, eps, fixed_count = count](const std::vector<at::Tensor>& in) {
    const at::ScalarType stat_type = accumulate_type(in[0].scalar_type());
    const at::Tensor mean = in[0].to(stat_type), invstd = in[1].to(stat_type);
    const at::Tensor counts =
        in[2].defined() ? in[2].to(stat_type) : at::full({mean.size(0)}, fixed_count, mean.options());
    const at::Tensor count = counts.reshape({-1, 1});
    const at::Tensor n = count.sum(0);
    const at::Tensor avg = (mean * count).sum(0) / n;
    const at::Tensor std = invstd.reciprocal();
    const at::Tensor var_n = ((std * std - eps) * count).sum(0) + ((mean - avg) * (mean - avg) * count).sum(0);
    // mean, invstd, then the new running_mean and running_var (undefined when not given)
    std::vector<at::Tensor> results{avg, (var_n / n + eps).rsqrt(), at::Tensor(), at::Tensor()};
    const at::Tensor& running_mean = in[3];
    const at::Tensor& running_var = in[4];
    if (running_mean.defined()) {
      results[2] = (widened(running_mean) * (1 - momentum) + avg * momentum).to(running_mean.scalar_type());
    }
    if (running_var.defined()) {
      results[3] =
          (widened(running_var) * (1 - momentum) + var_n / (n - 1) * momentum).to(running_var.scalar_type());
    }
    return results;
  };
  auto r = run_kernel(name, {mean, invstd, counts, running_mean, running_var}, body);
  // updated in place, as on CUDA
  if (running_mean.defined()) running_mean.copy_(r[2]);
  if (running_var.defined()) running_var.copy_(r[3]);
  return {r[0], r[1]};
}

std::tuple<at::Tensor, at::Tensor> batch_norm_gather_stats_with_counts(
    const at::Tensor& input, const at::Tensor& mean, const at::Tensor& invstd,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var, double momentum,
    double eps, const at::Tensor& counts) {
  static TrackedOp counter("aten::batch_norm_gather_stats_with_counts", KernelPath::kHot);
  return run_tracked(counter, [&]() -> std::tuple<at::Tensor, at::Tensor> {
    return gather_stats("aten::batch_norm_gather_stats_with_counts", input, mean, invstd,
                        value_or_undefined(running_mean), value_or_undefined(running_var), momentum, eps, counts,
                        /*count=*/0);
  });
}

std::tuple<at::Tensor, at::Tensor> batch_norm_gather_stats(const at::Tensor& input, const at::Tensor& mean,
                                                           const at::Tensor& invstd,
                                                           const std::optional<at::Tensor>& running_mean,
                                                           const std::optional<at::Tensor>& running_var,
                                                           double momentum, double eps, int64_t count) {
  static TrackedOp counter("aten::batch_norm_gather_stats", KernelPath::kHot);
  return run_tracked(counter, [&]() -> std::tuple<at::Tensor, at::Tensor> {
    return gather_stats("aten::batch_norm_gather_stats", input, mean, invstd, value_or_undefined(running_mean),
                        value_or_undefined(running_var), momentum, eps, at::Tensor(), count);
  });
}

using FourTensors = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

FourTensors batch_norm_backward_reduce(const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean,
                                       const at::Tensor& invstd, const std::optional<at::Tensor>& weight,
                                       bool input_g, bool weight_g, bool bias_g) {
  static TrackedOp counter("aten::batch_norm_backward_reduce", KernelPath::kHot);
  return run_tracked(counter, [&]() -> FourTensors {
    check_batch_norm_input("batch_norm_backward_reduce", input);
    TORCH_CHECK(grad_out.sizes() == input.sizes(), "batch_norm_backward_reduce: grad_out ", grad_out.sizes(),
                " and input ", input.sizes(), " differ in size");
    TORCH_CHECK(mean.scalar_type() == invstd.scalar_type(), "mean and invstd need to have the same data types");
    TensorBody body = [input_g, weight_g, bias_g](const std::vector<at::Tensor>& in) {
      // grad_weight and grad_bias take the weight's dtype (the input's without a weight).
      const at::ScalarType param_type = in[4].defined() ? in[4].scalar_type() : in[1].scalar_type();
      const int64_t dims = in[1].dim();
      const auto reduced = reduced_dims(dims);
      const at::ScalarType stat_type = in[2].scalar_type();
      const at::Tensor dy = widened(in[0]);
      const at::Tensor sum_dy = dy.sum(reduced).to(stat_type);
      const at::Tensor sum_dy_xmu =
          (dy * (widened(in[1]) - per_channel(widened(in[2]), dims))).sum(reduced).to(stat_type);
      std::vector<at::Tensor> results(4);
      if (input_g) {
        results[0] = sum_dy;
        results[1] = sum_dy_xmu;
      }
      if (weight_g) results[2] = (widened(sum_dy_xmu) * widened(in[3])).to(param_type);
      if (bias_g) results[3] = sum_dy.to(param_type);
      return results;
    };
    auto r = run_kernel("aten::batch_norm_backward_reduce", {grad_out, input, mean, invstd, value_or_undefined(weight)},
                        body);
    return {r[0], r[1], r[2], r[3]};
  });
}

at::Tensor batch_norm_backward_elemt(const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean,
                                     const at::Tensor& invstd, const std::optional<at::Tensor>& weight,
                                     const at::Tensor& sum_dy, const at::Tensor& sum_dy_xmu,
                                     const at::Tensor& count) {
  static TrackedOp counter("aten::batch_norm_backward_elemt", KernelPath::kHot);
  return run_tracked(counter, [&]() -> at::Tensor {
    check_batch_norm_input("batch_norm_backward_elemt", input);
    TORCH_CHECK(grad_out.sizes() == input.sizes(), "batch_norm_backward_elemt: grad_out ", grad_out.sizes(),
                " and input ", input.sizes(), " differ in size");
    TORCH_CHECK(mean.scalar_type() == invstd.scalar_type(), "mean and invstd need to have the same data types");
    // grad_input = (dy - sum_dy/n - (x - mean) invstd^2 sum_dy_xmu/n) invstd weight, n = sum(count)
    TensorBody body = [](const std::vector<at::Tensor>& in) {
      const int64_t dims = in[1].dim();
      const at::Tensor mean = widened(in[2]), invstd = widened(in[3]);
      const at::Tensor norm = in[7].to(mean.scalar_type()).sum().reciprocal();
      const at::Tensor grad_mean = per_channel(widened(in[5]) * norm, dims);
      const at::Tensor proj_scale = per_channel(invstd * invstd * widened(in[6]) * norm, dims);
      at::Tensor grad_scale = in[4].defined() ? invstd * widened(in[4]) : invstd;
      at::Tensor grad_input =
          (widened(in[0]) - grad_mean - (widened(in[1]) - per_channel(mean, dims)) * proj_scale) *
          per_channel(grad_scale, dims);
      return std::vector<at::Tensor>{grad_input.to(in[1].scalar_type())};
    };
    return run_kernel("aten::batch_norm_backward_elemt",
                      {grad_out, input, mean, invstd, value_or_undefined(weight), sum_dy, sum_dy_xmu, count}, body)[0];
  });
}

std::tuple<at::Tensor, at::Tensor> fused_dropout(const at::Tensor& self, double p,
                                                 std::optional<at::Generator> generator) {
  static TrackedOp counter("aten::_fused_dropout", KernelPath::kHot);
  return run_tracked(counter, [&]() -> std::tuple<at::Tensor, at::Tensor> {
    TORCH_CHECK(p >= 0 && p <= 1, "_fused_dropout: the probability to keep has to be between 0 and 1, but got ", p);
    TORCH_CHECK(at::isFloatingType(self.scalar_type()), "_fused_dropout: expected a floating input, got ",
                self.scalar_type());
    // p is the probability to keep an element (the caller passes 1 - dropout probability).
    // The mask draws from the device's generator (csrc/kernels/Random.cpp).
    at::Tensor mask = at::empty_like(self, self.options().dtype(at::kByte));
    if (self.numel() == 0) return {self.clone(), mask};
    mask.bernoulli_(p, generator);
    return {at::_masked_scale(self, mask, p > 0 ? 1.0 / p : 0.0), mask};
  });
}

at::Tensor masked_scale(const at::Tensor& self, const at::Tensor& mask, double scale) {
  static TrackedOp counter("aten::_masked_scale", KernelPath::kHot);
  return run_tracked(counter, [&]() -> at::Tensor {
    TORCH_CHECK(mask.scalar_type() == at::kByte, "mask should be torch.uint8 dtype");
    TensorBody body = [scale](const std::vector<at::Tensor>& in) {
      return std::vector<at::Tensor>{(widened(in[0]) * in[1] * scale).to(in[0].scalar_type()).contiguous()};
    };
    return run_kernel("aten::_masked_scale", {self, mask}, body)[0];
  });
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("batch_norm_stats", TORCH_FN(batch_norm_stats));
  m.impl("batch_norm_elemt", TORCH_FN(batch_norm_elemt));
  m.impl("batch_norm_elemt.out", TORCH_FN(batch_norm_elemt_out));
  m.impl("batch_norm_gather_stats", TORCH_FN(batch_norm_gather_stats));
  m.impl("batch_norm_gather_stats_with_counts", TORCH_FN(batch_norm_gather_stats_with_counts));
  m.impl("batch_norm_backward_reduce", TORCH_FN(batch_norm_backward_reduce));
  m.impl("batch_norm_backward_elemt", TORCH_FN(batch_norm_backward_elemt));
  m.impl("_fused_dropout", TORCH_FN(fused_dropout));
  m.impl("_masked_scale", TORCH_FN(masked_scale));
}

}  // namespace
}  // namespace torch_neuron
