// Note [Direct kernels]
// The ops the bridge computes by calling ATen's CPU kernel directly (at::cpu::*), unboxed and
// without the dispatcher: eager ops on the direct path (Hot.cpp's wrappers) and the steps of
// compiled programs (compile/Executor.cpp). Both call the functions below, so an op computes
// the same way in both (a small bfloat16 mm takes the brgemm kernel in both, eager mm.out
// excepted, which keeps at::mm: Note [Small bfloat16 matmuls]), and direct_ops() is the one list of them, saying where each is direct:
// tests/kernels/test_direct_kernels.py checks it against Hot.cpp's registrations and the
// executor's steps, so an op added to one side only is a failing test, not a silent difference
// in speed.
//
// Thread safety: the functions are ATen's kernels; direct_ops() is a constant table.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace torch_neuron {

struct DirectOp {
  const char* op;                    // the op: "aten::add"
  std::vector<const char*> eager;    // its overloads Hot.cpp wraps ("add.Tensor", "add.out")
  const char* program;               // the overload programs run as a direct step, or ""
  const char* why_not = "";          // where one side has no direct form, why
};
const std::vector<DirectOp>& direct_ops();

namespace direct {
// mm: through the brgemm kernel where it applies (Note [Small bfloat16 matmuls]). The functional
// form runs under an allocation redirect, where the shape's probe must not run: `small` is
// small_matmul_suits(a, b), asked before the redirect. The out= form with `small` (a program
// step whose shape the probe accepted when the program was built) asks again per call (a cached
// lookup: the verdict is per intra-op thread count), without it is at::mm's.
at::Tensor mm(const at::Tensor& a, const at::Tensor& b, bool small);
void mm_out(at::Tensor& out, const at::Tensor& a, const at::Tensor& b, bool small);
at::Tensor bmm(const at::Tensor& a, const at::Tensor& b);
void bmm_out(at::Tensor& out, const at::Tensor& a, const at::Tensor& b);
void addmm_out(at::Tensor& out, const at::Tensor& self, const at::Tensor& a, const at::Tensor& b,
               const at::Scalar& beta, const at::Scalar& alpha);
at::Tensor add(const at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha);
void add_out(at::Tensor& out, const at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha);
at::Tensor sub(const at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha);
void sub_out(at::Tensor& out, const at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha);
at::Tensor mul(const at::Tensor& a, const at::Tensor& b);
void mul_out(at::Tensor& out, const at::Tensor& a, const at::Tensor& b);
void div_out(at::Tensor& out, const at::Tensor& a, const at::Tensor& b);
at::Tensor neg(const at::Tensor& a);
void neg_out(at::Tensor& out, const at::Tensor& a);
at::Tensor rsqrt(const at::Tensor& a);
void rsqrt_out(at::Tensor& out, const at::Tensor& a);
at::Tensor silu(const at::Tensor& a);
void silu_out(at::Tensor& out, const at::Tensor& a);
at::Tensor cos(const at::Tensor& a);
void cos_out(at::Tensor& out, const at::Tensor& a);
at::Tensor sin(const at::Tensor& a);
void sin_out(at::Tensor& out, const at::Tensor& a);
at::Tensor pow(const at::Tensor& a, const at::Scalar& exponent);
void pow_out(at::Tensor& out, const at::Tensor& a, const at::Scalar& exponent);
at::Tensor mean(const at::Tensor& a, at::OptionalIntArrayRef dim, bool keepdim, std::optional<at::ScalarType> dtype);
void mean_out(at::Tensor& out, const at::Tensor& a, at::OptionalIntArrayRef dim, bool keepdim,
              std::optional<at::ScalarType> dtype);
at::Tensor softmax(const at::Tensor& a, int64_t dim, bool half_to_float);
void softmax_out(at::Tensor& out, const at::Tensor& a, int64_t dim, bool half_to_float);
void where_out(at::Tensor& out, const at::Tensor& condition, const at::Tensor& a, const at::Tensor& b);
at::Tensor cat(const at::ITensorListRef& tensors, int64_t dim);
void cat_out(at::Tensor& out, const at::ITensorListRef& tensors, int64_t dim);
at::Tensor argmax(const at::Tensor& a, std::optional<int64_t> dim, bool keepdim);
at::Tensor index_select(const at::Tensor& a, int64_t dim, const at::Tensor& index);
void index_copy_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source);
void fill_(at::Tensor& self, const at::Scalar& value);
// a (converting) copy between tensors of the device's host views (program steps of clone,
// _to_copy, copy_)
void copy_(at::Tensor& out, const at::Tensor& source);
}  // namespace direct

}  // namespace torch_neuron
