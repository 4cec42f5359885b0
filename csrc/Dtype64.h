// Note [64-bit as 32-bit]
// The real NeuronCore stores float64 and int64 tensors but computes them in 32 bits;
// outputs keep their dtype. We do the same by default: a kernel gets float32 / int32
// copies of its 64-bit value arguments, and its float32 / int32 results are widened back
// into 64-bit outputs. Values beyond the 32-bit range wrap as they would on the device.
// NEURON_SIM_NATIVE_64BIT=1 turns this off (64-bit math, as on the CPU).
//
// This file is the one place the rule lives: the eager kernels (generic and hot paths)
// and the compiler's FX pass (through _C.narrowing_rule) ask it.
//  - Exact ops never narrow: ops that move or select values without arithmetic (copies,
//    cat, indexing, gather/scatter, padding, where, fill, ...) and ops that generate
//    integer sequences or random integers (arange, randperm, randint, random_).
//  - Index arguments (index, indices, target, offsets, ...) are addresses, not values:
//    they stay 64-bit.
//  - An integer scalar beyond the int32 range (a Python number, or a one-element int64
//    tensor) would wrap; such a call runs in 64 bits.
//  - Outputs typed on request (a `dtype=` or `out_int32=` argument) are not widened.
//  - When a kernel refuses the 32-bit form (raises), the call runs again in 64 bits.
//  - Results keep the dtype the 64-bit call gives: a float32 result of narrowed float64
//    operands becomes float64, an int32 one of narrowed int64 operands int64, and a complex64
//    one of narrowed float64 operands complex128 (a float64 tensor times a complex Python
//    number or a complex128 tensor is complex128, as on the CPU).
//  - A call mixing a 64-bit and a 32-bit operand of one kind (float64 and float32 or
//    complex64, int64 and int32; Python numbers aside) runs in 64 bits: narrowing would make the two dtypes equal,
//    hiding the kernel's dtype checks (mm of float64 and float32 raises, as on the CPU) and
//    its type promotion (a float32 tensor and a 0-dim float64 one make float32; an
//    accelerator kernel's float32 output stays float32 with float64 weights, as on CUDA).
//  - A call writing an argument whose memory may overlap another operand's (in place on
//    itself included) runs in 64 bits: narrowed copies share no memory, which would hide the
//    kernel's overlap checks and change what it computes on aliased memory.
#pragma once

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>
#include <c10/core/ScalarType.h>

#include <string>
#include <vector>

namespace torch_neuron {

bool compute_64bit_as_32bit();
// Changes the setting at run time (for tests and the conformance sweep).
void set_compute_64bit_as_32bit(bool value);

inline bool is_64bit(at::ScalarType type) { return type == at::kDouble || type == at::kLong; }
inline at::ScalarType narrow_64bit(at::ScalarType type) {
  return type == at::kDouble ? at::kFloat : type == at::kLong ? at::kInt : type;
}
// The dtype a result of a narrowed call takes back (see above); `narrowed_float` /
// `narrowed_int`: whether float64 / int64 operands were narrowed.
inline at::ScalarType widened_result(at::ScalarType type, bool narrowed_float, bool narrowed_int) {
  if (narrowed_float && type == at::kFloat) return at::kDouble;
  if (narrowed_float && type == at::kComplexFloat) return at::kComplexDouble;
  if (narrowed_int && type == at::kInt) return at::kLong;
  return type;
}

// The rule for one op, computed once per schema.
struct Narrowing {
  bool exact = false;                 // never narrowed (see above)
  std::vector<bool> value_argument;   // per schema argument: narrowed when 64-bit
  int dtype_argument = -1;            // the `dtype` / `out_int32` argument, or -1
};
const Narrowing& narrowing_for(const c10::FunctionSchema& schema);
// The same, by qualified name ("aten::add.Tensor"), for the compiler's pass.
const Narrowing& narrowing_for(const std::string& qualified_name);

// True when every integer scalar among `arguments` fits 32 bits.
bool scalars_fit_32bit(const c10::IValue* arguments, size_t count);
// True when the op's outputs were typed on request (their dtype is the caller's).
bool typed_on_request(const Narrowing& rule, const c10::IValue* arguments, size_t count);

}  // namespace torch_neuron
