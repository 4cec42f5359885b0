// The reduction table of the neuron process group: which dtypes and reduce ops each transport
// takes (Gloo's dtypes; shared memory's element types and reductions, runtime/collectives.h),
// and what the group adds to Gloo's semantics (Note [ProcessGroupNeuron], "Beyond Gloo"):
// AVG as SUM then a division, PREMUL_SUM as a scaling then SUM, and the bytes of dtypes Gloo has
// no type for. Plain functions of their arguments: thread-safe.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "../../runtime/collectives.h"

namespace torch_neuron {

// torch's name of a dtype ("int16", not c10's "Short").
std::string dtype_name(at::ScalarType type);

// The dtypes Gloo reduces and moves (others: Note [ProcessGroupNeuron]).
bool transport_has_dtype(at::ScalarType type);

// A view the transport can move: itself, or its bytes (one more trailing dimension, so splits
// along dim 0 keep their units) for a dtype Gloo has no type for.
at::Tensor movable(const at::Tensor& view);
std::vector<at::Tensor> movable(std::vector<at::Tensor> views);
std::vector<std::vector<at::Tensor>> movable(std::vector<std::vector<at::Tensor>> views);

// How a reduction runs on the transport: Gloo's op, plus what AVG and PREMUL_SUM add.
struct Reduction {
  c10d::ReduceOp transport_op;
  bool average = false;
  bool premultiply = false;
  double factor = 1.0;
  at::Tensor factor_tensor;  // a CPU scalar, when the factor is a tensor

  // A contiguous copy scaled by the factor (the product keeps a transposed input's layout;
  // the transports read the copy as one block).
  at::Tensor scaled(const at::Tensor& view) const;
  std::vector<at::Tensor> scaled(const std::vector<at::Tensor>& views) const;
  void scale_in_place(std::vector<at::Tensor>& views) const;
};

// The plan for reducing `tensors` with `op`; raises, naming the dtype or op, for what no
// transport reduces.
Reduction plan_reduction(const c10d::ReduceOp& op, const std::vector<at::Tensor>& tensors);

// Shared memory's element type for a dtype, and its reduction for an op (nullopt: none).
std::optional<neuron_rt::ElementType> shared_element(at::ScalarType type);
std::optional<neuron_rt::ReduceKind> shared_reduction(const c10d::ReduceOp& op);
// Whether shared memory reduces these host views with `op` (else they go to Gloo, which
// raises for what it cannot do either).
bool shared_reduces(const std::vector<at::Tensor>& views, const c10d::ReduceOp& op);

// A finishing step: AVG's division of the summed outputs by the group size (truncating for
// integers, as NCCL does).
std::function<void()> averaging(std::vector<at::Tensor> views, int size);

}  // namespace torch_neuron
