// Ops whose CPU kernel differs from an accelerator's (CUDA's) contract; the neuron
// device follows the accelerator, since models pick code paths by device type. (Ops with no
// CPU kernel at all: Recurrent.cpp, AcceleratorOnly.cpp.)
//  - convolution: an out-of-tree device is routed to convolution_overrideable
//    (and its backward); we run ATen's CPU convolution on host views.
//  - scaled_dot_product_attention: the fused-kernel choice is a per-device stub; ours
//    applies the CPU's rules and picks the device's fused op (the overrideable one, as
//    TorchNeuron does) where the CPU would pick flash; that op runs the CPU's flash
//    attention kernel on host views instead of the unfused math decomposition.
//  - histc: CUDA accepts integer inputs (transformers' MoE layers pass int32 on
//    accelerators); the CPU kernel takes floating inputs only.
#include <ATen/ops/histc.h>
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
#include "../Dtype64.h"
#include "../HostViews.h"
#include "../Launch.h"
#include "../OpTracking.h"
#include "Generic.h"
#include "KernelBody.h"

namespace torch_neuron {
namespace {

// Kernels are bodies over host views (run_kernel: inline, or queued with outputs from the
// same body run on meta tensors), so they capture their non-tensor arguments by value.

at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                       c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
                       bool transposed, c10::IntArrayRef output_padding, int64_t groups) {
  // TorchNeuron registers convolution itself; PyTorch routes ours to the overrideable op.
  static TrackedOp counter("aten::convolution", KernelPath::kHot);
  return run_tracked(counter, [&]() -> at::Tensor {
    const bool has_bias = bias && bias->defined();
    TensorBody body = [stride = stride.vec(), padding = padding.vec(), dilation = dilation.vec(), transposed,
                       output_padding = output_padding.vec(), groups, has_bias](const std::vector<at::Tensor>& in) {
      std::optional<at::Tensor> b;
      if (has_bias) b = in[2];
      return std::vector<at::Tensor>{
          at::convolution(in[0], in[1], b, stride, padding, dilation, transposed, output_padding, groups)};
    };
    std::vector<at::Tensor> inputs{input, weight};
    if (has_bias) inputs.push_back(*bias);
    return run_kernel("aten::convolution", inputs, body)[0];
  });
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::IntArrayRef stride,
    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed, c10::IntArrayRef output_padding,
    int64_t groups, std::array<bool, 3> output_mask) {
  static TrackedOp counter("aten::convolution_backward", KernelPath::kHot);
  return run_tracked(counter, [&]() -> std::tuple<at::Tensor, at::Tensor, at::Tensor> {
    const int64_t out_channels = transposed ? weight.size(1) * groups : weight.size(0);
    TensorBody body = [stride = stride.vec(), padding = padding.vec(), dilation = dilation.vec(), transposed,
                       output_padding = output_padding.vec(), groups, output_mask,
                       out_channels](const std::vector<at::Tensor>& in) {
      std::vector<int64_t> bias_sizes{out_channels};
      auto [grad_input, grad_weight, grad_bias] = at::convolution_backward(
          in[0], in[1], in[2], output_mask[2] ? at::OptionalIntArrayRef(bias_sizes) : std::nullopt, stride, padding,
          dilation, transposed, output_padding, groups, output_mask);
      return std::vector<at::Tensor>{grad_input, grad_weight, grad_bias};
    };
    auto results = run_kernel("aten::convolution_backward", {grad_output, input, weight}, body);
    return {results[0], results[1], results[2]};
  });
}

at::Tensor histc(const at::Tensor& self, int64_t bins, const at::Scalar& min, const at::Scalar& max) {
  static TrackedOp counter("aten::histc", KernelPath::kHot);
  return run_tracked(counter, [&]() -> at::Tensor {
    const auto type = self.scalar_type();
    TensorBody body = [bins, min, max, type](const std::vector<at::Tensor>& in) {
      if (at::isIntegralType(type, /*includeBool=*/true)) {
        // integer values are exact in float64; counts come back in the input's dtype, as on CUDA
        return std::vector<at::Tensor>{at::histc(in[0].to(at::kDouble), bins, min, max).to(type)};
      }
      return std::vector<at::Tensor>{at::histc(in[0], bins, min, max)};
    };
    return run_kernel("aten::histc", {self}, body)[0];
  });
}

int64_t fused_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                         const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                         std::optional<double> scale, bool enable_gqa) {
  // The CPU's rules read metadata only: they get CPU tensors with the same metadata and no
  // memory (the arguments may be fake tensors, whose data cannot be touched, when
  // torch.compile traces). The rules look at requires_grad (the fused kernel is not
  // differentiable in every argument): it is carried over.
  auto describe = [](const at::Tensor& t) {
    c10::Storage none(c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), 0,
                                                            c10::DataPtr(nullptr, c10::Device(c10::DeviceType::CPU)),
                                                            nullptr, false));
    auto cpu = at::detail::make_tensor<c10::TensorImpl>(std::move(none), c10::DispatchKeySet(c10::DispatchKey::CPU),
                                                        t.dtype());
    cpu.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), 0);
    if (t.requires_grad()) cpu.set_requires_grad(true);
    return cpu;
  };
  std::optional<at::Tensor> mask;
  if (attn_mask && attn_mask->defined()) mask = describe(*attn_mask);
  // Straight to the CPU kernel: under torch.compile's fake-tensor mode, a dispatched call
  // would be intercepted (these describing tensors are not fake).
  const auto cpu_choice = static_cast<at::SDPBackend>(at::_ops::_fused_sdp_choice::redispatch(
      c10::DispatchKeySet(c10::DispatchKey::CPU), describe(query), describe(key), describe(value), mask, dropout_p,
      is_causal, scale, enable_gqa));
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
    const bool has_mask = attn_bias && attn_bias->defined();
    TensorBody body = [dropout_p, is_causal, scale, has_mask](const std::vector<at::Tensor>& in) {
      std::optional<at::Tensor> mask;
      if (has_mask) mask = in[3];
      auto [output, logsumexp] =
          at::_scaled_dot_product_flash_attention_for_cpu(in[0], in[1], in[2], dropout_p, is_causal, mask, scale);
      return std::vector<at::Tensor>{output, logsumexp};
    };
    std::vector<at::Tensor> inputs{query, key, value};
    if (has_mask) inputs.push_back(*attn_bias);
    auto results = run_kernel("aten::scaled_dot_product_attention", inputs, body);
    auto empty = at::empty({0}, query.options().dtype(at::kLong));
    return {results[0], results[1], empty, empty, c10::SymInt(query.size(2)), c10::SymInt(key.size(2)), empty, empty,
            at::empty({0}, query.options())};
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
    const bool has_mask = attn_bias.defined();
    TensorBody body = [dropout_p, is_causal, scale, has_mask](const std::vector<at::Tensor>& in) {
      std::optional<at::Tensor> mask;
      if (has_mask) mask = in[6];
      auto [grad_query, grad_key, grad_value] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
          in[0], in[1], in[2], in[3], in[4], in[5], dropout_p, is_causal, mask, scale);
      return std::vector<at::Tensor>{grad_query, grad_key, grad_value};
    };
    std::vector<at::Tensor> inputs{grad_out, query, key, value, out, logsumexp};
    if (has_mask) inputs.push_back(attn_bias);
    auto results = run_kernel("aten::_scaled_dot_product_fused_attention_overrideable_backward", inputs, body);
    return {results[0], results[1], results[2], at::Tensor()};
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
