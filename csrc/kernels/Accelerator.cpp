// Ops whose CPU kernel differs from an accelerator's (CUDA's) contract; the neuron
// device follows the accelerator, since models pick code paths by device type.
//  - convolution: an out-of-tree device is routed to convolution_overrideable
//    (and its backward); we run ATen's CPU convolution on host views.
//  - scaled_dot_product_attention: the fused-kernel choice is a per-device stub; ours
//    applies the CPU's rules, so the CPU's flash attention kernel runs (on host views)
//    instead of the unfused math decomposition.
//  - histc: CUDA accepts integer inputs (transformers' MoE layers pass int32 on
//    accelerators); the CPU kernel takes floating inputs only.
#include <ATen/CPUFunctions.h>
#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_sdp_choice.h>
#include <torch/library.h>

#include "../NeuronAllocator.h"
#include "../NeuronCommon.h"
#include "ZeroCopy.h"

namespace torch_neuron {
namespace {

at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                       c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
                       bool transposed, c10::IntArrayRef output_padding, int64_t groups) {
  static OpCounter counter("aten::convolution_overrideable");
  counter.hit();
  DeviceCheck check;
  check.add(input, "aten::convolution");
  check.add(weight, "aten::convolution");
  if (bias) check.add(*bias, "aten::convolution");
  HostCall call;
  call.device = run_here_on(check.device);
  at::Tensor result;
  {
    AllocationRedirect redirect(call.device);
    std::optional<at::Tensor> bias_view;
    if (bias && bias->defined()) bias_view = call.to_host(*bias);
    result = at::convolution(call.to_host(input), call.to_host(weight), bias_view, stride, padding, dilation,
                             transposed, output_padding, groups);
  }
  return call.to_device(result);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::IntArrayRef stride,
    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed, c10::IntArrayRef output_padding,
    int64_t groups, std::array<bool, 3> output_mask) {
  static OpCounter counter("aten::convolution_backward_overrideable");
  counter.hit();
  DeviceCheck check;
  check.add(grad_output, "aten::convolution_backward");
  check.add(input, "aten::convolution_backward");
  check.add(weight, "aten::convolution_backward");
  HostCall call;
  call.device = run_here_on(check.device);
  const int64_t out_channels = transposed ? weight.size(1) * groups : weight.size(0);
  std::vector<int64_t> bias_sizes{out_channels};
  at::Tensor grad_input, grad_weight, grad_bias;
  {
    AllocationRedirect redirect(call.device);
    std::tie(grad_input, grad_weight, grad_bias) = at::convolution_backward(
        call.to_host(grad_output), call.to_host(input), call.to_host(weight),
        output_mask[2] ? at::OptionalIntArrayRef(bias_sizes) : std::nullopt, stride, padding, dilation,
        transposed, output_padding, groups, output_mask);
  }
  return {call.to_device(grad_input), call.to_device(grad_weight), call.to_device(grad_bias)};
}

at::Tensor histc(const at::Tensor& self, int64_t bins, const at::Scalar& min, const at::Scalar& max) {
  static OpCounter counter("aten::histc");
  counter.hit();
  DeviceCheck check;
  check.add(self, "aten::histc");
  HostCall call;
  call.device = run_here_on(check.device);
  at::Tensor result;
  {
    AllocationRedirect redirect(call.device);
    at::Tensor view = call.to_host(self);
    if (at::isIntegralType(self.scalar_type(), /*includeBool=*/true)) {
      // integer values are exact in float64; counts come back in the input's dtype, as on CUDA
      result = at::cpu::histc(view.to(at::kDouble), bins, min, max).to(self.scalar_type());
    } else {
      result = at::cpu::histc(view, bins, min, max);
    }
  }
  return call.to_device(result);
}

int64_t fused_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                         const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                         std::optional<double> scale, bool enable_gqa) {
  HostCall call;
  call.device = query.device().index();
  // The rules look at requires_grad (the fused kernel is not differentiable in every
  // argument): the views carry it over.
  auto view = [&](const at::Tensor& t) {
    at::Tensor v = call.to_host(t);
    if (t.requires_grad()) v.set_requires_grad(true);
    return v;
  };
  std::optional<at::Tensor> mask_view;
  if (attn_mask && attn_mask->defined()) mask_view = view(*attn_mask);
  return at::_fused_sdp_choice(view(query), view(key), view(value), mask_view, dropout_p, is_causal, scale,
                               enable_gqa);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", TORCH_FN(convolution));
  m.impl("convolution_backward_overrideable", TORCH_FN(convolution_backward));
  m.impl("histc", TORCH_FN(histc));
}

}  // namespace
}  // namespace torch_neuron

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_neuron::fused_sdp_choice)
}  // namespace at::native
