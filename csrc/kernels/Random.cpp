// Random ops of the neuron device (Note [Random kernels] in Random.h).
#include "Random.h"

#include <ATen/Dispatch.h>
#include <ATen/Dispatch_v2.h>
#include <ATen/Parallel.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/stack.h>
#include <c10/util/MathConstants.h>
#include <ATen/core/DistributionsHelper.h>
#include <ATen/core/PhiloxRNGEngine.h>
#include <ATen/native/DistributionTemplates.h>
#include <ATen/native/Distributions.h>
#include <ATen/native/TensorFactories.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "../NeuronCommon.h"
#include "../NeuronGenerator.h"
#include "../Dtype64.h"
#include "../HostViews.h"
#include "../Launch.h"
#include "../OpTracking.h"
#include "Generic.h"
#include "KernelBody.h"
#include "PhiloxNumbers.h"

namespace torch_neuron {

namespace {
thread_local c10::DeviceIndex t_host_device = -1;  // HostDrawScope's device, -1 outside one
}  // namespace

HostDrawScope::HostDrawScope(c10::DeviceIndex device) : previous_(t_host_device) { t_host_device = device; }
HostDrawScope::~HostDrawScope() { t_host_device = previous_; }
c10::DeviceIndex HostDrawScope::device() { return t_host_device; }

namespace {

namespace templates = at::native::templates;
using Generator = std::optional<at::Generator>;
using philox::ChunkDraws;
using philox::ElementDraws;
using philox::fill_elements;
using philox::philox_word;

// ---- where an op runs ------------------------------------------------------------------------

// The core a random op on `tensor` draws for: a neuron tensor's, or in a HostDrawScope the
// program's. A CPU tensor outside one means the dispatcher chose this kernel for a neuron
// generator given to a CPU op.
c10::DeviceIndex random_device(const at::Tensor& tensor) {
  if (tensor.device().type() == kNeuron) return tensor.device().index();
  if (t_host_device >= 0 && tensor.device().is_cpu()) return t_host_device;
  TORCH_CHECK(false, "Expected a '", tensor.device().type(), "' device type for generator but found 'neuron' (the op's ",
              "tensors are on the ", tensor.device().type(), "; pass a generator of their device, or move them to ",
              "the neuron device)");
}

// The generator given, or the default of `device`: kernels that call other random ops pass
// it explicitly, so that ops on a program's host views also reach these kernels.
at::Generator resolved(const Generator& generator, c10::DeviceIndex device) {
  if (generator.has_value() && generator->defined()) {
    generator_for(generator, device);  // the checks
    return *generator;
  }
  return default_generator(device);
}

// body(host tensors, draws) on the memory of `operands` (operands[0]: the output, whose
// elements take the words), run once the words are taken: on neuron tensors, on their host
// views, at the call or queued on the current stream (Note [Small ops on an idle stream]);
// on a program's host views (HostDrawScope), at once.
using Body = std::function<void(const std::vector<at::Tensor>& host, const PhiloxDraws& draws)>;
void draw(const char* name, const std::vector<at::Tensor>& operands, const Generator& generator, Body body) {
  const at::Tensor& out = operands[0];
  const c10::DeviceIndex device = random_device(out);
  if (out.device().type() != kNeuron) {
    body(operands, reserve_draws(generator, device, uint64_t(out.numel())));
    return;
  }
  // Operands checked before the words are taken: a refused call leaves the generator as it was.
  DeviceCheck check;
  for (const at::Tensor& t : operands) check.add(t, name);
  const PhiloxDraws draws = reserve_draws(generator, device, uint64_t(out.numel()));
  HostCall call;
  call.device = device;
  std::vector<at::Tensor> views;
  int64_t bytes = 0;
  for (const at::Tensor& t : operands) {
    views.push_back(call.to_host(t));
    bytes += bytes_of(t);
  }
  if (!asynchronous() || runs_at_call_when_idle(bytes, device)) {
    body(views, draws);
    note_launch(LaunchPath::kDirect, name, device, LaunchOperands::of_tensors(c10::ArrayRef<at::Tensor>(operands).slice(1), out));
    return;
  }
  note_launch(LaunchPath::kQueued, name, device, LaunchOperands::of_tensors(c10::ArrayRef<at::Tensor>(operands).slice(1), out));
  enqueue_views(call, [body = std::move(body), views, draws]() { body(views, draws); });
}

// ---- the kernels of ATen's templates ----------------------------------------------------------
// Each is one of DistributionTemplates.h's `*_kernel<RNG>` (the part CUDA implements with
// curand), with the distribution CPU's kernel uses, drawn from the element's words.

template <typename RNG>
struct UniformKernel {
  void operator()(at::TensorIteratorBase& iter, double from, double to, Generator generator) const {
    draw("aten::uniform_", {at::Tensor(iter.output(0))}, generator, [from, to](const auto& host, const auto& draws) {
      AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, host[0].scalar_type(), "uniform_", [&] {
        at::uniform_real_distribution<scalar_t> uniform(from, to);
        fill_elements<scalar_t>(host[0], draws, [&](ElementDraws& rng, int64_t) { return static_cast<scalar_t>(uniform(&rng)); });
      });
    });
  }
};

// Box-Muller on pairs of words, as ATen's normal_distribution (r cos(theta), and the
// r sin(theta) it caches) and CUDA's curand_normal4: the element of word w takes the uniforms
// of words w & ~1 and w | 1 and the cosine when w is even, the sine when odd; so its value
// still depends on its own word's index only. In float below double (as CUDA).
void fill_normal(const at::Tensor& out, const PhiloxDraws& draws, double mean, double std) {
  const int64_t n = out.numel();
  const uint64_t first = draws.offset & ~uint64_t(1);  // the first pair's first word
  const int64_t lead = int64_t(draws.offset - first);
  const int64_t words = (lead + n + 1) & ~int64_t(1);
  const bool wide = out.scalar_type() == at::kDouble;
  at::Tensor uniform = at::empty({words}, wide ? at::kDouble : at::kFloat);
  AT_DISPATCH_FLOATING_TYPES(uniform.scalar_type(), "normal_", [&] {
    at::uniform_real_distribution<scalar_t> distribution(0, 1);
    fill_elements<scalar_t>(uniform, PhiloxDraws{draws.seed, first},
                            [&](ElementDraws& rng, int64_t) { return static_cast<scalar_t>(distribution(&rng)); });
  });
  AT_DISPATCH_FLOATING_TYPES(uniform.scalar_type(), "normal_", [&] {
    scalar_t* u = uniform.mutable_data_ptr<scalar_t>();
    at::parallel_for(0, words / 2, 4096, [&](int64_t begin, int64_t end) {
      for (int64_t pair = begin; pair < end; ++pair) {  // ATen's normal_distribution, both results
        const scalar_t radius = std::sqrt(scalar_t(-2) * std::log1p(-u[2 * pair + 1]));
        const scalar_t theta = scalar_t(2) * c10::pi<scalar_t> * u[2 * pair];
        u[2 * pair] = radius * std::cos(theta) * scalar_t(std) + scalar_t(mean);
        u[2 * pair + 1] = radius * std::sin(theta) * scalar_t(std) + scalar_t(mean);
      }
    });
  });
  out.copy_(uniform.narrow(0, lead, n).view(out.sizes()));
}

template <typename RNG>
struct NormalKernel {
  void operator()(const at::TensorBase& self, double mean, double std, Generator generator) const {
    TORCH_CHECK(at::isFloatingType(self.scalar_type()), "normal_ expects a floating-point tensor, got ",
                self.scalar_type());
    draw("aten::normal_", {at::Tensor(self)}, generator,
         [mean, std](const auto& host, const auto& draws) { fill_normal(host[0], draws, mean, std); });
  }
};

template <typename RNG>
struct RandomKernel {
  void operator()(at::TensorIteratorBase& iter, Generator generator) const {
    draw("aten::random_", {at::Tensor(iter.output(0))}, generator, [](const auto& host, const auto& draws) {
      AT_DISPATCH_ALL_TYPES_AND3(at::kHalf, at::kBFloat16, at::kBool, host[0].scalar_type(), "random_", [&] {
        at::uniform_int_distribution<scalar_t> random;
        fill_elements<scalar_t>(host[0], draws, [&](ElementDraws& rng, int64_t) { return random(&rng); });
      });
    });
  }
};

template <typename RNG>
struct RandomFromToKernel {
  void operator()(at::TensorIteratorBase& iter, uint64_t range, int64_t base, Generator generator) const {
    draw("aten::random_", {at::Tensor(iter.output(0))}, generator, [range, base](const auto& host, const auto& draws) {
      AT_DISPATCH_V2(host[0].scalar_type(), "random_", AT_WRAP([&] {
        at::uniform_int_from_to_distribution<scalar_t> random(range, base);
        fill_elements<scalar_t>(host[0], draws, [&](ElementDraws& rng, int64_t) { return random(&rng); });
      }), at::kBool, at::kHalf, at::kBFloat16, AT_EXPAND(AT_ALL_TYPES), AT_EXPAND(AT_BAREBONES_UNSIGNED_TYPES));
    });
  }
  // the whole int64 range
  void operator()(at::TensorIteratorBase& iter, Generator generator) const {
    draw("aten::random_", {at::Tensor(iter.output(0))}, generator, [](const auto& host, const auto& draws) {
      AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, host[0].scalar_type(), "random_", [&] {
        if constexpr (std::is_same_v<scalar_t, int64_t> || std::is_same_v<scalar_t, double> ||
                      std::is_same_v<scalar_t, float> || std::is_same_v<scalar_t, at::BFloat16>) {
          at::uniform_int_full_range_distribution<scalar_t> random;
          fill_elements<scalar_t>(host[0], draws, [&](ElementDraws& rng, int64_t) { return random(&rng); });
        } else {
          TORCH_CHECK(false, "random_ over the whole int64 range handles only int64, double, float and bfloat16");
        }
      });
    });
  }
};

// An element-wise distribution of CPU's kernels, which draw them in double.
template <template <typename> class Distribution, typename... Parameters>
void draw_double_distribution(const char* name, const at::Tensor& self, Generator generator, bool integral_too,
                              Parameters... parameters) {
  draw(name, {self}, generator, [=](const auto& host, const auto& draws) {
    auto run = [&](auto tag) {
      using scalar_t = decltype(tag);
      Distribution<double> distribution(parameters...);
      fill_elements<scalar_t>(host[0], draws, [&](ElementDraws& rng, int64_t) {
        return static_cast<scalar_t>(distribution(&rng));
      });
    };
    if (integral_too) {
      AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, host[0].scalar_type(), "random op", [&] { run(scalar_t()); });
    } else {
      AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, host[0].scalar_type(), "random op", [&] { run(scalar_t()); });
    }
  });
}

template <typename RNG>
struct CauchyKernel {
  void operator()(at::TensorIteratorBase& iter, double median, double sigma, Generator generator) const {
    draw_double_distribution<at::cauchy_distribution>("aten::cauchy_", at::Tensor(iter.output(0)), generator, false,
                                                      median, sigma);
  }
};
template <typename RNG>
struct LogNormalKernel {
  void operator()(at::TensorIteratorBase& iter, double mean, double std, Generator generator) const {
    draw_double_distribution<at::lognormal_distribution>("aten::log_normal_", at::Tensor(iter.output(0)), generator,
                                                         false, mean, std);
  }
};
template <typename RNG>
struct GeometricKernel {
  void operator()(at::TensorIteratorBase& iter, double p, Generator generator) const {
    draw_double_distribution<at::geometric_distribution>("aten::geometric_", at::Tensor(iter.output(0)), generator,
                                                         true, p);
  }
};
template <typename RNG>
struct ExponentialKernel {
  void operator()(at::TensorIteratorBase& iter, double lambda, Generator generator) const {
    draw_double_distribution<at::exponential_distribution>("aten::exponential_", at::Tensor(iter.output(0)),
                                                           generator, false, lambda);
  }
};

// Bernoulli with a scalar p draws one float per element (as CUDA's kernel; dropout's masks).
template <typename RNG>
struct BernoulliScalarKernel {
  void operator()(const at::TensorBase& self, double p, Generator generator) const {
    draw("aten::bernoulli_", {at::Tensor(self)}, generator, [p](const auto& host, const auto& draws) {
      AT_DISPATCH_ALL_TYPES_AND3(at::kBool, at::kHalf, at::kBFloat16, host[0].scalar_type(), "bernoulli_", [&] {
        at::bernoulli_distribution<float> bernoulli(static_cast<float>(p));
        fill_elements<scalar_t>(host[0], draws, [&](ElementDraws& rng, int64_t) { return static_cast<scalar_t>(bernoulli(&rng)); });
      });
    });
  }
};

template <typename RNG>
struct BernoulliTensorKernel {
  void operator()(const at::TensorBase& self_base, const at::TensorBase& p_base, Generator generator) const {
    const at::Tensor self(self_base);
    // p broadcast to self, on self's device (a CPU p is accepted, as on CUDA)
    const at::Tensor p = at::Tensor(p_base).to(self.device()).expand(self.sizes());
    draw("aten::bernoulli_", {self, p}, generator, [](const auto& host, const auto& draws) {
      const at::Tensor probability = host[1].to(at::kFloat).contiguous();
      const float* p_data = probability.const_data_ptr<float>();
      AT_DISPATCH_ALL_TYPES_AND3(at::kBool, at::kHalf, at::kBFloat16, host[0].scalar_type(), "bernoulli_", [&] {
        fill_elements<scalar_t>(host[0], draws, [&](ElementDraws& rng, int64_t i) {
          const float p_value = p_data[i];
          TORCH_CHECK(0 <= p_value && p_value <= 1, "Expected p_in >= 0 && p_in <= 1 to be true");
          at::bernoulli_distribution<float> bernoulli(p_value);
          return static_cast<scalar_t>(bernoulli(&rng));
        });
      });
    });
  }
};

using RNG = NeuronGeneratorImpl;

// ---- ops: ATen's device-generic code with the kernels above ------------------------------------

#define NEURON_TRACKED(name) \
  static TrackedOp tracked_record(name, KernelPath::kHot); \
  return run_tracked(tracked_record, [&]() -> decltype(auto)

at::Tensor& uniform_(at::Tensor& self, double from, double to, Generator generator) {
  NEURON_TRACKED("aten::uniform_") { return templates::uniform_impl_<UniformKernel, RNG>(self, from, to, generator); });
}
at::Tensor& normal_(at::Tensor& self, double mean, double std, Generator generator) {
  NEURON_TRACKED("aten::normal_") { return templates::normal_impl_<NormalKernel, RNG>(self, mean, std, generator); });
}
at::Tensor normal_tensor_float(const at::Tensor& mean, double std, Generator generator) {
  NEURON_TRACKED("aten::normal.Tensor_float") { return templates::normal_impl<NormalKernel, RNG>(mean, std, generator); });
}
at::Tensor normal_float_tensor(double mean, const at::Tensor& std, Generator generator) {
  NEURON_TRACKED("aten::normal.float_Tensor") { return templates::normal_impl<NormalKernel, RNG>(mean, std, generator); });
}
at::Tensor normal_tensor_tensor(const at::Tensor& mean, const at::Tensor& std, Generator generator) {
  NEURON_TRACKED("aten::normal.Tensor_Tensor") { return templates::normal_impl<NormalKernel, RNG>(mean, std, generator); });
}
at::Tensor& normal_tensor_float_out(const at::Tensor& mean, double std, Generator generator, at::Tensor& out) {
  NEURON_TRACKED("aten::normal.Tensor_float_out") {
    return templates::normal_out_impl<NormalKernel, RNG>(out, mean, std, generator);
  });
}
at::Tensor& normal_float_tensor_out(double mean, const at::Tensor& std, Generator generator, at::Tensor& out) {
  NEURON_TRACKED("aten::normal.float_Tensor_out") {
    return templates::normal_out_impl<NormalKernel, RNG>(out, mean, std, generator);
  });
}
at::Tensor& normal_tensor_tensor_out(const at::Tensor& mean, const at::Tensor& std, Generator generator,
                                     at::Tensor& out) {
  NEURON_TRACKED("aten::normal.Tensor_Tensor_out") {
    return templates::normal_out_impl<NormalKernel, RNG>(out, mean, std, generator);
  });
}
at::Tensor& random_(at::Tensor& self, Generator generator) {
  NEURON_TRACKED("aten::random_") { return templates::random_impl<RandomKernel, RNG>(self, generator); });
}
at::Tensor& random_from(at::Tensor& self, int64_t from, std::optional<int64_t> to, Generator generator) {
  NEURON_TRACKED("aten::random_.from") {
    return templates::random_from_to_impl<RandomFromToKernel, RNG>(self, from, to, generator);
  });
}
at::Tensor& random_to(at::Tensor& self, int64_t to, Generator generator) {
  NEURON_TRACKED("aten::random_.to") {
    return templates::random_from_to_impl<RandomFromToKernel, RNG>(self, 0, to, generator);
  });
}
at::Tensor& cauchy_(at::Tensor& self, double median, double sigma, Generator generator) {
  NEURON_TRACKED("aten::cauchy_") { return templates::cauchy_impl_<CauchyKernel, RNG>(self, median, sigma, generator); });
}
at::Tensor& log_normal_(at::Tensor& self, double mean, double std, Generator generator) {
  NEURON_TRACKED("aten::log_normal_") {
    return templates::log_normal_impl_<LogNormalKernel, RNG>(self, mean, std, generator);
  });
}
at::Tensor& exponential_(at::Tensor& self, double lambda, Generator generator) {
  NEURON_TRACKED("aten::exponential_") {
    return templates::exponential_impl_<ExponentialKernel, RNG>(self, lambda, generator);
  });
}
at::Tensor& geometric_(at::Tensor& self, double p, Generator generator) {
  NEURON_TRACKED("aten::geometric_") { return templates::geometric_impl_<GeometricKernel, RNG>(self, p, generator); });
}
at::Tensor& bernoulli_tensor_(at::Tensor& self, const at::Tensor& p, Generator generator) {
  NEURON_TRACKED("aten::bernoulli_.Tensor") {
    return templates::bernoulli_impl_<BernoulliTensorKernel, RNG>(self, p, generator);
  });
}
at::Tensor& bernoulli_float_(at::Tensor& self, double p, Generator generator) {
  NEURON_TRACKED("aten::bernoulli_.float") {
    return templates::bernoulli_impl_<BernoulliScalarKernel, RNG>(self, p, generator);
  });
}
at::Tensor& bernoulli_out(const at::Tensor& self, Generator generator, at::Tensor& out) {
  NEURON_TRACKED("aten::bernoulli.out") {
    return templates::bernoulli_out_impl<BernoulliTensorKernel, RNG>(out, self, generator);
  });
}

// ---- ops whose CPU kernel is device-specific: ours, with CPU's contract -------------------------

std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p, std::optional<bool> train) {
  NEURON_TRACKED("aten::native_dropout") {
    if (input.numel() == 0) return std::make_tuple(input, at::empty_like(input, input.options()));
    if (train.has_value() && !*train) {
      return std::make_tuple(input.clone(), at::ones_like(input, input.options().dtype(at::kBool)));
    }
    const double keep = 1. - p;
    if (keep == 0) {  // p == 1: everything dropped, nothing drawn (as CUDA's kernel)
      return std::make_tuple(at::zeros_like(input), at::zeros_like(input, input.options().dtype(at::kBool)));
    }
    at::Tensor mask = at::empty_like(input, input.options().dtype(at::kBool));
    mask.bernoulli_(keep, resolved(std::nullopt, random_device(input)));
    // mul, not mul_: the scale is applied in the op's math type (float for half and bfloat16), as
    // CUDA's fused kernel and a compiled dropout do (compile/decompositions.py, _native_dropout);
    // mul_(Scalar) would round it to the input's dtype first
    return std::make_tuple(input.mul(mask).mul(1. / keep), mask);
  });
}

// Sampling with replacement, as CPU's kernel: per row, the normalized cumulative
// distribution and one uniform double per sample (element row * n_sample + j), found by
// binary search.
void multinomial_with_replacement(at::Tensor& result, const at::Tensor& self, int64_t n_sample, Generator generator) {
  draw("aten::multinomial", {result, self}, generator, [n_sample](const auto& host, const auto& draws) {
    const at::Tensor probabilities = host[1].to(at::kDouble).reshape({-1, host[1].size(-1)}).contiguous();
    const int64_t rows = probabilities.size(0), categories = probabilities.size(1);
    const double* p = probabilities.const_data_ptr<double>();
    std::vector<double> cumulative(size_t(rows * categories));
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0;
      for (int64_t c = 0; c < categories; ++c) {
        const double value = p[r * categories + c];
        TORCH_CHECK(value >= 0, "invalid multinomial distribution (encountering probability entry < 0)");
        TORCH_CHECK(std::isfinite(value), "invalid multinomial distribution (encountering probability entry = infinity or NaN)");
        sum += value;
        cumulative[size_t(r * categories + c)] = sum;
      }
      TORCH_CHECK(sum > 0, "invalid multinomial distribution (sum of probabilities <= 0)");
      for (int64_t c = 0; c < categories; ++c) cumulative[size_t(r * categories + c)] /= sum;
    }
    fill_elements<int64_t>(host[0], draws, [&](ElementDraws& rng, int64_t i) {
      const double* row = cumulative.data() + (i / n_sample) * categories;
      at::uniform_real_distribution<double> uniform(0, 1);
      const double sample = uniform(&rng);
      int64_t left = 0, right = categories;
      while (right - left > 0) {
        const int64_t middle = left + (right - left) / 2;
        if (row[middle] < sample) left = middle + 1; else right = middle;
      }
      return std::min(left, categories - 1);
    });
  });
}

// CPU's multinomial (ATen's device-generic part, with the kernel above).
at::Tensor& neuron_multinomial_out(const at::Tensor& self, int64_t n_sample, bool with_replacement, Generator generator,
                            at::Tensor& result) {
  NEURON_TRACKED("aten::multinomial.out") {
    TORCH_CHECK(result.device() == self.device(), "multinomial arguments must have the same device");
    TORCH_CHECK(self.dim() > 0 && self.dim() <= 2, "prob_dist must be 1 or 2 dim");
    TORCH_CHECK(at::isFloatingType(self.scalar_type()), "multinomial only supports floating-point dtypes for input, got: ",
                self.scalar_type());
    TORCH_CHECK(result.scalar_type() == at::kLong, "multinomial expects Long tensor out, got: ", result.scalar_type());
    TORCH_CHECK(n_sample > 0, "cannot sample n_sample <= 0 samples");
    const int64_t n_categories = self.size(-1);
    TORCH_CHECK(with_replacement || (n_sample <= n_categories),
                "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
    TORCH_CHECK(n_categories <= (int64_t(1) << 24), "number of categories cannot exceed 2^24");
    if (self.dim() == 1) {
      result.resize_({n_sample});
    } else {
      result.resize_({self.size(0), n_sample});
    }
    if (result.numel() == 0) return result;
    const at::Generator source = resolved(generator, random_device(self));
    if (!with_replacement || n_sample == 1) {
      // As ATen: s = argmax(p / q), q ~ Exp(1) (the Gumbel-max trick).
      const bool valid = ((self.max() < INFINITY) & (self.min() >= 0)).item<bool>();
      TORCH_CHECK(valid, "probability tensor contains either `inf`, `nan` or element < 0");
      const bool zero = self.dim() == 1 ? (self.sum() == 0).item<bool>() : (self.sum(1) == 0).sum().item<bool>();
      TORCH_CHECK(!zero, "invalid multinomial distribution (sum of probabilities <= 0)");
      at::Tensor q = at::empty_like(self).exponential_(1, source);
      at::div_out(q, self, q);
      if (n_sample == 1) {
        at::argmax_out(result, q, /*dim=*/-1, /*keepdim=*/true);
      } else {
        at::Tensor values = at::empty(result.sizes(), self.options());
        at::topk_out(values, result, q, n_sample);
      }
      return result;
    }
    multinomial_with_replacement(result, self, n_sample, source);
    return result;
  });
}

at::Tensor neuron_multinomial(const at::Tensor& self, int64_t n_sample, bool with_replacement, Generator generator) {
  at::Tensor result = at::empty({0}, self.options().dtype(at::kLong));
  neuron_multinomial_out(self, n_sample, with_replacement, generator, result);
  return result;
}

// A permutation as CUDA makes it: one random 64-bit key per position, sorted.
at::Tensor& randperm_out(int64_t n, Generator generator, at::Tensor& result) {
  NEURON_TRACKED("aten::randperm.generator_out") {
    TORCH_CHECK(n >= 0, "n must be non-negative, got", n);
    at::native::check_supported_max_int_with_precision(n, result);
    result.resize_({n});
    if (n == 0) return result;
    draw("aten::randperm", {result}, generator, [n](const auto& host, const auto& draws) {
      std::vector<std::pair<uint64_t, int64_t>> keys(size_t(n), {0, 0});
      at::Tensor positions = at::empty({n}, at::kLong);
      fill_elements<int64_t>(positions, draws, [&](ElementDraws& rng, int64_t i) {
        keys[size_t(i)] = {rng.random64(), i};
        return i;
      });
      std::sort(keys.begin(), keys.end());
      AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, host[0].scalar_type(), "randperm", [&] {
        fill_elements<scalar_t>(host[0], draws, [&](ElementDraws&, int64_t i) {
          return static_cast<scalar_t>(keys[size_t(i)].second);
        });
      });
    });
    return result;
  });
}

// Element-wise samplers reading inputs: value(draws, i, inputs as double) per element of the output.
template <typename Value>
at::Tensor sample_elementwise(const char* name, const at::Tensor& like, std::vector<at::Tensor> inputs,
                              Generator generator, Value value) {
  at::Tensor out = at::empty(like.sizes(), like.options().memory_format(at::MemoryFormat::Contiguous));
  if (out.numel() == 0) return out;
  std::vector<at::Tensor> operands{out};
  for (const at::Tensor& input : inputs) operands.push_back(input.to(like.device()).expand(like.sizes()));
  draw(name, operands, generator, [name, value](const auto& host, const auto& draws) {
    std::vector<at::Tensor> doubles;
    std::vector<const double*> data;
    for (size_t i = 1; i < host.size(); ++i) {
      doubles.push_back(host[i].to(at::kDouble).contiguous());
      data.push_back(doubles.back().template const_data_ptr<double>());
    }
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, host[0].scalar_type(), "random op", [&] {
      fill_elements<scalar_t>(host[0], draws, [&](ElementDraws& rng, int64_t i) {
        return static_cast<scalar_t>(value(rng, i, data, scalar_t()));
      });
    });
  });
  return out;
}

// CPU's samplers draw uniforms and normals in double.
auto uniform_sampler(ElementDraws& rng) {
  return [&rng]() {
    at::uniform_real_distribution<double> uniform(0.0, 1.0);
    return uniform(&rng);
  };
}
auto normal_sampler(ElementDraws& rng) {
  return [&rng]() {
    at::normal_distribution<double> normal(0.0, 1.0);
    return normal(&rng);
  };
}

template <typename scalar_t>
double gamma_sample(double alpha, ElementDraws& rng) {
  auto uniform = uniform_sampler(rng);
  auto normal = normal_sampler(rng);
  ::BaseSampler<double, decltype(uniform)> standard_uniform(uniform);
  ::BaseSampler<double, decltype(normal)> standard_normal(normal);
  const auto sample = ::sample_gamma<scalar_t, double, decltype(uniform), decltype(normal)>(
      static_cast<scalar_t>(alpha), standard_uniform, standard_normal);
  return std::max<double>(std::numeric_limits<scalar_t>::min(), double(sample));
}

at::Tensor standard_gamma(const at::Tensor& alpha, Generator generator) {
  NEURON_TRACKED("aten::_standard_gamma") {
    return sample_elementwise("_standard_gamma", alpha, {alpha}, generator,
                              [](ElementDraws& rng, int64_t i, const std::vector<const double*>& in, auto tag) {
                                return gamma_sample<decltype(tag)>(in[0][i], rng);
                              });
  });
}

// Poisson as CPU's kernel samples it (ATen/native/Distributions.cpp, not in a header):
// transformed rejection (Hoermann, 1993) for rates >= 10, products of uniforms below.
double poisson_sample(double lambda, ElementDraws& rng) {
  TORCH_CHECK(lambda >= 0, "invalid Poisson rate, expected rate to be non-negative");
  auto uniform = uniform_sampler(rng);
  if (lambda >= 10) {
    const double slam = std::sqrt(lambda), loglam = std::log(lambda);
    const double b = 0.931 + 2.53 * slam, a = -0.059 + 0.02483 * b;
    const double invalpha = 1.1239 + 1.1328 / (b - 3.4), vr = 0.9277 - 3.6224 / (b - 2);
    while (true) {
      const double U = uniform() - 0.5, V = uniform();
      const double us = 0.5 - std::fabs(U);
      const auto k = int64_t(std::floor((2 * a / us + b) * U + lambda + 0.43));
      if (us >= 0.07 && V <= vr) return double(k);
      if (k < 0 || (us < 0.013 && V > us)) continue;
      if ((std::log(V) + std::log(invalpha) - std::log(a / (us * us) + b)) <=
          (-lambda + double(k) * loglam - std::lgamma(double(k) + 1))) {
        return double(k);
      }
    }
  }
  if (lambda == 0) return 0;
  const double enlam = std::exp(-lambda);
  int64_t x = 0;
  double product = 1.0;
  while (true) {
    product *= uniform();
    if (product > enlam) {
      x += 1;
    } else {
      return double(x);
    }
  }
}

at::Tensor poisson(const at::Tensor& rates, Generator generator) {
  NEURON_TRACKED("aten::poisson") {
    return sample_elementwise("poisson", rates, {rates}, generator,
                              [](ElementDraws& rng, int64_t i, const std::vector<const double*>& in, auto) {
                                return poisson_sample(in[0][i], rng);
                              });
  });
}

at::Tensor binomial(const at::Tensor& count, const at::Tensor& prob, Generator generator) {
  NEURON_TRACKED("aten::binomial") {
    return sample_elementwise("binomial", count, {count, prob}, generator,
                              [](ElementDraws& rng, int64_t i, const std::vector<const double*>& in, auto tag) {
                                using scalar_t = decltype(tag);
                                auto uniform = uniform_sampler(rng);
                                ::BaseSampler<double, decltype(uniform)> standard_uniform(uniform);
                                return double(::sample_binomial<scalar_t, double, decltype(uniform)>(
                                    static_cast<scalar_t>(in[0][i]), static_cast<scalar_t>(in[1][i]), standard_uniform));
                              });
  });
}

// As CPU's: gamma samples in double, normalized over the last dimension, clamped to
// (min, 1 - eps].
at::Tensor sample_dirichlet(const at::Tensor& alpha, Generator generator) {
  NEURON_TRACKED("aten::_sample_dirichlet") {
    at::Tensor gamma = sample_elementwise("_sample_dirichlet", alpha.to(at::kDouble), {alpha}, generator,
                                          [](ElementDraws& rng, int64_t i, const std::vector<const double*>& in, auto) {
                                            return gamma_sample<double>(in[0][i], rng);
                                          });
    at::Tensor result = gamma / gamma.sum(-1, true);
    AT_DISPATCH_FLOATING_TYPES(alpha.scalar_type(), "_sample_dirichlet", [&] {
      result = result.clamp(double(std::numeric_limits<scalar_t>::min()),
                            1 - double(std::numeric_limits<scalar_t>::epsilon()));
    });
    return result.to(alpha.scalar_type());
  });
}

// RReLU as CPU's kernel: in training, each element x <= 0 becomes x * r with r uniform in
// [lower, upper] (noise = r), others stay (noise = 1); every element draws its r.
at::Tensor& neuron_rrelu_with_noise_out(const at::Tensor& self, at::Tensor& noise, const at::Scalar& lower,
                                 const at::Scalar& upper, bool training, Generator generator, at::Tensor& output) {
  NEURON_TRACKED("aten::rrelu_with_noise.out") {
    if (!training) {
      const double negative_slope = (lower.toDouble() + upper.toDouble()) / 2;
      return at::leaky_relu_out(output, self, negative_slope);
    }
    TORCH_CHECK(noise.sizes() == self.sizes(), "rrelu_with_noise: noise of size ", noise.sizes(),
                " does not match the input's ", self.sizes());
    at::native::resize_output(output, self.sizes());
    const double low = lower.toDouble(), high = upper.toDouble();
    at::Tensor r = at::empty_like(self, at::MemoryFormat::Contiguous).uniform_(low, high, resolved(generator, random_device(self)));
    at::Tensor negative = self <= 0;
    noise.copy_(at::where(negative, r, at::ones_like(r)));
    output.copy_(at::where(negative, self * r, self));
    return output;
  });
}
at::Tensor neuron_rrelu_with_noise(const at::Tensor& self, at::Tensor& noise, const at::Scalar& lower, const at::Scalar& upper,
                            bool training, Generator generator) {
  at::Tensor output = at::empty_like(self, at::MemoryFormat::Contiguous);
  return neuron_rrelu_with_noise_out(self, noise, lower, upper, training, generator, output);
}
at::Tensor& neuron_rrelu_with_noise_(at::Tensor& self, at::Tensor& noise, const at::Scalar& lower, const at::Scalar& upper,
                              bool training, Generator generator) {
  at::Tensor output = neuron_rrelu_with_noise(self, noise, lower, upper, training, generator);
  return self.copy_(output);
}

#undef NEURON_TRACKED

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("uniform_", TORCH_FN(uniform_));
  m.impl("normal_", TORCH_FN(normal_));
  m.impl("normal.Tensor_float", TORCH_FN(normal_tensor_float));
  m.impl("normal.float_Tensor", TORCH_FN(normal_float_tensor));
  m.impl("normal.Tensor_Tensor", TORCH_FN(normal_tensor_tensor));
  m.impl("normal.Tensor_float_out", TORCH_FN(normal_tensor_float_out));
  m.impl("normal.float_Tensor_out", TORCH_FN(normal_float_tensor_out));
  m.impl("normal.Tensor_Tensor_out", TORCH_FN(normal_tensor_tensor_out));
  m.impl("random_", TORCH_FN(random_));
  m.impl("random_.from", TORCH_FN(random_from));
  m.impl("random_.to", TORCH_FN(random_to));
  m.impl("cauchy_", TORCH_FN(cauchy_));
  m.impl("log_normal_", TORCH_FN(log_normal_));
  m.impl("exponential_", TORCH_FN(exponential_));
  m.impl("geometric_", TORCH_FN(geometric_));
  m.impl("bernoulli_.Tensor", TORCH_FN(bernoulli_tensor_));
  m.impl("bernoulli_.float", TORCH_FN(bernoulli_float_));
  m.impl("bernoulli.out", TORCH_FN(bernoulli_out));
  m.impl("native_dropout", TORCH_FN(native_dropout));
  m.impl("multinomial", TORCH_FN(neuron_multinomial));
  m.impl("multinomial.out", TORCH_FN(neuron_multinomial_out));
  m.impl("randperm.generator_out", TORCH_FN(randperm_out));
  m.impl("_standard_gamma", TORCH_FN(standard_gamma));
  m.impl("poisson", TORCH_FN(poisson));
  m.impl("binomial", TORCH_FN(binomial));
  m.impl("_sample_dirichlet", TORCH_FN(sample_dirichlet));
  m.impl("rrelu_with_noise", TORCH_FN(neuron_rrelu_with_noise));
  m.impl("rrelu_with_noise_", TORCH_FN(neuron_rrelu_with_noise_));
  m.impl("rrelu_with_noise.out", TORCH_FN(neuron_rrelu_with_noise_out));
}

// Shapes of the random ops PyTorch ships without a meta kernel. Without them FakeTensor runs the
// real kernel while a graph is traced, taking words from the device's generator: the first
// call of a compiled graph would then not draw what the same call draws after manual_seed.
at::Tensor binomial_meta(const at::Tensor& count, const at::Tensor&, std::optional<at::Generator>) {
  return at::empty_like(count, at::MemoryFormat::Contiguous);
}
at::Tensor sample_dirichlet_meta(const at::Tensor& alpha, std::optional<at::Generator>) {
  return at::empty_like(alpha, at::MemoryFormat::Contiguous);
}
// Note [Random ops replayed in compiled graphs]
// Activation checkpointing under torch.compile recomputes a random op in the backward graph;
// AOTAutograd's partitioner wraps the forward op in run_and_save_rng_state (the state before it
// draws is saved for backward) and the backward op in run_with_rng_state(state, ...) (it draws
// from that state; the device's generator is left as it was). Their kernels exist for CPU,
// CUDA, XPU and HPU only, so the compiler lowers them (compile/passes.py,
// replay_random_ops): the forward becomes neuron::rng_state(device), the default generator's
// state as a 16-byte value of the program (seed, offset: Note [Philox generator]), right before
// the op, which draws from the default generator as without checkpointing; the backward op
// takes that value as its Generator argument, and the executor gives it a generator made from
// it (generator_from_state). So the recomputed op draws the forward's numbers exactly, and the
// device's generator advances as it does without checkpointing (eager's behaviour, which
// torch.utils.checkpoint gets by stashing torch.neuron's state). The op has no tensor argument
// and a composite kernel: it runs as a program step (CPU key, the output memory lent) and,
// called directly, returns the state on the CPU, as torch.neuron.get_rng_state(device) does.
at::Tensor rng_state(c10::Device device) {
  // a program step names the host (its kernels run on host views), under its HostDrawScope
  if (device.is_cpu() && HostDrawScope::device() >= 0) device = c10::Device(kNeuron, HostDrawScope::device());
  TORCH_CHECK(device.type() == kNeuron, "neuron::rng_state: expected a neuron device, got ", device);
  NeuronGeneratorImpl* generator = generator_for(std::nullopt, device.index());
  std::lock_guard<std::mutex> lock(generator->mutex_);
  return at::Tensor(generator->get_state());
}
at::Tensor rng_state_meta(c10::Device) { return at::empty({16}, at::TensorOptions().dtype(at::kByte).device(at::kMeta)); }

TORCH_LIBRARY_FRAGMENT(neuron, m) { m.def("rng_state(Device device) -> Tensor"); }
TORCH_LIBRARY_IMPL(neuron, CompositeExplicitAutograd, m) { m.impl("rng_state", TORCH_FN(rng_state)); }
TORCH_LIBRARY_IMPL(neuron, Meta, m) { m.impl("rng_state", TORCH_FN(rng_state_meta)); }

TORCH_LIBRARY_IMPL(aten, Meta, m) {
  m.impl("binomial", TORCH_FN(binomial_meta));
  m.impl("_sample_dirichlet", TORCH_FN(sample_dirichlet_meta));
}

}  // namespace
}  // namespace torch_neuron
