// Hot ops: the eager registrations of Note [Direct kernels] (DirectKernels.h, which has the
// kernels, shared with compiled programs). Each wrapper runs its direct kernel unboxed (no
// dispatcher round trip, no boxing) on host views of device memory, for the common case:
// launch-blocking mode (or a small call on an idle stream in asynchronous mode) and operands
// that need no 64-bit narrowing. Any other call (queued, 64-bit values) takes the generic path
// (Generic.cpp), which holds the one 64-bit rule (Dtype64.h) and queues kernels with metadata
// from ATen's meta functions (Note [Asynchronous kernels]).
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "../NeuronAllocator.h"
#include "../NeuronCommon.h"
#include "DirectKernels.h"
#include "SmallMatmul.h"
#include "../Dtype64.h"
#include "../HostViews.h"
#include "../Launch.h"
#include "../OpTracking.h"
#include "Generic.h"
#include "KernelBody.h"

namespace torch_neuron {
namespace {

// True when the call may take the direct path: every operand a neuron tensor without 64-bit
// values or a CPU scalar (`x * 2`, `1 - x`); launch-blocking mode, or asynchronous mode for
// a small call whose stream has nothing pending (Note [Small ops on an idle stream]).
template <typename... Tensors>
bool direct(const Tensors&... operands) {
  if (!runtime().launch_blocking()) {
    int64_t bytes = 0;
    c10::DeviceIndex device = -1;
    auto count = [&](const at::Tensor& t) {
      bytes += bytes_of(t);
      if (device < 0 && t.defined() && t.device().type() == kNeuron) device = t.device().index();
    };
    (count(operands), ...);
    if (device < 0 || !runs_at_call_when_idle(bytes, device)) return false;
  }
  const bool narrow = compute_64bit_as_32bit();
  auto plain = [narrow](const at::Tensor& t) {
    if (t.device().type() == kNeuron) return !narrow || !is_64bit(t.scalar_type());
    return t.device().is_cpu() && t.dim() == 0 &&
           (t.unsafeGetTensorImpl()->is_wrapped_number() || !narrow || !is_64bit(t.scalar_type()));
  };
  return (plain(operands) && ...);
}

// The CPU kernel computes the output (allocated under the redirect), which is adopted.
template <typename Functional, typename... Tensors>
at::Tensor run_direct(const char* name, Functional functional, const Tensors&... inputs) {
  DeviceCheck check;
  (check.add(inputs, name), ...);
  HostCall call;
  call.device = check.device >= 0 ? check.device : c10::DeviceIndex(runtime().current_device());
  at::Tensor result;
  {
    AllocationRedirect redirect(call.device);
    result = functional(call.to_host(inputs)...);
  }
  result = call.to_device(result);
  note_launch(LaunchPath::kDirect, name, call.device, LaunchOperands::of(operand_pointers(inputs...), result));
  return result;
}

// The out= kernel writes into the host view of `out`, whose device tensor then takes the
// metadata the kernel set (a resize).
template <typename Kernel, typename... Tensors>
at::Tensor& run_direct_out(const char* name, at::Tensor& out, Kernel kernel, const Tensors&... inputs) {
  DeviceCheck check;
  (check.add(inputs, name), ...);
  check.add(out, name);
  HostCall call;
  call.device = check.device >= 0 ? check.device : c10::DeviceIndex(runtime().current_device());
  at::Tensor out_view = call.to_host(out);
  {
    AllocationRedirect redirect(call.device);
    kernel(out_view, call.to_host(inputs)...);
  }
  call.sync_argument(out, out_view);
  note_launch(LaunchPath::kDirect, name, call.device, LaunchOperands::of(operand_pointers(inputs...), out));
  return out;
}

template <typename... Args>
torch::jit::Stack run_generic_stack(const c10::OperatorHandle& op, const Args&... args) {
  torch::jit::Stack stack;
  torch::jit::push(stack, args...);
  run_zero_copy(op, &stack);
  return stack;
}

template <typename... Args>
at::Tensor run_generic(const c10::OperatorHandle& op, const Args&... args) {
  return run_generic_stack(op, args...)[0].toTensor();
}

#define NEURON_OP(schema_name, overload)                                                                  \
  static TrackedOp tracked(overload[0] ? schema_name "." overload : schema_name, KernelPath::kHot); \
  static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(schema_name, overload)

// Functional hot ops: the direct kernel on the direct path, the generic path otherwise.
#define NEURON_HOT_FUNCTIONAL(schema_name, overload, function, signature, cpu_call, ...)          \
  at::Tensor function signature {                                                                \
    NEURON_OP(schema_name, overload);                                                            \
    return run_tracked(tracked, [&]() -> at::Tensor {                                            \
      if (direct(__VA_ARGS__)) return run_direct(schema_name, cpu_call, __VA_ARGS__);            \
      return run_generic(op, __VA_ARGS__);                                                       \
    });                                                                                          \
  }

// Note [Small bfloat16 matmuls]: a small bfloat16 product runs oneDNN's brgemm kernel
// directly, with at::mm's bits. Its shape is probed (once per process) here, before the
// allocation redirect, so that the probe's own tensors stay in host memory.
at::Tensor mm(const at::Tensor& self, const at::Tensor& mat2) {
  NEURON_OP("aten::mm", "");
  return run_tracked(tracked, [&]() -> at::Tensor {
    if (!direct(self, mat2)) return run_generic(op, self, mat2);
    const bool small = small_matmul_suits(self, mat2);  // the probe, outside the redirect
    return run_direct("aten::mm", [small](const at::Tensor& a, const at::Tensor& b) { return direct::mm(a, b, small); },
                      self, mat2);
  });
}
NEURON_HOT_FUNCTIONAL("aten::bmm", "", bmm, (const at::Tensor& self, const at::Tensor& mat2),
                      direct::bmm, self, mat2)
NEURON_HOT_FUNCTIONAL("aten::mul", "Tensor", mul, (const at::Tensor& self, const at::Tensor& other),
                      direct::mul, self, other)
NEURON_HOT_FUNCTIONAL("aten::silu", "", silu, (const at::Tensor& self),
                      direct::silu, self)
NEURON_HOT_FUNCTIONAL("aten::neg", "", neg, (const at::Tensor& self),
                      direct::neg, self)
NEURON_HOT_FUNCTIONAL("aten::rsqrt", "", rsqrt, (const at::Tensor& self),
                      direct::rsqrt, self)
NEURON_HOT_FUNCTIONAL("aten::cos", "", cos, (const at::Tensor& self),
                      direct::cos, self)
NEURON_HOT_FUNCTIONAL("aten::sin", "", sin, (const at::Tensor& self),
                      direct::sin, self)

// Hot ops with non-tensor arguments: written out in full.
at::Tensor add(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  NEURON_OP("aten::add", "Tensor");
  return run_tracked(tracked, [&]() -> at::Tensor {
    if (direct(self, other)) {
      return run_direct("aten::add", [&](const at::Tensor& a, const at::Tensor& b) { return direct::add(a, b, alpha); },
                        self, other);
    }
    return run_generic(op, self, other, alpha);
  });
}

at::Tensor sub(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  NEURON_OP("aten::sub", "Tensor");
  return run_tracked(tracked, [&]() -> at::Tensor {
    if (direct(self, other)) {
      return run_direct("aten::sub", [&](const at::Tensor& a, const at::Tensor& b) { return direct::sub(a, b, alpha); },
                        self, other);
    }
    return run_generic(op, self, other, alpha);
  });
}

at::Tensor softmax(const at::Tensor& self, int64_t dim, bool half_to_float) {
  NEURON_OP("aten::_softmax", "");
  return run_tracked(tracked, [&]() -> at::Tensor {
    if (direct(self)) {
      return run_direct("aten::_softmax", [&](const at::Tensor& a) { return direct::softmax(a, dim, half_to_float); },
                        self);
    }
    return run_generic(op, self, dim, half_to_float);
  });
}

at::Tensor pow_scalar(const at::Tensor& self, const at::Scalar& exponent) {
  NEURON_OP("aten::pow", "Tensor_Scalar");
  return run_tracked(tracked, [&]() -> at::Tensor {
    if (direct(self)) return run_direct("aten::pow", [&](const at::Tensor& a) { return direct::pow(a, exponent); }, self);
    return run_generic(op, self, exponent);
  });
}

at::Tensor mean_dim(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                    std::optional<at::ScalarType> dtype) {
  NEURON_OP("aten::mean", "dim");
  return run_tracked(tracked, [&]() -> at::Tensor {
    if (direct(self)) {
      return run_direct("aten::mean", [&](const at::Tensor& a) { return direct::mean(a, dim, keepdim, dtype); }, self);
    }
    return run_generic(op, self, dim, keepdim, dtype);
  });
}

at::Tensor argmax(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim) {
  NEURON_OP("aten::argmax", "");
  return run_tracked(tracked, [&]() -> at::Tensor {
    if (direct(self)) {
      return run_direct("aten::argmax", [&](const at::Tensor& a) { return direct::argmax(a, dim, keepdim); }, self);
    }
    return run_generic(op, self, dim, keepdim);
  });
}

// Data movement: exact in 64 bits (Dtype64.h), so any dtype takes the direct path.
at::Tensor cat(const at::ITensorListRef& tensors, int64_t dim) {
  NEURON_OP("aten::cat", "");
  return run_tracked(tracked, [&]() -> at::Tensor {
    std::vector<at::Tensor> list(tensors.begin(), tensors.end());
    if (runtime().launch_blocking()) {
      DeviceCheck check;
      for (const at::Tensor& tensor : list) check.add(tensor, "aten::cat");
      HostCall call;
      call.device = run_here_on(check.device);
      std::vector<at::Tensor> views;
      for (const at::Tensor& tensor : list) views.push_back(call.to_host(tensor));
      at::Tensor result;
      {
        AllocationRedirect redirect(call.device);
        result = direct::cat(views, dim);
      }
      result = call.to_device(result);
      note_launch(LaunchPath::kDirect, "aten::cat", call.device, LaunchOperands::of_tensors(list, result));
      return result;
    }
    return run_generic(op, list, dim);
  });
}

at::Tensor index_select(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  NEURON_OP("aten::index_select", "");
  return run_tracked(tracked, [&]() -> at::Tensor {
    if (runtime().launch_blocking()) {
      return run_direct("aten::index_select",
                        [&](const at::Tensor& a, const at::Tensor& i) { return direct::index_select(a, dim, i); },
                        self, index);
    }
    return run_generic(op, self, dim, index);
  });
}

at::Tensor& fill_scalar(at::Tensor& self, const at::Scalar& value) {
  NEURON_OP("aten::fill_", "Scalar");
  return run_tracked(tracked, [&]() -> at::Tensor& {
    if (runtime().launch_blocking()) {
      HostCall call;
      call.device = self.device().index();
      note_launch(LaunchPath::kDirect, "aten::fill_", call.device, LaunchOperands::of_tensors({}, self));
      at::Tensor view = call.to_host(self);
      direct::fill_(view, value);
      return self;
    }
    run_generic_stack(op, self, value);
    return self;
  });
}

// A static KV cache's update. Without its own registration PyTorch's non-functional composite
// ran index_copy (a copy of the whole destination) and copy_ back (another): two full copies of
// the cache per layer and step where the op writes one position.
at::Tensor& index_copy_inplace(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source) {
  NEURON_OP("aten::index_copy_", "");
  return run_tracked(tracked, [&]() -> at::Tensor& {
    check_scatter_in_place("aten::index_copy_", self, {&index, &source});
    // The index is never narrowed (Dtype64.h): only self and source decide.
    if (runtime().launch_blocking() && direct(self, source)) {
      DeviceCheck check;
      check.add(self, "aten::index_copy_");
      check.add(index, "aten::index_copy_");
      check.add(source, "aten::index_copy_");
      HostCall call;
      call.device = self.device().index();
      at::Tensor view = call.to_host(self);
      direct::index_copy_(view, dim, call.to_host(index), call.to_host(source));
      note_launch(LaunchPath::kDirect, "aten::index_copy_", call.device,
                  LaunchOperands::of_tensors({self, index, source}, self));
      return self;
    }
    run_generic_stack(op, self, dim, index, source);
    return self;
  });
}

// out= forms (PyTorch's structured wrappers and in-place ops reach these).
#define NEURON_HOT_OUT(schema_name, overload, function, signature, kernel, ...)                  \
  at::Tensor& function signature {                                                             \
    NEURON_OP(schema_name, overload);                                                          \
    return run_tracked(tracked, [&]() -> at::Tensor& {                                         \
      if (direct(out, __VA_ARGS__)) return run_direct_out(schema_name, out, kernel, __VA_ARGS__); \
      run_generic_stack(op, GENERIC_ARGS);                                                     \
      return out;                                                                              \
    });                                                                                        \
  }

#define GENERIC_ARGS self, other, alpha, out
NEURON_HOT_OUT("aten::add", "out", add_out,
               (const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha, at::Tensor& out),
               [&](at::Tensor& o, const at::Tensor& a, const at::Tensor& b) { direct::add_out(o, a, b, alpha); },
               self, other)
NEURON_HOT_OUT("aten::sub", "out", sub_out,
               (const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha, at::Tensor& out),
               [&](at::Tensor& o, const at::Tensor& a, const at::Tensor& b) { direct::sub_out(o, a, b, alpha); },
               self, other)
#undef GENERIC_ARGS
#define GENERIC_ARGS self, other, out
NEURON_HOT_OUT("aten::mul", "out", mul_out, (const at::Tensor& self, const at::Tensor& other, at::Tensor& out),
               direct::mul_out, self, other)
NEURON_HOT_OUT("aten::div", "out", div_out, (const at::Tensor& self, const at::Tensor& other, at::Tensor& out),
               direct::div_out, self, other)
#undef GENERIC_ARGS
#define GENERIC_ARGS self, mat2, out
NEURON_HOT_OUT("aten::mm", "out", mm_out, (const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out),
               [](at::Tensor& o, const at::Tensor& a, const at::Tensor& b) { direct::mm_out(o, a, b, /*small=*/false); },
               self, mat2)
NEURON_HOT_OUT("aten::bmm", "out", bmm_out, (const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out),
               direct::bmm_out, self, mat2)
#undef GENERIC_ARGS
#define GENERIC_ARGS self, mat1, mat2, beta, alpha, out
NEURON_HOT_OUT("aten::addmm", "out", addmm_out,
               (const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2, const at::Scalar& beta,
                const at::Scalar& alpha, at::Tensor& out),
               [&](at::Tensor& o, const at::Tensor& s, const at::Tensor& a, const at::Tensor& b) {
                 direct::addmm_out(o, s, a, b, beta, alpha);
               },
               self, mat1, mat2)
#undef GENERIC_ARGS
#define GENERIC_ARGS self, out
NEURON_HOT_OUT("aten::silu", "out", silu_out, (const at::Tensor& self, at::Tensor& out),
               direct::silu_out, self)
NEURON_HOT_OUT("aten::neg", "out", neg_out, (const at::Tensor& self, at::Tensor& out),
               direct::neg_out, self)
NEURON_HOT_OUT("aten::rsqrt", "out", rsqrt_out, (const at::Tensor& self, at::Tensor& out),
               direct::rsqrt_out, self)
NEURON_HOT_OUT("aten::sin", "out", sin_out, (const at::Tensor& self, at::Tensor& out),
               direct::sin_out, self)
NEURON_HOT_OUT("aten::cos", "out", cos_out, (const at::Tensor& self, at::Tensor& out),
               direct::cos_out, self)
#undef GENERIC_ARGS
#define GENERIC_ARGS self, dim, half_to_float, out
NEURON_HOT_OUT("aten::_softmax", "out", softmax_out,
               (const at::Tensor& self, int64_t dim, bool half_to_float, at::Tensor& out),
               [&](at::Tensor& o, const at::Tensor& a) { direct::softmax_out(o, a, dim, half_to_float); }, self)
#undef GENERIC_ARGS
#define GENERIC_ARGS self, exponent, out
NEURON_HOT_OUT("aten::pow", "Tensor_Scalar_out", pow_out,
               (const at::Tensor& self, const at::Scalar& exponent, at::Tensor& out),
               [&](at::Tensor& o, const at::Tensor& a) { direct::pow_out(o, a, exponent); }, self)
#undef GENERIC_ARGS
#define GENERIC_ARGS self, dim, keepdim, dtype, out
NEURON_HOT_OUT("aten::mean", "out", mean_out,
               (const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                std::optional<at::ScalarType> dtype, at::Tensor& out),
               [&](at::Tensor& o, const at::Tensor& a) { direct::mean_out(o, a, dim, keepdim, dtype); }, self)
#undef GENERIC_ARGS
#define GENERIC_ARGS condition, self, other, out
NEURON_HOT_OUT("aten::where", "self_out", where_out,
               (const at::Tensor& condition, const at::Tensor& self, const at::Tensor& other, at::Tensor& out),
               [](at::Tensor& o, const at::Tensor& c, const at::Tensor& a, const at::Tensor& b) {
                 direct::where_out(o, c, a, b);
               },
               condition, self, other)
#undef GENERIC_ARGS

at::Tensor& cat_out(const at::ITensorListRef& tensors, int64_t dim, at::Tensor& out) {
  NEURON_OP("aten::cat", "out");
  return run_tracked(tracked, [&]() -> at::Tensor& {
    std::vector<at::Tensor> list(tensors.begin(), tensors.end());
    if (runtime().launch_blocking()) {
      DeviceCheck check;
      for (const at::Tensor& tensor : list) check.add(tensor, "aten::cat.out");
      check.add(out, "aten::cat.out");
      HostCall call;
      call.device = run_here_on(check.device);
      std::vector<at::Tensor> views;
      for (const at::Tensor& tensor : list) views.push_back(call.to_host(tensor));
      at::Tensor out_view = call.to_host(out);
      {
        AllocationRedirect redirect(call.device);
        direct::cat_out(out_view, views, dim);
      }
      call.sync_argument(out, out_view);
      note_launch(LaunchPath::kDirect, "aten::cat.out", call.device, LaunchOperands::of_tensors(list, out));
      return out;
    }
    run_generic_stack(op, list, dim, out);
    return out;
  });
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("mm", TORCH_FN(mm));
  m.impl("bmm", TORCH_FN(bmm));
  m.impl("mul.Tensor", TORCH_FN(mul));
  m.impl("add.Tensor", TORCH_FN(add));
  m.impl("sub.Tensor", TORCH_FN(sub));
  m.impl("silu", TORCH_FN(silu));
  m.impl("neg", TORCH_FN(neg));
  m.impl("rsqrt", TORCH_FN(rsqrt));
  m.impl("cos", TORCH_FN(cos));
  m.impl("sin", TORCH_FN(sin));
  m.impl("_softmax", TORCH_FN(softmax));
  m.impl("pow.Tensor_Scalar", TORCH_FN(pow_scalar));
  m.impl("mean.dim", TORCH_FN(mean_dim));
  m.impl("argmax", TORCH_FN(argmax));
  m.impl("cat", TORCH_FN(cat));
  m.impl("sin.out", TORCH_FN(sin_out));
  m.impl("cos.out", TORCH_FN(cos_out));
  m.impl("where.self_out", TORCH_FN(where_out));
  m.impl("cat.out", TORCH_FN(cat_out));
  m.impl("index_select", TORCH_FN(index_select));
  m.impl("fill_.Scalar", TORCH_FN(fill_scalar));
  m.impl("index_copy_", TORCH_FN(index_copy_inplace));
  m.impl("add.out", TORCH_FN(add_out));
  m.impl("sub.out", TORCH_FN(sub_out));
  m.impl("mul.out", TORCH_FN(mul_out));
  m.impl("div.out", TORCH_FN(div_out));
  m.impl("mm.out", TORCH_FN(mm_out));
  m.impl("bmm.out", TORCH_FN(bmm_out));
  m.impl("addmm.out", TORCH_FN(addmm_out));
  m.impl("silu.out", TORCH_FN(silu_out));
  m.impl("neg.out", TORCH_FN(neg_out));
  m.impl("rsqrt.out", TORCH_FN(rsqrt_out));
  m.impl("_softmax.out", TORCH_FN(softmax_out));
  m.impl("pow.Tensor_Scalar_out", TORCH_FN(pow_out));
  m.impl("mean.out", TORCH_FN(mean_out));
}

}  // namespace
}  // namespace torch_neuron
