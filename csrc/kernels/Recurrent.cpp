// Note [Fused recurrent cells]
// PyTorch's LSTM and GRU layers (aten/src/ATen/native/RNN.cpp: LSTMCell, GRUCell, used by
// nn.LSTM, nn.GRU, nn.LSTMCell, nn.GRUCell, packed or not) compute each step on the CPU with
// plain ops, but on CUDA, XPU and PrivateUse1 devices with the fused cell ops
// _thnn_fused_lstm_cell / _thnn_fused_gru_cell, which have CUDA kernels and no CPU kernel.
// Without these kernels a neuron tensor would reach the generic path (kernels/Generic.cpp), which
// runs the CPU kernel and fails ("Could not run ... with arguments from the 'CPU' backend").
//
// The kernels below follow CUDA's contract (aten/src/ATen/native/cuda/RNN.cu), so the
// autograd formulas of derivatives.yaml work unchanged:
//  - _thnn_fused_lstm_cell(input_gates [B,4H], hidden_gates [B,4H], cx [B,H], b_ih?, b_hh?)
//      -> (hy, cy, workspace [B,4H] = the activated gates i, f, g, o);
//  - _thnn_fused_lstm_cell_backward_impl(grad_hy?, grad_cy?, cx, cy, workspace, has_bias)
//      -> (grad_gates [B,4H], grad_cx, grad_bias = grad_gates.sum(0) or undefined);
//  - _thnn_fused_gru_cell(input_gates [B,3H], hidden_gates [B,3H], hx [B,H], b_ih?, b_hh?)
//      -> (hy, workspace [B,5H] = r, z, n, hx, hidden_gates_n + b_hh_n);
//  - _thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias)
//      -> (grad_input_gates, grad_hidden_gates, grad_hx, grad_b_ih, grad_b_hh).
// (_thnn_fused_lstm_cell_backward and the _thnn_differentiable_* backward ops are
// composite: they call these or plain ops.) As on CUDA, half and bfloat16 are computed in
// float32 (the accumulate type) and rounded once; the workspace keeps the input's dtype.
// Every output is contiguous, whatever the operands' layouts, and the backward reads any 2-D
// workspace of the right element count as [B, 4H] (resp. checks [B, 5H]), as CUDA does.
//
// Each op is one kernel over host views (run_kernel, as in Accelerator.cpp): its
// intermediate ops are CPU ops, so op tracking reports the fused op alone. TorchNeuron 2.13
// does not have these ops in its native set (it lists _thnn_fused_lstm_cell as not
// available), so they are reported as fallback ops (Note [Op tracking]).
#include <ATen/TensorOperators.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/tanh.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include "../NeuronCommon.h"
#include "../Dtype64.h"
#include "../HostViews.h"
#include "../Launch.h"
#include "../OpTracking.h"
#include "Generic.h"
#include "KernelBody.h"

namespace torch_neuron {
namespace {

// The dtype a cell computes in: float32 for half and bfloat16 (CUDA's accumulate type).
at::Tensor widened(const at::Tensor& t) {
  if (!t.defined()) return t;
  const auto type = t.scalar_type();
  return type == at::kHalf || type == at::kBFloat16 ? t.to(at::kFloat) : t;
}

// An output: in `type`, contiguous whatever the operands' layouts (CUDA allocates every
// output with LEGACY_CONTIGUOUS_MEMORY_FORMAT).
at::Tensor output(const at::Tensor& t, at::ScalarType type) { return t.to(type).contiguous(); }

const at::Tensor& value_or_undefined(const std::optional<at::Tensor>& t) {
  static const at::Tensor undefined;
  return t && t->defined() ? *t : undefined;
}

// CUDA's checkSizes (RNN.cu): gates [B, factor*H], equal sizes; biases [factor*H]; the
// previous state [B, H].
void check_cell(const char* op, const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                const at::Tensor& input_bias, const at::Tensor& hidden_bias, int64_t factor,
                const at::Tensor& prev) {
  TORCH_CHECK(input_gates.dim() == 2, op, ": expected input_gates to be 2-D, got ", input_gates.dim(), "-D");
  TORCH_CHECK(input_gates.sizes() == hidden_gates.sizes(), op, ": input_gates ", input_gates.sizes(),
              " and hidden_gates ", hidden_gates.sizes(), " differ in size");
  const int64_t gates_size = input_gates.size(1);
  TORCH_CHECK(gates_size % factor == 0, op, ": the gates' width ", gates_size, " is not a multiple of ", factor);
  TORCH_CHECK(input_bias.defined() == hidden_bias.defined(), op,
              ": input_bias and hidden_bias must be both given or both absent");
  if (input_bias.defined()) {
    TORCH_CHECK(input_bias.dim() == 1 && input_bias.numel() == gates_size, op, ": expected input_bias of size [",
                gates_size, "], got ", input_bias.sizes());
    TORCH_CHECK(hidden_bias.sizes() == input_bias.sizes(), op, ": input_bias ", input_bias.sizes(),
                " and hidden_bias ", hidden_bias.sizes(), " differ in size");
  }
  TORCH_CHECK(prev.dim() == 2 && prev.size(0) == input_gates.size(0) && prev.size(1) == gates_size / factor, op,
              ": expected the previous state of size [", input_gates.size(0), ", ", gates_size / factor, "], got ",
              prev.sizes());
  const auto type = input_gates.scalar_type();
  TORCH_CHECK(at::isFloatingType(type), op, ": expected a floating dtype, got ", type);
  for (const at::Tensor* t : {&hidden_gates, &input_bias, &hidden_bias, &prev}) {
    TORCH_CHECK(!t->defined() || t->scalar_type() == type, op, ": expected every tensor to be of dtype ", type,
                ", got ", t->scalar_type());
  }
}

// The summed pre-activation gates, CUDA's order: ((input + hidden) + input_bias) + hidden_bias.
at::Tensor summed_gates(const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& input_bias,
                        const at::Tensor& hidden_bias) {
  at::Tensor gates = widened(input_gates) + widened(hidden_gates);
  if (input_bias.defined()) gates = gates + widened(input_bias) + widened(hidden_bias);
  return gates;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell(const at::Tensor& input_gates,
                                                               const at::Tensor& hidden_gates, const at::Tensor& cx,
                                                               const std::optional<at::Tensor>& input_bias,
                                                               const std::optional<at::Tensor>& hidden_bias) {
  static TrackedOp counter("aten::_thnn_fused_lstm_cell", KernelPath::kHot);
  return run_tracked(counter, [&]() -> std::tuple<at::Tensor, at::Tensor, at::Tensor> {
    const at::Tensor& b_ih = value_or_undefined(input_bias);
    const at::Tensor& b_hh = value_or_undefined(hidden_bias);
    check_cell("_thnn_fused_lstm_cell", input_gates, hidden_gates, b_ih, b_hh, 4, cx);
    TensorBody body = [](const std::vector<at::Tensor>& in) {
      const auto type = in[0].scalar_type();
      auto gates = summed_gates(in[0], in[1], in[3], in[4]).chunk(4, 1);
      at::Tensor i = gates[0].sigmoid(), f = gates[1].sigmoid(), g = gates[2].tanh(), o = gates[3].sigmoid();
      at::Tensor cy = f * widened(in[2]) + i * g;
      at::Tensor hy = o * cy.tanh();
      return std::vector<at::Tensor>{output(hy, type), output(cy, type), output(at::cat({i, f, g, o}, 1), type)};
    };
    auto r = run_kernel("aten::_thnn_fused_lstm_cell", {input_gates, hidden_gates, cx, b_ih, b_hh}, body);
    return {r[0], r[1], r[2]};
  });
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell_backward_impl(
    const std::optional<at::Tensor>& grad_hy_opt, const std::optional<at::Tensor>& grad_cy_opt, const at::Tensor& cx,
    const at::Tensor& cy, const at::Tensor& workspace, bool has_bias) {
  static TrackedOp counter("aten::_thnn_fused_lstm_cell_backward_impl", KernelPath::kHot);
  return run_tracked(counter, [&]() -> std::tuple<at::Tensor, at::Tensor, at::Tensor> {
    const at::Tensor& grad_hy = value_or_undefined(grad_hy_opt);
    const at::Tensor& grad_cy = value_or_undefined(grad_cy_opt);
    if (!grad_hy.defined() && !grad_cy.defined()) return {};  // as on CUDA
    const at::Tensor& grad = grad_hy.defined() ? grad_hy : grad_cy;
    const char* op = "_thnn_fused_lstm_cell_backward_impl";
    TORCH_CHECK(grad.dim() == 2, op, ": expected a 2-D gradient, got ", grad.dim(), "-D");
    for (const at::Tensor* t : {&grad_hy, &grad_cy, &cx, &cy}) {
      TORCH_CHECK(!t->defined() || t->sizes() == grad.sizes(), op, ": expected size ", grad.sizes(), ", got ",
                  t->sizes());
    }
    // CUDA's checkLSTMBackwardSizes: a 2-D workspace of 4 * B * H elements, whatever its shape;
    // its kernel reads it as [B, 4H] in row-major order, so does this one.
    TORCH_CHECK(workspace.dim() == 2 && workspace.numel() == grad.numel() * 4, op, ": expected a 2-D workspace of ",
                grad.numel() * 4, " elements (the [", grad.size(0), ", ", grad.size(1) * 4,
                "] workspace _thnn_fused_lstm_cell returned), got ", workspace.sizes());
    TensorBody body = [has_bias](const std::vector<at::Tensor>& in) {
      const auto type = in[4].scalar_type();
      const int64_t batch = in[2].size(0), hidden = in[2].size(1);
      auto gates = widened(in[4]).reshape({batch, 4 * hidden}).chunk(4, 1);
      const at::Tensor &i = gates[0], &f = gates[1], &g = gates[2], &o = gates[3];
      const at::Tensor cx = widened(in[2]), tanh_cy = widened(in[3]).tanh();
      at::Tensor grad_o, grad_c;
      if (in[0].defined()) {
        const at::Tensor go = widened(in[0]);
        grad_o = go * tanh_cy;
        grad_c = go * o * (1 - tanh_cy * tanh_cy);
        if (in[1].defined()) grad_c = grad_c + widened(in[1]);
      } else {
        grad_o = at::zeros_like(tanh_cy);
        grad_c = widened(in[1]);
      }
      at::Tensor grad_gates = at::cat({grad_c * g * (1 - i) * i, grad_c * cx * (1 - f) * f,
                                       grad_c * i * (1 - g * g), grad_o * (1 - o) * o},
                                      1);
      // The bias gradient sums the unrounded gate gradients (CUDA sums the rounded ones).
      at::Tensor grad_bias = has_bias ? grad_gates.sum(0).to(type) : at::Tensor();
      return std::vector<at::Tensor>{output(grad_gates, type), output(grad_c * f, type), grad_bias};
    };
    auto r = run_kernel("aten::_thnn_fused_lstm_cell_backward_impl", {grad_hy, grad_cy, cx, cy, workspace}, body);
    return {r[0], r[1], r[2]};
  });
}

std::tuple<at::Tensor, at::Tensor> fused_gru_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                                  const at::Tensor& hx, const std::optional<at::Tensor>& input_bias,
                                                  const std::optional<at::Tensor>& hidden_bias) {
  static TrackedOp counter("aten::_thnn_fused_gru_cell", KernelPath::kHot);
  return run_tracked(counter, [&]() -> std::tuple<at::Tensor, at::Tensor> {
    const at::Tensor& b_ih = value_or_undefined(input_bias);
    const at::Tensor& b_hh = value_or_undefined(hidden_bias);
    check_cell("_thnn_fused_gru_cell", input_gates, hidden_gates, b_ih, b_hh, 3, hx);
    TensorBody body = [](const std::vector<at::Tensor>& in) {
      const auto type = in[0].scalar_type();
      auto input_gates = widened(in[0]).chunk(3, 1);
      auto hidden_gates = widened(in[1]).chunk(3, 1);
      at::Tensor ir = input_gates[0], ii = input_gates[1], in_ = input_gates[2];
      at::Tensor hr = hidden_gates[0], hi = hidden_gates[1], hn = hidden_gates[2];
      if (in[3].defined()) {
        auto b1 = widened(in[3]).chunk(3, 0);
        auto b2 = widened(in[4]).chunk(3, 0);
        ir = ir + hr + b1[0] + b2[0];
        ii = ii + hi + b1[1] + b2[1];
        in_ = in_ + b1[2];
        hn = hn + b2[2];
      } else {
        ir = ir + hr;
        ii = ii + hi;
      }
      at::Tensor r = ir.sigmoid(), z = ii.sigmoid();
      at::Tensor n = (in_ + r * hn).tanh();
      const at::Tensor hx = widened(in[2]);
      at::Tensor hy = n + z * (hx - n);
      return std::vector<at::Tensor>{output(hy, type), output(at::cat({r, z, n, hx, hn}, 1), type)};
    };
    auto r = run_kernel("aten::_thnn_fused_gru_cell", {input_gates, hidden_gates, hx, b_ih, b_hh}, body);
    return {r[0], r[1]};
  });
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  static TrackedOp counter("aten::_thnn_fused_gru_cell_backward", KernelPath::kHot);
  return run_tracked(counter, [&]() -> std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> {
    const char* op = "_thnn_fused_gru_cell_backward";
    TORCH_CHECK(grad_hy.dim() == 2, op, ": expected a 2-D grad_hy, got ", grad_hy.dim(), "-D");
    TORCH_CHECK(workspace.dim() == 2 && workspace.size(0) == grad_hy.size(0) &&
                    workspace.size(1) == grad_hy.size(1) * 5,
                op, ": expected a workspace of size [", grad_hy.size(0), ", ", grad_hy.size(1) * 5, "], got ",
                workspace.sizes());
    TensorBody body = [has_bias](const std::vector<at::Tensor>& in) {
      const auto type = in[0].scalar_type();
      auto saved = widened(in[1]).chunk(5, 1);
      const at::Tensor &r = saved[0], &z = saved[1], &n = saved[2], &hx = saved[3], &hn = saved[4];
      const at::Tensor go = widened(in[0]);
      at::Tensor grad_z = go * (hx - n) * (1 - z) * z;
      at::Tensor grad_hx = go * z;
      at::Tensor grad_n = go * (1 - z) * (1 - n * n);
      at::Tensor grad_hn = grad_n * r;
      at::Tensor grad_r = grad_n * hn * (1 - r) * r;
      at::Tensor grad_input_gates = at::cat({grad_r, grad_z, grad_n}, 1);
      at::Tensor grad_hidden_gates = at::cat({grad_r, grad_z, grad_hn}, 1);
      at::Tensor grad_input_bias, grad_hidden_bias;
      if (has_bias) {  // sums of the unrounded gate gradients (CUDA sums the rounded ones)
        grad_input_bias = grad_input_gates.sum(0).to(type);
        grad_hidden_bias = grad_hidden_gates.sum(0).to(type);
      }
      return std::vector<at::Tensor>{output(grad_input_gates, type), output(grad_hidden_gates, type),
                                     output(grad_hx, type), grad_input_bias, grad_hidden_bias};
    };
    auto r = run_kernel("aten::_thnn_fused_gru_cell_backward", {grad_hy, workspace}, body);
    return {r[0], r[1], r[2], r[3], r[4]};
  });
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", TORCH_FN(fused_lstm_cell));
  m.impl("_thnn_fused_lstm_cell_backward_impl", TORCH_FN(fused_lstm_cell_backward_impl));
  m.impl("_thnn_fused_gru_cell", TORCH_FN(fused_gru_cell));
  m.impl("_thnn_fused_gru_cell_backward", TORCH_FN(fused_gru_cell_backward));
}

}  // namespace
}  // namespace torch_neuron
