#include "DirectKernels.h"

#include <ATen/CPUFunctions.h>

#include "SmallMatmul.h"

namespace torch_neuron {

const std::vector<DirectOp>& direct_ops() {
  static const std::vector<DirectOp> table = {
      {"aten::mm", {"mm", "mm.out"}, "aten::mm"},
      {"aten::bmm", {"bmm", "bmm.out"}, "aten::bmm"},
      {"aten::addmm", {"addmm.out"}, "aten::addmm"},
      {"aten::add", {"add.Tensor", "add.out"}, "aten::add.Tensor"},
      {"aten::sub", {"sub.Tensor", "sub.out"}, "aten::sub.Tensor"},
      {"aten::mul", {"mul.Tensor", "mul.out"}, "aten::mul.Tensor"},
      {"aten::div", {"div.out"}, "aten::div.Tensor"},
      {"aten::neg", {"neg", "neg.out"}, "aten::neg"},
      {"aten::rsqrt", {"rsqrt", "rsqrt.out"}, "aten::rsqrt"},
      {"aten::silu", {"silu", "silu.out"}, "aten::silu"},
      {"aten::cos", {"cos", "cos.out"}, "aten::cos"},
      {"aten::sin", {"sin", "sin.out"}, "aten::sin"},
      {"aten::pow", {"pow.Tensor_Scalar", "pow.Tensor_Scalar_out"}, "aten::pow.Tensor_Scalar"},
      {"aten::mean", {"mean.dim", "mean.out"}, "aten::mean.dim"},
      {"aten::_softmax", {"_softmax", "_softmax.out"}, "aten::_softmax"},
      {"aten::where", {"where.self_out"}, "aten::where.self"},
      {"aten::cat", {"cat", "cat.out"}, "aten::cat"},
      {"aten::argmax", {"argmax"}, "", "a program runs argmax through the dispatcher (TorchNeuron runs it on the CPU)"},
      {"aten::index_select", {"index_select"}, "", "a program runs index_select through the dispatcher"},
      {"aten::fill_", {"fill_.Scalar"}, "", "a program's fills are folded into constants or run through the dispatcher"},
      {"aten::index_copy_", {"index_copy_"}, "aten::index_copy_"},
      {"aten::clone", {}, "aten::clone", "eager clone is empty_like and copy_ (Minimal.cpp's copy kernel)"},
      {"aten::_to_copy", {}, "aten::_to_copy", "eager _to_copy is empty and copy_ (Minimal.cpp's copy kernel)"},
      {"aten::copy_", {}, "aten::copy_", "eager copy_ is Minimal.cpp's copy kernel"},
  };
  return table;
}

namespace direct {

at::Tensor mm(const at::Tensor& a, const at::Tensor& b, bool small) {
  return small ? small_matmul(a, b) : at::cpu::mm(a, b);
}
void mm_out(at::Tensor& out, const at::Tensor& a, const at::Tensor& b, bool small) {
  if (small) {
    small_matmul(out, a, b);
  } else {
    at::cpu::mm_out(out, a, b);
  }
}
at::Tensor bmm(const at::Tensor& a, const at::Tensor& b) { return at::cpu::bmm(a, b); }
void bmm_out(at::Tensor& out, const at::Tensor& a, const at::Tensor& b) { at::cpu::bmm_out(out, a, b); }
void addmm_out(at::Tensor& out, const at::Tensor& self, const at::Tensor& a, const at::Tensor& b,
               const at::Scalar& beta, const at::Scalar& alpha) {
  at::cpu::addmm_out(out, self, a, b, beta, alpha);
}
at::Tensor add(const at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha) { return at::cpu::add(a, b, alpha); }
void add_out(at::Tensor& out, const at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha) {
  at::cpu::add_out(out, a, b, alpha);
}
at::Tensor sub(const at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha) { return at::cpu::sub(a, b, alpha); }
void sub_out(at::Tensor& out, const at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha) {
  at::cpu::sub_out(out, a, b, alpha);
}
at::Tensor mul(const at::Tensor& a, const at::Tensor& b) { return at::cpu::mul(a, b); }
void mul_out(at::Tensor& out, const at::Tensor& a, const at::Tensor& b) { at::cpu::mul_out(out, a, b); }
void div_out(at::Tensor& out, const at::Tensor& a, const at::Tensor& b) { at::cpu::div_out(out, a, b); }
at::Tensor neg(const at::Tensor& a) { return at::cpu::neg(a); }
void neg_out(at::Tensor& out, const at::Tensor& a) { at::cpu::neg_out(out, a); }
at::Tensor rsqrt(const at::Tensor& a) { return at::cpu::rsqrt(a); }
void rsqrt_out(at::Tensor& out, const at::Tensor& a) { at::cpu::rsqrt_out(out, a); }
at::Tensor silu(const at::Tensor& a) { return at::cpu::silu(a); }
void silu_out(at::Tensor& out, const at::Tensor& a) { at::cpu::silu_out(out, a); }
at::Tensor cos(const at::Tensor& a) { return at::cpu::cos(a); }
void cos_out(at::Tensor& out, const at::Tensor& a) { at::cpu::cos_out(out, a); }
at::Tensor sin(const at::Tensor& a) { return at::cpu::sin(a); }
void sin_out(at::Tensor& out, const at::Tensor& a) { at::cpu::sin_out(out, a); }
at::Tensor pow(const at::Tensor& a, const at::Scalar& exponent) { return at::cpu::pow(a, exponent); }
void pow_out(at::Tensor& out, const at::Tensor& a, const at::Scalar& exponent) { at::cpu::pow_out(out, a, exponent); }
at::Tensor mean(const at::Tensor& a, at::OptionalIntArrayRef dim, bool keepdim, std::optional<at::ScalarType> dtype) {
  return at::cpu::mean(a, dim, keepdim, dtype);
}
void mean_out(at::Tensor& out, const at::Tensor& a, at::OptionalIntArrayRef dim, bool keepdim,
              std::optional<at::ScalarType> dtype) {
  at::cpu::mean_out(out, a, dim, keepdim, dtype);
}
at::Tensor softmax(const at::Tensor& a, int64_t dim, bool half_to_float) {
  return at::cpu::_softmax(a, dim, half_to_float);
}
void softmax_out(at::Tensor& out, const at::Tensor& a, int64_t dim, bool half_to_float) {
  at::cpu::_softmax_out(out, a, dim, half_to_float);
}
void where_out(at::Tensor& out, const at::Tensor& condition, const at::Tensor& a, const at::Tensor& b) {
  at::cpu::where_out(out, condition, a, b);
}
at::Tensor cat(const at::ITensorListRef& tensors, int64_t dim) { return at::cpu::cat(tensors, dim); }
void cat_out(at::Tensor& out, const at::ITensorListRef& tensors, int64_t dim) { at::cpu::cat_out(out, tensors, dim); }
at::Tensor argmax(const at::Tensor& a, std::optional<int64_t> dim, bool keepdim) {
  return at::cpu::argmax(a, dim, keepdim);
}
at::Tensor index_select(const at::Tensor& a, int64_t dim, const at::Tensor& index) {
  return at::cpu::index_select(a, dim, index);
}
void index_copy_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source) {
  at::cpu::index_copy_(self, dim, index, source);
}
void fill_(at::Tensor& self, const at::Scalar& value) { at::cpu::fill_(self, value); }
void copy_(at::Tensor& out, const at::Tensor& source) { out.copy_(source); }

}  // namespace direct
}  // namespace torch_neuron
