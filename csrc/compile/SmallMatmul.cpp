#include "SmallMatmul.h"

#include <ATen/CPUFunctions.h>
#include <ATen/Functions.h>
#include <ATen/native/CPUBlas.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/BFloat16.h>

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <tuple>
#include <vector>

namespace torch_neuron {
namespace {

constexpr int64_t kBlock = 32;           // columns of B per brgemm call (the packed block's width)
constexpr int64_t kMaxRows = 64;         // m
constexpr int64_t kMaxWeight = 1 << 16;  // k * n: packing per call costs ~1 us per 16K elements

bool cpu_supported() {
  static const bool supported = [] {
    const char* env = std::getenv("NEURON_SIM_SMALL_MATMUL");
    if (env && std::string(env) == "0") return false;
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16") &&
           at::native::cpublas::could_pack(at::kBFloat16);
  }();
  return supported;
}

// B = w^T with w [n, k] row-major (row stride ldw): per kBlock-column block, the VNNI layout
// [k/2][kBlock][2] (pairs of consecutive k of one column side by side), which is a transpose
// of the block's rows in 32-bit words (moved with memcpy: w need not be 4-byte aligned).
void pack_vnni(const uint16_t* w, int64_t ldw, int64_t n, int64_t k, uint16_t* out) {
  const int64_t pairs = k / 2;
  for (int64_t n0 = 0; n0 < n; n0 += kBlock) {
    uint16_t* block = out + n0 * k;
    const uint16_t* base = w + n0 * ldw;
    int64_t p0 = 0;
    for (; p0 + 8 <= pairs; p0 += 8) {
      for (int64_t c = 0; c < kBlock; ++c) {
        const uint16_t* row = base + c * ldw + 2 * p0;
        uint16_t* dst = block + 2 * (p0 * kBlock + c);
        for (int64_t p = 0; p < 8; ++p) std::memcpy(dst + 2 * p * kBlock, row + 2 * p, 4);
      }
    }
    for (; p0 < pairs; ++p0) {
      for (int64_t c = 0; c < kBlock; ++c) std::memcpy(block + 2 * (p0 * kBlock + c), base + c * ldw + 2 * p0, 4);
    }
  }
}

// float32 -> bfloat16 with vcvtneps2bf16, the instruction oneDNN's kernels end with (round to
// nearest even, denormal inputs as zero). count is a multiple of 16.
__attribute__((target("avx512f,avx512bf16"))) void to_bfloat16(const float* in, uint16_t* out, int64_t count) {
  for (int64_t i = 0; i < count; i += 16) {
    const __m256bh converted = _mm512_cvtneps_pbh(_mm512_loadu_ps(in + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), reinterpret_cast<const __m256i&>(converted));
  }
}

struct Scratch {
  std::vector<uint16_t> packed;
  std::vector<float> accumulator;
};

// out [m, n] contiguous = a [m, k] (row stride lda) @ w^T (w [n, k], row stride ldw).
void run_kernel(uint16_t* out, const uint16_t* a, int64_t lda, const uint16_t* w, int64_t ldw, int64_t m, int64_t k,
                int64_t n) {
  thread_local Scratch scratch;
  scratch.packed.resize(size_t(k * n));
  scratch.accumulator.resize(size_t(m * n));
  pack_vnni(w, ldw, n, k, scratch.packed.data());
  const auto* a16 = reinterpret_cast<const at::BFloat16*>(a);
  const auto* b16 = reinterpret_cast<const at::BFloat16*>(scratch.packed.data());
  for (int64_t n0 = 0; n0 < n; n0 += kBlock) {
    at::native::cpublas::brgemm(m, kBlock, k, lda, kBlock, n, /*add_C=*/false, a16, b16 + n0 * k,
                                scratch.accumulator.data() + n0, /*is_vnni=*/true);
  }
  at::native::cpublas::brgemm_release(/*is_vnni=*/true);
  to_bfloat16(scratch.accumulator.data(), out, m * n);
}

bool size_rule(int64_t m, int64_t k, int64_t n) {
  return m >= 1 && m <= kMaxRows && k >= 2 && k % 2 == 0 && n >= kBlock && n % kBlock == 0 && k * n <= kMaxWeight;
}

// Probe data of one kind: 0 normal values; 1 small integers times powers of two; 2 products
// in float32's denormal range (kernels differ in flushing them); 3 a mix of huge and tiny
// magnitudes; 4 a cancellation pattern: small nonzero integers in `a`, and in `w` an eighth
// of entries +-2^20..2^26 among small integers, so that float32 partial sums drop the small
// terms added while a big one is pending and the result shows the order of addition (a
// kernel that sums in another order differs in most draws).
void fill(std::vector<uint16_t>& data, int kind, bool weight, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> small(-3, 3), nonzero(1, 3), sign(0, 1), exponent(-2, 12), tiny(-75, -62),
      wide(-30, 30), big(20, 26), eighth(0, 7);
  for (auto& v : data) {
    float x = 0;
    switch (kind) {
      case 0: x = normal(rng); break;
      case 1: x = float(small(rng)) * std::ldexp(1.0f, exponent(rng)); break;
      case 2: x = float(small(rng)) * std::ldexp(1.0f, tiny(rng)); break;
      case 3: x = normal(rng) * std::ldexp(1.0f, wide(rng)); break;
      default: {
        const float s = sign(rng) ? 1.0f : -1.0f;
        x = weight && eighth(rng) == 0 ? s * std::ldexp(1.0f, big(rng)) : s * float(nonzero(rng));
        break;
      }
    }
    v = c10::BFloat16(x).x;
  }
}

bool probe(int64_t m, int64_t k, int64_t n) {
  // Programs are built while torch.compile holds a FakeTensorMode: the probe's tensors are
  // real host memory and must not meet Python dispatch (as in ProgramExecutor::execute).
  c10::impl::ExcludeDispatchKeyGuard no_python(
      c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot}));
  std::mt19937 rng(uint32_t(m * 1000003 + k * 1009 + n));
  std::vector<uint16_t> a(size_t(m * k)), w(size_t(n * k)), mine(size_t(m * n));
  const auto options = at::TensorOptions().dtype(at::kBFloat16);
  for (int draw = 0; draw < 10; ++draw) {
    fill(a, draw % 5, false, rng);
    fill(w, draw % 5, true, rng);
    const at::Tensor ta = at::from_blob(a.data(), {m, k}, options);
    const at::Tensor b = at::from_blob(w.data(), {k, n}, {1, k}, options);  // w^T, as nn.Linear passes it
    const at::Tensor expected = at::cpu::mm(ta, b);  // eager's kernel, without the dispatcher
    run_kernel(mine.data(), a.data(), k, w.data(), k, m, k, n);
    if (std::memcmp(expected.const_data_ptr(), mine.data(), mine.size() * sizeof(uint16_t)) != 0) return false;
  }
  return true;
}

}  // namespace

bool small_matmul_applies(int64_t m, int64_t k, int64_t n) {
  if (!size_rule(m, k, n) || !cpu_supported()) return false;
  static std::mutex mutex;
  static std::map<std::tuple<int64_t, int64_t, int64_t>, bool> checked;
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(m, k, n);
  auto found = checked.find(key);
  if (found == checked.end()) found = checked.emplace(key, probe(m, k, n)).first;
  return found->second;
}

void small_matmul(at::Tensor& out, const at::Tensor& a, const at::Tensor& b) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  const bool fits = a.scalar_type() == at::kBFloat16 && b.scalar_type() == at::kBFloat16 &&
                    out.scalar_type() == at::kBFloat16 && out.is_contiguous() && size_rule(m, k, n) &&
                    a.stride(1) == 1 && (m == 1 || a.stride(0) >= k) &&  // a: rows of k contiguous elements
                    b.stride(0) == 1 && b.stride(1) >= k;  // b = w^T, w's rows contiguous
  if (!fits) {
    at::cpu::mm_out(out, a, b);
    return;
  }
  run_kernel(static_cast<uint16_t*>(out.mutable_data_ptr()), static_cast<const uint16_t*>(a.const_data_ptr()),
             m == 1 ? k : a.stride(0), static_cast<const uint16_t*>(b.const_data_ptr()), b.stride(1), m, k, n);
}

}  // namespace torch_neuron
