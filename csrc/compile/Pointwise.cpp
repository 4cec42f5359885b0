// Note [Fused pointwise kernels] (Pointwise.h).
#include "Pointwise.h"

#include <ATen/TensorIterator.h>
#include <c10/util/BFloat16.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "runtime/error.h"

namespace torch_neuron {
namespace {

constexpr int kChunk = 64;
constexpr int kMaxRegisters = int(neuron_rt::kPointwiseMaxRegisters);
constexpr size_t kFields = neuron_rt::kPointwiseFields;

// float16 is not fused (fusion.py): some of ATen's half kernels round scalar operands first.
bool float_kind(at::ScalarType t) { return t == at::kFloat || t == at::kBFloat16; }

bool loadable(at::ScalarType t) { return float_kind(t) || t == at::kBool; }

inline float round_to(float v, at::ScalarType t) {
  switch (t) {
    case at::kBFloat16: return static_cast<float>(c10::BFloat16(v));
    default: return v;
  }
}

void load(const char* base, int64_t stride, int64_t n, at::ScalarType t, float* to) {
  switch (t) {
    case at::kFloat:
      for (int64_t j = 0; j < n; ++j) to[j] = *reinterpret_cast<const float*>(base + j * stride);
      break;
    case at::kBFloat16:
      for (int64_t j = 0; j < n; ++j) to[j] = static_cast<float>(*reinterpret_cast<const c10::BFloat16*>(base + j * stride));
      break;
    case at::kBool:
      for (int64_t j = 0; j < n; ++j) to[j] = *reinterpret_cast<const bool*>(base + j * stride) ? 1.f : 0.f;
      break;
    default:
      TORCH_INTERNAL_ASSERT(false, "neuron::pointwise: cannot load ", t);
  }
}

void store(char* base, int64_t stride, int64_t n, at::ScalarType t, const float* from) {
  switch (t) {
    case at::kFloat:
      for (int64_t j = 0; j < n; ++j) *reinterpret_cast<float*>(base + j * stride) = from[j];
      break;
    case at::kBFloat16:
      for (int64_t j = 0; j < n; ++j) *reinterpret_cast<c10::BFloat16*>(base + j * stride) = c10::BFloat16(from[j]);
      break;
    default:
      TORCH_INTERNAL_ASSERT(false, "neuron::pointwise: cannot store ", t);
  }
}

}  // namespace

void check_pointwise_code(const PointwiseCode& code, const std::string& program) {
  try {
    neuron_rt::check_pointwise_code(code.inputs, code.code, code.scalars);
  } catch (const neuron_rt::Error& error) {
    TORCH_CHECK(false, "program ", program, ": ", error.what());
  }
}

void run_pointwise(const at::Tensor& out, const std::vector<at::Tensor>& inputs, const PointwiseCode& code) {
  TORCH_CHECK(float_kind(out.scalar_type()), "neuron::pointwise: output dtype ", out.scalar_type());
  for (const auto& input : inputs) {
    TORCH_CHECK(loadable(input.scalar_type()), "neuron::pointwise: input dtype ", input.scalar_type());
  }
  at::TensorIteratorConfig config;
  config.set_check_mem_overlap(false)
      .check_all_same_dtype(false)
      .resize_outputs(false)
      .promote_inputs_to_common_dtype(false)
      .enforce_safe_casting_to_output(false);
  config.add_output(out);
  for (const auto& input : inputs) config.add_const_input(input);
  auto iter = config.build();
  const int n_inputs = code.inputs;
  const size_t count = code.code.size() / kFields;
  std::vector<at::ScalarType> input_types;
  for (const auto& input : inputs) input_types.push_back(input.scalar_type());
  const at::ScalarType out_type = out.scalar_type();
  const int64_t* program = code.code.data();
  const double* scalars = code.scalars.data();

  auto loop = [&](char** data, const int64_t* strides, int64_t size) {
    alignas(64) float registers[kMaxRegisters][kChunk];
    for (int64_t start = 0; start < size; start += kChunk) {
      const int64_t n = std::min<int64_t>(kChunk, size - start);
      for (int i = 0; i < n_inputs; ++i) {
        load(data[i + 1] + start * strides[i + 1], strides[i + 1], n, input_types[i], registers[i]);
      }
      for (size_t k = 0; k < count; ++k) {
        const int64_t* f = program + k * kFields;
        float* r = registers[n_inputs + k];
        const float scalar = static_cast<float>(scalars[k]);
        const float* a = f[1] >= 0 ? registers[f[1]] : nullptr;
        const float* b = f[2] >= 0 ? registers[f[2]] : nullptr;
        const float* c = f[3] >= 0 ? registers[f[3]] : nullptr;
        const auto t = static_cast<at::ScalarType>(f[4]);
        switch (static_cast<PointwiseOp>(f[0])) {
          case PointwiseOp::kAdd:
            for (int64_t j = 0; j < n; ++j) r[j] = (a ? a[j] : scalar) + (b ? b[j] : scalar);
            break;
          case PointwiseOp::kSub:
            for (int64_t j = 0; j < n; ++j) r[j] = (a ? a[j] : scalar) - (b ? b[j] : scalar);
            break;
          case PointwiseOp::kMul:
            for (int64_t j = 0; j < n; ++j) r[j] = (a ? a[j] : scalar) * (b ? b[j] : scalar);
            break;
          case PointwiseOp::kNeg:
            for (int64_t j = 0; j < n; ++j) r[j] = -a[j];
            break;
          case PointwiseOp::kRsqrt:
            for (int64_t j = 0; j < n; ++j) r[j] = 1.f / std::sqrt(a[j]);
            break;
          case PointwiseOp::kSquare:
            for (int64_t j = 0; j < n; ++j) r[j] = a[j] * a[j];
            break;
          case PointwiseOp::kConvert:
            for (int64_t j = 0; j < n; ++j) r[j] = a[j];
            break;
          case PointwiseOp::kWhere:
            for (int64_t j = 0; j < n; ++j) r[j] = a[j] != 0.f ? (b ? b[j] : scalar) : (c ? c[j] : scalar);
            break;
        }
        if (t != at::kFloat) {
          for (int64_t j = 0; j < n; ++j) r[j] = round_to(r[j], t);
        }
      }
      store(data[0] + start * strides[0], strides[0], n, out_type, registers[n_inputs + count - 1]);
    }
  };
  iter.for_each(loop, at::internal::GRAIN_SIZE);
}

}  // namespace torch_neuron
