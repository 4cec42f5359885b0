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
//  - An integer scalar beyond the int32 range (a Python number: an int or Scalar argument,
//    or the tensor PyTorch wraps it in) would wrap; such a call runs in 64 bits. Tensors are
//    never scalars here, whatever their size: a one-element tensor wraps like any other.
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
//  - Operands that are the same view of memory (in place, out= an input) share one narrowed
//    copy, so the kernel sees them alias as on the CPU. A call writing an argument that
//    overlaps another operand in part runs in 64 bits: narrowed copies share no memory, which
//    would hide the kernel's overlap checks.
#pragma once

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>
#include <c10/core/ScalarType.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <tuple>
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
  std::vector<bool> index_argument;   // per schema argument: an index (address), never narrowed
  int dtype_argument = -1;            // the `dtype` / `out_int32` argument, or -1
};
const Narrowing& narrowing_for(const c10::FunctionSchema& schema);
// The same, by qualified name ("aten::add.Tensor"), for the compiler's pass.
const Narrowing& narrowing_for(const std::string& qualified_name);

// How a call with 64-bit values (a float64 or int64 tensor among its non-index arguments) was
// computed: in 32 bits, or in 64 bits and why. Counted per op (Width64Calls), so that a report
// can say op by op which ops wrap and which are exact (COVERAGE.md's 64-bit column).
enum class Width64 : int {
  k32Bit,          // narrowed: values wrap / round as on the device
  kDataMovement,   // an exact op (moves or selects values)
  kOnCpu,          // TorchNeuron runs the op on the CPU
  kMixedWidths,    // 64-bit and 32-bit operands of one kind
  kLargeScalar,    // an integer scalar beyond 32 bits
  kAliased,        // a written argument overlaps another operand
  kRefused,        // the kernel refused the 32-bit form
  kNative,         // NEURON_SIM_NATIVE_64BIT=1
  kNotAten,        // a custom op: run as it is
  kCount
};
const char* width64_name(Width64 how);

// One op's counters. Thread safety: count() may be called from any thread at once.
struct Width64Calls {
  std::string op;
  std::atomic<uint64_t> calls[int(Width64::kCount)] = {};
  void count(Width64 how) { calls[int(how)].fetch_add(1, std::memory_order_relaxed); }
};
// The counters of `op` ("aten::max.dim_max"), made on first use; the reference stays valid.
Width64Calls& width64_calls(const std::string& op);
// Every op with counted calls: (op, how, count) for each nonzero counter.
std::vector<std::tuple<std::string, std::string, uint64_t>> width64_counts();
void clear_width64_counts();

// True when every integer scalar among `arguments` (ints, Scalars, wrapped numbers) fits 32
// bits. Reads no tensor's memory.
bool scalars_fit_32bit(const c10::IValue* arguments, size_t count);
// True when the op's outputs were typed on request (their dtype is the caller's).
bool typed_on_request(const Narrowing& rule, const c10::IValue* arguments, size_t count);

}  // namespace torch_neuron
