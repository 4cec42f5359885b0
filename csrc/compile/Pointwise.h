// Note [Fused pointwise kernels]
// A program node "neuron::pointwise" runs a chain of elementwise ops in one pass over memory:
// the compiler (python/torch_neuron_sim/compile/fusion.py) groups pointwise nodes whose
// intermediate results nobody else needs, and the executor runs the group with this kernel
// instead of one ATen kernel (and one output buffer) per op.
//
// Exactness: a fused group gives, bit for bit, what its ops give one by one on the CPU. Each
// instruction computes in float (ATen's op math for float32 and bfloat16) and rounds
// its result to the dtype the op's result has in the graph, as ATen does after every op.
// Only ops whose CPU kernels compute exactly this way are fused (fusion.py; a test compares
// every instruction with ATen's kernel, tests/compile/test_compile_fusion.py): add/sub with alpha 1,
// mul, neg, rsqrt (of float32 results), square (pow 2), dtype conversion, where. Transcendental functions (exp,
// silu, ...) are not: ATen's vectorised versions differ from libm by an ulp.
//
// Code: 5 integers per instruction: opcode, operands a, b, c, result dtype (a ScalarType
// code). Operands are registers: 0..inputs-1 hold the inputs (converted to float), input
// count + k holds instruction k's result; operand -1 is the instruction's scalar (a Python
// number in the graph, from `scalars[k]`, converted to float as ATen's op math does).
// Broadcasting and strides come from at::TensorIterator; the last instruction is the result.
#pragma once

#include <ATen/core/Tensor.h>

#include "runtime/program.h"

#include <cstdint>
#include <vector>

namespace torch_neuron {

// The opcodes are the program format's (runtime/program.h), which checks the code too.
using PointwiseOp = neuron_rt::PointwiseOpcode;

struct PointwiseCode {
  int inputs = 0;
  std::vector<int64_t> code;    // 5 per instruction
  std::vector<double> scalars;  // one per instruction
};

// Checks the code (neuron_rt::check_pointwise_code: operands defined before use, a register
// wherever the kernel reads one, known opcodes and dtypes); throws c10::Error naming what is
// wrong.
void check_pointwise_code(const PointwiseCode& code, const std::string& program);

// Runs the code on CPU tensors (host views): out = code(inputs), inputs broadcast to out.
void run_pointwise(const at::Tensor& out, const std::vector<at::Tensor>& inputs, const PointwiseCode& code);

}  // namespace torch_neuron
