// The reduction table: Reduction.h.
#include "Reduction.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <utility>

namespace torch_neuron {

std::string dtype_name(at::ScalarType type) {
  switch (type) {
    case at::kShort: return "int16";
    case at::kUInt16: return "uint16";
    case at::kUInt32: return "uint32";
    case at::kUInt64: return "uint64";
    case at::kComplexHalf: return "complex32";
    case at::kComplexFloat: return "complex64";
    case at::kComplexDouble: return "complex128";
    case at::kFloat8_e4m3fn: return "float8_e4m3fn";
    case at::kFloat8_e5m2: return "float8_e5m2";
    default: return c10::toString(type);
  }
}

bool transport_has_dtype(at::ScalarType type) {
  switch (type) {
    case at::kFloat: case at::kDouble: case at::kHalf: case at::kBFloat16:
    case at::kChar: case at::kByte: case at::kInt: case at::kLong: case at::kBool:
      return true;
    default:
      return false;
  }
}

at::Tensor movable(const at::Tensor& view) {
  if (!view.defined() || transport_has_dtype(view.scalar_type())) return view;
  TORCH_CHECK(view.is_contiguous(), "a tensor of ", dtype_name(view.scalar_type()), " must be contiguous: the transport (Gloo) "
              "has no type for it and moves its bytes");
  return view.unsqueeze(-1).view(at::kByte);
}

std::vector<at::Tensor> movable(std::vector<at::Tensor> views) {
  for (auto& view : views) view = movable(view);
  return views;
}

std::vector<std::vector<at::Tensor>> movable(std::vector<std::vector<at::Tensor>> views) {
  for (auto& list : views) list = movable(std::move(list));
  return views;
}

at::Tensor Reduction::scaled(const at::Tensor& view) const {
  return (factor_tensor.defined() ? view * factor_tensor : view * factor).contiguous();
}

std::vector<at::Tensor> Reduction::scaled(const std::vector<at::Tensor>& views) const {
  std::vector<at::Tensor> copies;
  for (const auto& view : views) copies.push_back(scaled(view));
  return copies;
}

void Reduction::scale_in_place(std::vector<at::Tensor>& views) const {
  for (auto& view : views) factor_tensor.defined() ? view.mul_(factor_tensor) : view.mul_(factor);
}

Reduction plan_reduction(const c10d::ReduceOp& op, const std::vector<at::Tensor>& tensors) {
  for (const auto& tensor : tensors) {
    TORCH_CHECK(transport_has_dtype(tensor.scalar_type()), "reductions of ", dtype_name(tensor.scalar_type()),
                " tensors are not supported: the transport (Gloo) reduces float32, float64, float16, bfloat16, "
                "int8, uint8, int32, int64 and bool");
  }
  const at::ScalarType dtype = tensors.empty() ? at::kFloat : tensors[0].scalar_type();
  Reduction plan{c10d::ReduceOp(c10d::ReduceOp::SUM)};
  switch (op.op_) {
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(dtype != at::kBool, "ReduceOp.AVG is not defined for bool tensors");
      plan.average = true;
      return plan;
    case c10d::ReduceOp::PREMUL_SUM: {
      auto* supplement = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
      TORCH_CHECK(supplement, "ReduceOp.PREMUL_SUM without its factor (make it with "
                              "torch.distributed._make_nccl_premul_sum)");
      TORCH_CHECK(at::isFloatingType(dtype), "ReduceOp.PREMUL_SUM needs floating-point tensors, got ", dtype_name(dtype));
      plan.premultiply = true;
      if (supplement->tensor_factor.defined()) {
        plan.factor_tensor = supplement->tensor_factor.to(at::kCPU).reshape({});
      } else {
        plan.factor = supplement->double_factor;
      }
      return plan;
    }
    case c10d::ReduceOp::UNUSED:
      TORCH_CHECK(false, "ReduceOp.UNUSED is not a reduction");
    default:
      plan.transport_op = op;
      return plan;
  }
}

std::optional<neuron_rt::ElementType> shared_element(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return neuron_rt::ElementType::kFloat32;
    case at::kDouble: return neuron_rt::ElementType::kFloat64;
    case at::kHalf: return neuron_rt::ElementType::kFloat16;
    case at::kBFloat16: return neuron_rt::ElementType::kBFloat16;
    case at::kChar: return neuron_rt::ElementType::kInt8;
    case at::kByte: return neuron_rt::ElementType::kUInt8;
    case at::kInt: return neuron_rt::ElementType::kInt32;
    case at::kLong: return neuron_rt::ElementType::kInt64;
    case at::kBool: return neuron_rt::ElementType::kBool;
    default: return std::nullopt;
  }
}

std::optional<neuron_rt::ReduceKind> shared_reduction(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return neuron_rt::ReduceKind::kSum;
    case c10d::ReduceOp::PRODUCT: return neuron_rt::ReduceKind::kProduct;
    case c10d::ReduceOp::MIN: return neuron_rt::ReduceKind::kMin;
    case c10d::ReduceOp::MAX: return neuron_rt::ReduceKind::kMax;
    case c10d::ReduceOp::BAND: return neuron_rt::ReduceKind::kBitAnd;
    case c10d::ReduceOp::BOR: return neuron_rt::ReduceKind::kBitOr;
    case c10d::ReduceOp::BXOR: return neuron_rt::ReduceKind::kBitXor;
    default: return std::nullopt;
  }
}

bool shared_reduces(const std::vector<at::Tensor>& views, const c10d::ReduceOp& op) {
  const auto kind = shared_reduction(op);
  if (!kind) return false;
  for (const auto& view : views) {
    const auto element = shared_element(view.scalar_type());
    if (!element || !neuron_rt::reduction_supported(*element, *kind)) return false;
  }
  return true;
}

std::function<void()> averaging(std::vector<at::Tensor> views, int size) {
  return [views = std::move(views), size] {
    for (const auto& view : views) {
      if (at::isFloatingType(view.scalar_type()) || at::isComplexType(view.scalar_type())) {
        view.div_(size);
      } else {
        view.div_(size, "trunc");
      }
    }
  };
}

}  // namespace torch_neuron
