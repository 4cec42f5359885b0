// Ops whose CPU kernel differs from an accelerator's (CUDA's) contract; the neuron
// device follows the accelerator, since models pick code paths by device type.
//  - convolution: an out-of-tree device is routed to convolution_overrideable
//    (and its backward); we run ATen's CPU convolution on host views.
//  - scaled_dot_product_attention: the fused-kernel choice is a per-device stub; ours
//    applies the CPU's rules and picks the device's fused op (the overrideable one, as
//    TorchNeuron does) where the CPU would pick flash; that op runs the CPU's flash
//    attention kernel on host views instead of the unfused math decomposition.
//  - histc: CUDA accepts integer inputs (transformers' MoE layers pass int32 on
//    accelerators); the CPU kernel takes floating inputs only.
#include <ATen/CPUFunctions.h>
#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_sdp_choice.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward.h>
#include <ATen/SDPBackend.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "../NeuronAllocator.h"
#include "../NeuronCommon.h"
#include "ZeroCopy.h"

namespace torch_neuron {
namespace {

at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                       c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
                       bool transposed, c10::IntArrayRef output_padding, int64_t groups) {
  // TorchNeuron registers convolution itself; PyTorch routes ours to the overrideable op.
  static TrackedOp counter("aten::convolution", KernelPath::kHot);
  return run_tracked(counter, [&]() -> at::Tensor {
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
  });
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::IntArrayRef stride,
    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed, c10::IntArrayRef output_padding,
    int64_t groups, std::array<bool, 3> output_mask) {
  static TrackedOp counter("aten::convolution_backward", KernelPath::kHot);
  return run_tracked(counter, [&]() -> std::tuple<at::Tensor, at::Tensor, at::Tensor> {
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
  });
}

at::Tensor histc(const at::Tensor& self, int64_t bins, const at::Scalar& min, const at::Scalar& max) {
  static TrackedOp counter("aten::histc", KernelPath::kHot);
  return run_tracked(counter, [&]() -> at::Tensor {
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
  });
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
  const auto cpu_choice = static_cast<at::SDPBackend>(at::_fused_sdp_choice(
      view(query), view(key), view(value), mask_view, dropout_p, is_causal, scale, enable_gqa));
  // Where the CPU would run its flash kernel, the device runs its fused attention op (as
  // TorchNeuron does: its SDPA kernel is the overrideable op), which computes with the
  // CPU's flash kernel below; otherwise the math decomposition runs.
  return static_cast<int64_t>(cpu_choice == at::SDPBackend::flash_attention ? at::SDPBackend::overrideable
                                                                               : at::SDPBackend::math);
}

using FusedAttention = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt,
                                  at::Tensor, at::Tensor, at::Tensor>;

FusedAttention fused_attention(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                               const std::optional<at::Tensor>& attn_bias, double dropout_p, bool is_causal,
                               bool return_debug_mask, std::optional<double> scale) {
  static TrackedOp counter("aten::_scaled_dot_product_fused_attention_overrideable", KernelPath::kHot);
  return run_tracked(counter, [&]() -> FusedAttention {
    TORCH_CHECK(!return_debug_mask, "scaled_dot_product_attention on neuron: return_debug_mask is not supported");
    DeviceCheck check;
    for (const at::Tensor* t : {&query, &key, &value}) check.add(*t, "aten::scaled_dot_product_attention");
    if (attn_bias && attn_bias->defined()) check.add(*attn_bias, "aten::scaled_dot_product_attention");
    HostCall call;
    call.device = run_here_on(check.device);
    at::Tensor output, logsumexp;
    {
      AllocationRedirect redirect(call.device);
      std::optional<at::Tensor> mask;
      if (attn_bias && attn_bias->defined()) mask = call.to_host(*attn_bias);
      std::tie(output, logsumexp) = at::_scaled_dot_product_flash_attention_for_cpu(
          call.to_host(query), call.to_host(key), call.to_host(value), dropout_p, is_causal, mask, scale);
    }
    auto empty = at::empty({0}, query.options().dtype(at::kLong));
    return {call.to_device(output), call.to_device(logsumexp), empty, empty, c10::SymInt(query.size(2)),
            c10::SymInt(key.size(2)), empty, empty, at::empty({0}, query.options())};
  });
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_attention_backward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& attn_bias, std::array<bool, 4> grad_input_mask, const at::Tensor& out,
    const at::Tensor& logsumexp, const at::Tensor& cum_seq_q, const at::Tensor& cum_seq_k, c10::SymInt max_q,
    c10::SymInt max_k, double dropout_p, bool is_causal, const at::Tensor& philox_seed,
    const at::Tensor& philox_offset, std::optional<double> scale) {
  static TrackedOp counter("aten::_scaled_dot_product_fused_attention_overrideable_backward", KernelPath::kHot);
  return run_tracked(counter, [&]() -> std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> {
    DeviceCheck check;
    for (const at::Tensor* t : {&grad_out, &query, &key, &value, &out, &logsumexp}) {
      check.add(*t, "aten::scaled_dot_product_attention backward");
    }
    HostCall call;
    call.device = run_here_on(check.device);
    at::Tensor grad_query, grad_key, grad_value;
    {
      AllocationRedirect redirect(call.device);
      std::optional<at::Tensor> mask;
      if (attn_bias.defined()) mask = call.to_host(attn_bias);
      std::tie(grad_query, grad_key, grad_value) = at::_scaled_dot_product_flash_attention_for_cpu_backward(
          call.to_host(grad_out), call.to_host(query), call.to_host(key), call.to_host(value), call.to_host(out),
          call.to_host(logsumexp), dropout_p, is_causal, mask, scale);
    }
    return {call.to_device(grad_query), call.to_device(grad_key), call.to_device(grad_value), at::Tensor()};
  });
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", TORCH_FN(convolution));
  m.impl("convolution_backward_overrideable", TORCH_FN(convolution_backward));
  m.impl("histc", TORCH_FN(histc));
  m.impl("_scaled_dot_product_fused_attention_overrideable", TORCH_FN(fused_attention));
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward", TORCH_FN(fused_attention_backward));
}

}  // namespace
}  // namespace torch_neuron

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_neuron::fused_sdp_choice)
}  // namespace at::native
