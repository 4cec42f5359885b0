// Hot ops: unboxed kernels that call ATen's CPU kernels directly (no dispatcher
// round trip, no boxing) on host views of device memory. Functional and in-place
// forms of these structured ops reach the `.out` kernels below (PyTorch's
// generated default kernels allocate the output on neuron, then call `.out`).
#include <ATen/CPUFunctions.h>
#include <ATen/ExpandUtils.h>
#include <ATen/native/TypeProperties.h>

#include <tuple>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "../NeuronAllocator.h"
#include "../NeuronCommon.h"
#include "ZeroCopy.h"

namespace torch_neuron {
namespace {

// Runs `kernel(out_view, input_views...)` for an out= op: checks devices, makes host
// views, runs the kernel under a redirect, then gives `out` the metadata it set.
//
// Asynchronous mode (NEURON_LAUNCH_BLOCKING=0): the output's metadata is known
// before the work runs (PyTorch's structured wrappers allocate `out` with its
// final shape, and `expected` says what that shape and dtype are), so the kernel
// is enqueued on the current stream and the call returns at once. The task holds
// the neuron tensors, so their memory lives until it has run. When `out` would be
// resized, or `expected` is unknown, the stream is drained and the kernel runs here.
struct Expected {
  std::vector<int64_t> sizes;
  at::ScalarType dtype;
};

template <typename Kernel, typename... Tensors>
at::Tensor& run_out(const char* name, at::Tensor& out, const std::optional<Expected>& expected,
                    Kernel kernel, const Tensors&... inputs) {
  DeviceCheck check;
  (check.add(inputs, name), ...);
  check.add(out, name);
  auto& rt = runtime();
  const c10::DeviceIndex device = check.device >= 0 ? check.device : c10::DeviceIndex(rt.current_device());
  HostCall call;
  call.device = device;
  auto is_64bit_value = [](const at::Tensor& t) {
    return is_64bit(t.scalar_type()) && !t.unsafeGetTensorImpl()->is_wrapped_number();
  };
  if (compute_64bit_as_32bit() && (is_64bit(out.scalar_type()) || (is_64bit_value(inputs) || ...))) {
    // Note [64-bit as 32-bit]: 32-bit copies in, the 32-bit result widened into `out`.
    run_here_on(device);
    at::Tensor out_view = call.to_host(out);
    {
      AllocationRedirect redirect(device);
      auto narrow = [](const at::Tensor& t) {
        return is_64bit(t.scalar_type()) && !t.unsafeGetTensorImpl()->is_wrapped_number()
                   ? t.to(narrow_64bit(t.scalar_type()))
                   : t;
      };
      const bool wide_out = is_64bit(out.scalar_type());
      at::Tensor result = wide_out ? at::empty({0}, out_view.options().dtype(narrow_64bit(out.scalar_type())))
                                   : out_view;
      bool computed = false;
      try {
        kernel(result, narrow(call.to_host(inputs))...);
        computed = true;
      } catch (const c10::OutOfMemoryError&) {
        throw;
      } catch (const c10::Error&) {
        // the 32-bit form is refused: compute in 64 bits (Note [64-bit as 32-bit])
      }
      if (computed && wide_out) {
        if (out_view.sizes() != result.sizes()) out_view.resize_(result.sizes());
        out_view.copy_(result);
      } else if (!computed) {
        kernel(out_view, call.to_host(inputs)...);
      }
    }
    call.sync_argument(out, out_view);
    return out;
  }
  if (!rt.launch_blocking()) {
    auto& stream = current_stream(device);
    const bool same_device_inputs = ((inputs.device().type() == kNeuron) && ...);
    if (expected && same_device_inputs && out.sizes() == c10::IntArrayRef(expected->sizes) &&
        out.scalar_type() == expected->dtype) {
      auto views = std::make_tuple(call.to_host(out), call.to_host(inputs)...);
      auto keep_alive = std::make_tuple(out, inputs...);
      stream.enqueue([device, kernel, views, keep_alive]() mutable {
        AllocationRedirect redirect(device);
        std::apply(kernel, views);
      });
      return out;
    }
    NEURON_RT_CALL(stream.synchronize());
  }
  at::Tensor out_view = call.to_host(out);
  {
    AllocationRedirect redirect(device);
    kernel(out_view, call.to_host(inputs)...);
  }
  call.sync_argument(out, out_view);
  return out;
}

std::optional<Expected> same_as(const at::Tensor& a) { return Expected{a.sizes().vec(), a.scalar_type()}; }

std::optional<Expected> broadcast(const at::Tensor& a, const at::Tensor& b) {
  return Expected{at::infer_size(a.sizes(), b.sizes()), at::result_type(a, b)};
}

std::optional<Expected> float_broadcast(const at::Tensor& a, const at::Tensor& b) {
  auto type = at::result_type(a, b);
  if (!at::isFloatingType(type)) return std::nullopt;  // true division promotes: let the kernel decide
  return Expected{at::infer_size(a.sizes(), b.sizes()), type};
}

std::optional<Expected> matmul_2d(const at::Tensor& a, const at::Tensor& b) {
  if (a.dim() != 2 || b.dim() != 2 || a.scalar_type() != b.scalar_type()) return std::nullopt;
  return Expected{{a.size(0), b.size(1)}, a.scalar_type()};
}

std::optional<Expected> matmul_3d(const at::Tensor& a, const at::Tensor& b) {
  if (a.dim() != 3 || b.dim() != 3 || a.scalar_type() != b.scalar_type()) return std::nullopt;
  return Expected{{a.size(0), a.size(1), b.size(2)}, a.scalar_type()};
}

std::optional<Expected> floating_same_as(const at::Tensor& a) {
  if (!at::isFloatingType(a.scalar_type())) return std::nullopt;
  return same_as(a);
}

#define NEURON_HOT_OUT(counter_name, function, signature, ...)            \
  at::Tensor& function signature {                                        \
    static TrackedOp counter(counter_name, KernelPath::kHot);             \
    return run_tracked(counter, [&]() -> at::Tensor& { return __VA_ARGS__; }); \
  }

NEURON_HOT_OUT("aten::add.out", add_out,
               (const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha, at::Tensor& out),
               run_out("aten::add.out", out, broadcast(self, other),
                       [=](at::Tensor& o, const at::Tensor& a, const at::Tensor& b) { at::cpu::add_out(o, a, b, alpha); },
                       self, other))
NEURON_HOT_OUT("aten::sub.out", sub_out,
               (const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha, at::Tensor& out),
               run_out("aten::sub.out", out, broadcast(self, other),
                       [=](at::Tensor& o, const at::Tensor& a, const at::Tensor& b) { at::cpu::sub_out(o, a, b, alpha); },
                       self, other))
NEURON_HOT_OUT("aten::mul.out", mul_out, (const at::Tensor& self, const at::Tensor& other, at::Tensor& out),
               run_out("aten::mul.out", out, broadcast(self, other),
                       [=](at::Tensor& o, const at::Tensor& a, const at::Tensor& b) { at::cpu::mul_out(o, a, b); },
                       self, other))
NEURON_HOT_OUT("aten::div.out", div_out, (const at::Tensor& self, const at::Tensor& other, at::Tensor& out),
               run_out("aten::div.out", out, float_broadcast(self, other),
                       [=](at::Tensor& o, const at::Tensor& a, const at::Tensor& b) { at::cpu::div_out(o, a, b); },
                       self, other))
NEURON_HOT_OUT("aten::mm.out", mm_out, (const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out),
               run_out("aten::mm.out", out, matmul_2d(self, mat2),
                       [=](at::Tensor& o, const at::Tensor& a, const at::Tensor& b) { at::cpu::mm_out(o, a, b); },
                       self, mat2))
NEURON_HOT_OUT("aten::bmm.out", bmm_out, (const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out),
               run_out("aten::bmm.out", out, matmul_3d(self, mat2),
                       [=](at::Tensor& o, const at::Tensor& a, const at::Tensor& b) { at::cpu::bmm_out(o, a, b); },
                       self, mat2))
NEURON_HOT_OUT("aten::addmm.out", addmm_out,
               (const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2, const at::Scalar& beta,
                const at::Scalar& alpha, at::Tensor& out),
               run_out("aten::addmm.out", out, matmul_2d(mat1, mat2),
                       [=](at::Tensor& o, const at::Tensor& s, const at::Tensor& a, const at::Tensor& b) {
                         at::cpu::addmm_out(o, s, a, b, beta, alpha);
                       },
                       self, mat1, mat2))
NEURON_HOT_OUT("aten::silu.out", silu_out, (const at::Tensor& self, at::Tensor& out),
               run_out("aten::silu.out", out, floating_same_as(self), [=](at::Tensor& o, const at::Tensor& a) { at::cpu::silu_out(o, a); }, self))
NEURON_HOT_OUT("aten::neg.out", neg_out, (const at::Tensor& self, at::Tensor& out),
               run_out("aten::neg.out", out, same_as(self), [=](at::Tensor& o, const at::Tensor& a) { at::cpu::neg_out(o, a); }, self))
NEURON_HOT_OUT("aten::rsqrt.out", rsqrt_out, (const at::Tensor& self, at::Tensor& out),
               run_out("aten::rsqrt.out", out, floating_same_as(self), [=](at::Tensor& o, const at::Tensor& a) { at::cpu::rsqrt_out(o, a); }, self))
NEURON_HOT_OUT("aten::_softmax.out", softmax_out,
               (const at::Tensor& self, int64_t dim, bool half_to_float, at::Tensor& out),
               run_out("aten::_softmax.out", out, half_to_float ? std::nullopt : floating_same_as(self),
                       [=](at::Tensor& o, const at::Tensor& a) { at::cpu::_softmax_out(o, a, dim, half_to_float); }, self))
NEURON_HOT_OUT("aten::pow.Tensor_Scalar_out", pow_out,
               (const at::Tensor& self, const at::Scalar& exponent, at::Tensor& out),
               run_out("aten::pow.Tensor_Scalar_out", out, std::nullopt,
                       [=](at::Tensor& o, const at::Tensor& a) { at::cpu::pow_out(o, a, exponent); }, self))
NEURON_HOT_OUT("aten::mean.out", mean_out,
               (const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                std::optional<at::ScalarType> dtype, at::Tensor& out),
               run_out("aten::mean.out", out, std::nullopt,
                       [=](at::Tensor& o, const at::Tensor& a) { at::cpu::mean_out(o, a, dim, keepdim, dtype); }, self))

NEURON_HOT_OUT("aten::sin.out", sin_out, (const at::Tensor& self, at::Tensor& out),
               run_out("aten::sin.out", out, floating_same_as(self), [=](at::Tensor& o, const at::Tensor& a) { at::cpu::sin_out(o, a); }, self))
NEURON_HOT_OUT("aten::cos.out", cos_out, (const at::Tensor& self, at::Tensor& out),
               run_out("aten::cos.out", out, floating_same_as(self), [=](at::Tensor& o, const at::Tensor& a) { at::cpu::cos_out(o, a); }, self))
NEURON_HOT_OUT("aten::where.self_out", where_out,
               (const at::Tensor& condition, const at::Tensor& self, const at::Tensor& other, at::Tensor& out),
               run_out("aten::where.self_out", out, std::nullopt,
                       [=](at::Tensor& o, const at::Tensor& c, const at::Tensor& a, const at::Tensor& b) {
                         at::cpu::where_out(o, c, a, b);
                       },
                       condition, self, other))

// Functional forms of hot ops. Fast path (launch-blocking mode, all inputs on one neuron
// device, no 64-bit values): the CPU kernel computes the output's metadata once and
// allocates it under the redirect; the output is adopted. Otherwise the output is
// allocated with its expected metadata and the out= kernel above runs (asynchronous or
// 64-bit handling), or, when that metadata is not known, the generic path runs.
template <typename... Tensors>
bool fast_functional(const Tensors&... inputs) {
  auto plain = [](const at::Tensor& t) {
    if (t.device().type() == kNeuron) return !is_64bit(t.scalar_type());
    // a CPU scalar operand (`x * 2`, `1 - x`): 64-bit wrapped numbers are scalars, not values
    return t.device().is_cpu() && t.dim() == 0 &&
           (t.unsafeGetTensorImpl()->is_wrapped_number() || !is_64bit(t.scalar_type()));
  };
  return runtime().launch_blocking() && (plain(inputs) && ...);
}

// Options of the first neuron tensor among the inputs (a CPU scalar may come first).
template <typename... Tensors>
at::TensorOptions device_options(const Tensors&... inputs) {
  std::optional<at::TensorOptions> options;
  auto pick = [&](const at::Tensor& t) {
    if (!options && t.device().type() == kNeuron) options = t.options();
  };
  (pick(inputs), ...);
  return options ? *options : at::TensorOptions().device(kNeuron, runtime().current_device());
}

template <typename Functional, typename... Tensors>
at::Tensor run_fast(const char* name, Functional functional, const Tensors&... inputs) {
  DeviceCheck check;
  (check.add(inputs, name), ...);
  HostCall call;
  call.device = check.device;
  at::Tensor result;
  {
    AllocationRedirect redirect(call.device);
    result = functional(call.to_host(inputs)...);
  }
  return call.to_device(result);
}

template <typename... Args>
at::Tensor run_generic(const c10::OperatorHandle& op, const Args&... args) {
  torch::jit::Stack stack;
  torch::jit::push(stack, args...);
  run_zero_copy(op, &stack);
  return stack[0].toTensor();
}

#define NEURON_HOT_FUNCTIONAL(schema_name, overload, function, signature, fast_call, expected, out_call, ...) \
  at::Tensor function signature {                                                                        \
    static TrackedOp counter(overload[0] ? schema_name "." overload : schema_name, KernelPath::kHot);   \
    static const c10::OperatorHandle op =                                                                \
        c10::Dispatcher::singleton().findSchemaOrThrow(schema_name, overload);                           \
    return run_tracked(counter, [&]() -> at::Tensor {                                                    \
      if (fast_functional(__VA_ARGS__)) return run_fast(schema_name, fast_call, __VA_ARGS__);            \
      const std::optional<Expected> metadata = expected;                                                 \
      if (metadata) {                                                                                    \
        at::Tensor out = at::empty(metadata->sizes, device_options(__VA_ARGS__).dtype(metadata->dtype)); \
        return out_call;                                                                                 \
      }                                                                                                  \
      return run_generic(op, __VA_ARGS__ GENERIC_EXTRA_ARGS);                                            \
    });                                                                                                  \
  }

#define GENERIC_EXTRA_ARGS
NEURON_HOT_FUNCTIONAL("aten::mm", "", mm, (const at::Tensor& self, const at::Tensor& mat2),
                      [](const at::Tensor& a, const at::Tensor& b) { return at::cpu::mm(a, b); },
                      matmul_2d(self, mat2), mm_out(self, mat2, out), self, mat2)
NEURON_HOT_FUNCTIONAL("aten::bmm", "", bmm, (const at::Tensor& self, const at::Tensor& mat2),
                      [](const at::Tensor& a, const at::Tensor& b) { return at::cpu::bmm(a, b); },
                      matmul_3d(self, mat2), bmm_out(self, mat2, out), self, mat2)
NEURON_HOT_FUNCTIONAL("aten::mul", "Tensor", mul, (const at::Tensor& self, const at::Tensor& other),
                      [](const at::Tensor& a, const at::Tensor& b) { return at::cpu::mul(a, b); },
                      broadcast(self, other), mul_out(self, other, out), self, other)
NEURON_HOT_FUNCTIONAL("aten::silu", "", silu, (const at::Tensor& self),
                      [](const at::Tensor& a) { return at::cpu::silu(a); },
                      floating_same_as(self), silu_out(self, out), self)
NEURON_HOT_FUNCTIONAL("aten::neg", "", neg, (const at::Tensor& self),
                      [](const at::Tensor& a) { return at::cpu::neg(a); },
                      same_as(self), neg_out(self, out), self)
NEURON_HOT_FUNCTIONAL("aten::rsqrt", "", rsqrt, (const at::Tensor& self),
                      [](const at::Tensor& a) { return at::cpu::rsqrt(a); },
                      floating_same_as(self), rsqrt_out(self, out), self)
NEURON_HOT_FUNCTIONAL("aten::cos", "", cos, (const at::Tensor& self),
                      [](const at::Tensor& a) { return at::cpu::cos(a); },
                      floating_same_as(self), cos_out(self, out), self)
NEURON_HOT_FUNCTIONAL("aten::sin", "", sin, (const at::Tensor& self),
                      [](const at::Tensor& a) { return at::cpu::sin(a); },
                      floating_same_as(self), sin_out(self, out), self)
#undef GENERIC_EXTRA_ARGS

// add / sub carry alpha; softmax its dim: written out in full.
template <at::Tensor (*cpu_kernel)(const at::Tensor&, const at::Tensor&, const at::Scalar&),
          at::Tensor& (*out_kernel)(const at::Tensor&, const at::Tensor&, const at::Scalar&, at::Tensor&)>
at::Tensor binary_with_alpha(TrackedOp& counter, const c10::OperatorHandle& op, const at::Tensor& self,
                             const at::Tensor& other, const at::Scalar& alpha) {
  return run_tracked(counter, [&]() -> at::Tensor {
    if (fast_functional(self, other)) {
      return run_fast(op.schema().name().c_str(),
                      [&](const at::Tensor& a, const at::Tensor& b) { return cpu_kernel(a, b, alpha); }, self, other);
    }
    if (auto metadata = broadcast(self, other)) {
      at::Tensor out = at::empty(metadata->sizes, device_options(self, other).dtype(metadata->dtype));
      return out_kernel(self, other, alpha, out);
    }
    return run_generic(op, self, other, alpha);
  });
}

at::Tensor add(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  static TrackedOp counter("aten::add.Tensor", KernelPath::kHot);
  static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::add", "Tensor");
  return binary_with_alpha<&at::cpu::add, &add_out>(counter, op, self, other, alpha);
}

at::Tensor sub(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  static TrackedOp counter("aten::sub.Tensor", KernelPath::kHot);
  static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::sub", "Tensor");
  return binary_with_alpha<&at::cpu::sub, &sub_out>(counter, op, self, other, alpha);
}

at::Tensor softmax(const at::Tensor& self, int64_t dim, bool half_to_float) {
  static TrackedOp counter("aten::_softmax", KernelPath::kHot);
  static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::_softmax", "");
  return run_tracked(counter, [&]() -> at::Tensor {
    if (fast_functional(self)) {
      return run_fast("aten::_softmax", [&](const at::Tensor& a) { return at::cpu::_softmax(a, dim, half_to_float); },
                      self);
    }
    if (auto metadata = half_to_float ? std::nullopt : floating_same_as(self)) {
      at::Tensor out = at::empty(metadata->sizes, self.options().dtype(metadata->dtype));
      return softmax_out(self, dim, half_to_float, out);
    }
    return run_generic(op, self, dim, half_to_float);
  });
}

// Fast path or the generic path (no out= form worth taking for these).
at::Tensor pow_scalar(const at::Tensor& self, const at::Scalar& exponent) {
  static TrackedOp counter("aten::pow.Tensor_Scalar", KernelPath::kHot);
  static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::pow", "Tensor_Scalar");
  return run_tracked(counter, [&]() -> at::Tensor {
    if (fast_functional(self)) {
      return run_fast("aten::pow", [&](const at::Tensor& a) { return at::cpu::pow(a, exponent); }, self);
    }
    return run_generic(op, self, exponent);
  });
}

at::Tensor mean_dim(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                    std::optional<at::ScalarType> dtype) {
  static TrackedOp counter("aten::mean.dim", KernelPath::kHot);
  static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::mean", "dim");
  return run_tracked(counter, [&]() -> at::Tensor {
    if (fast_functional(self)) {
      return run_fast("aten::mean", [&](const at::Tensor& a) { return at::cpu::mean(a, dim, keepdim, dtype); }, self);
    }
    return run_generic(op, self, dim, keepdim, dtype);
  });
}

at::Tensor argmax(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim) {
  static TrackedOp counter("aten::argmax", KernelPath::kHot);
  static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::argmax", "");
  return run_tracked(counter, [&]() -> at::Tensor {
    if (fast_functional(self)) {
      return run_fast("aten::argmax", [&](const at::Tensor& a) { return at::cpu::argmax(a, dim, keepdim); }, self);
    }
    return run_generic(op, self, dim, keepdim);
  });
}

at::Tensor cat(const at::ITensorListRef& tensors, int64_t dim) {
  static TrackedOp counter("aten::cat", KernelPath::kHot);
  return run_tracked(counter, [&]() -> at::Tensor {
    DeviceCheck check;
    for (const at::Tensor& tensor : tensors) check.add(tensor, "aten::cat");
    HostCall call;
    call.device = run_here_on(check.device);  // data movement: exact in 64 bits
    std::vector<at::Tensor> views;
    for (const at::Tensor& tensor : tensors) views.push_back(call.to_host(tensor));
    at::Tensor result;
    {
      AllocationRedirect redirect(call.device);
      result = at::cpu::cat(views, dim);
    }
    return call.to_device(result);
  });
}

// Data movement (no arithmetic, so no 64-bit narrowing): run on host views in place.
struct Inline {
  HostCall call;
  explicit Inline(c10::DeviceIndex device) { call.device = run_here_on(device); }
};

at::Tensor& cat_out(const at::ITensorListRef& tensors, int64_t dim, at::Tensor& out) {
  static TrackedOp counter("aten::cat.out", KernelPath::kHot);
  return run_tracked(counter, [&]() -> at::Tensor& {
    DeviceCheck check;
    for (const at::Tensor& tensor : tensors) check.add(tensor, "aten::cat.out");
    check.add(out, "aten::cat.out");
    Inline run(check.device);
    std::vector<at::Tensor> views;
    for (const at::Tensor& tensor : tensors) views.push_back(run.call.to_host(tensor));
    at::Tensor out_view = run.call.to_host(out);
    {
      AllocationRedirect redirect(run.call.device);
      at::cpu::cat_out(out_view, views, dim);
    }
    run.call.sync_argument(out, out_view);
    return out;
  });
}

at::Tensor index_select(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  static TrackedOp counter("aten::index_select", KernelPath::kHot);
  return run_tracked(counter, [&]() -> at::Tensor {
    DeviceCheck check;
    check.add(self, "aten::index_select");
    check.add(index, "aten::index_select");
    Inline run(check.device);
    at::Tensor result;
    {
      AllocationRedirect redirect(run.call.device);
      result = at::cpu::index_select(run.call.to_host(self), dim, run.call.to_host(index));
    }
    return run.call.to_device(result);
  });
}

at::Tensor& fill_scalar(at::Tensor& self, const at::Scalar& value) {
  static TrackedOp counter("aten::fill_.Scalar", KernelPath::kHot);
  return run_tracked(counter, [&]() -> at::Tensor& {
    Inline run(self.device().index());
    at::Tensor view = run.call.to_host(self);
    at::cpu::fill_(view, value);
    return self;
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
