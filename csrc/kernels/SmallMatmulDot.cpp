// The dot form of the small bfloat16 matmuls (SmallMatmulDot.h, Note [Small bfloat16 matmuls]).
//
// On an AVX2 CPU at::mm of bfloat16 (no oneDNN there: ATen's mkldnn_bf16_device_check wants
// AVX-512) runs cpublas gemm_transa_, which calls bf16_dot_with_fp32_arith once per output:
// eight float32 accumulators kept on the stack and zeroed per call, 64 elements per round (the
// q-th accumulator takes elements 8q..8q+7 of each round, multiplied and added by one FMA),
// the accumulators added pairwise (q + q+4, then 0+2 and 1+3, then those two) and the eight
// lanes reduced by ATen's vec_reduce_all (halves, then pairs of pairs, then pairs); then
// 16-element blocks left over into a ninth accumulator, reduced the same way and added; then
// single elements, multiplied and added one at a time (not fused); the float32 sum scaled by
// alpha = 1 and rounded to bfloat16 (round to nearest even, NaN as 0x7FC0). That is ~3.7 GB/s
// for a 128 x 32000 weight (AMD EPYC Zen 3, one thread): the call, the zeroing and the
// reduction cost as much as a short row's products.
//
// This kernel computes each output with the same operations in the same order (so the same
// bits; the per-shape probe of SmallMatmul.cpp still checks them against at::mm), keeping the
// accumulators in registers and the activations widened to float32 once per call instead of
// once per weight row.
#include "SmallMatmulDot.h"

#include <c10/util/BFloat16.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <cstdint>
#include <cstring>

namespace torch_neuron {

#if defined(__x86_64__)

bool dot_form_cpu() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }

namespace {
// Weight rows read ahead: each round of a row prefetches the same bytes of the row this many
// rows on (measured 2-16 on an AMD EPYC Zen 3: 4 best, ~10-40% over none for weights streamed
// from memory). As integer addresses: a prefetch past the weight's end never faults, but a
// pointer there would be undefined.
constexpr int64_t kAheadRows = 4;

// Eight bfloat16 values widened to float32 (exact: the bits shifted into the upper half).
__attribute__((target("avx2,fma"), always_inline)) inline __m256 widen8(const uint16_t* p) {
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}

// ATen's AVX2 vec_reduce_all with std::plus: halves, then pairs of pairs, then pairs.
__attribute__((target("avx2,fma"), always_inline)) inline float reduce_lanes(__m256 v) {
  v = _mm256_add_ps(v, _mm256_permute2f128_ps(v, v, 0x1));
  v = _mm256_add_ps(v, _mm256_permute_ps(v, 0x4E));
  v = _mm256_add_ps(v, _mm256_permute_ps(v, 0xB1));
  return _mm256_cvtss_f32(v);
}

// One output: weight row w . activations x (float32), k elements, in bf16_dot_with_fp32_arith's order.
__attribute__((target("avx2,fma"), always_inline)) inline float dot(const uint16_t* w, const float* x, int64_t k, uintptr_t ahead) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0, s7 = s0;
  const int64_t rounds = k & ~int64_t(63);
  for (int64_t j = 0; j < rounds; j += 64) {
    const uintptr_t next = reinterpret_cast<uintptr_t>(w) + ahead + uintptr_t(j) * sizeof(uint16_t);
    _mm_prefetch(reinterpret_cast<const char*>(next), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(next + 64), _MM_HINT_T0);
    s0 = _mm256_fmadd_ps(widen8(w + j), _mm256_loadu_ps(x + j), s0);
    s1 = _mm256_fmadd_ps(widen8(w + j + 8), _mm256_loadu_ps(x + j + 8), s1);
    s2 = _mm256_fmadd_ps(widen8(w + j + 16), _mm256_loadu_ps(x + j + 16), s2);
    s3 = _mm256_fmadd_ps(widen8(w + j + 24), _mm256_loadu_ps(x + j + 24), s3);
    s4 = _mm256_fmadd_ps(widen8(w + j + 32), _mm256_loadu_ps(x + j + 32), s4);
    s5 = _mm256_fmadd_ps(widen8(w + j + 40), _mm256_loadu_ps(x + j + 40), s5);
    s6 = _mm256_fmadd_ps(widen8(w + j + 48), _mm256_loadu_ps(x + j + 48), s6);
    s7 = _mm256_fmadd_ps(widen8(w + j + 56), _mm256_loadu_ps(x + j + 56), s7);
  }
  const __m256 low = _mm256_add_ps(_mm256_add_ps(s0, s4), _mm256_add_ps(s2, s6));
  const __m256 high = _mm256_add_ps(_mm256_add_ps(s1, s5), _mm256_add_ps(s3, s7));
  const float rounds_sum = reduce_lanes(_mm256_add_ps(low, high));
  // Blocks of 16 after the rounds, into one accumulator (low eight, then high eight). Added
  // also when there are none: ATen adds the reduced zero, which turns a sum of -0 into +0.
  __m256 tail = _mm256_setzero_ps();
  const int64_t blocks = k & ~int64_t(15);
  for (int64_t j = rounds; j < blocks; j += 16) {
    tail = _mm256_fmadd_ps(widen8(w + j), _mm256_loadu_ps(x + j), tail);
    tail = _mm256_fmadd_ps(widen8(w + j + 8), _mm256_loadu_ps(x + j + 8), tail);
  }
  __m128 sum = _mm_add_ss(_mm_set_ss(rounds_sum), _mm_set_ss(reduce_lanes(tail)));
  // Single elements: a product rounded, then added (scalar intrinsics: the compiler must not fuse them).
  for (int64_t j = blocks; j < k; ++j) {
    const uint32_t bits = uint32_t(w[j]) << 16;
    float value;
    std::memcpy(&value, &bits, sizeof(value));
    sum = _mm_add_ss(sum, _mm_mul_ss(_mm_set_ss(value), _mm_set_ss(x[j])));
  }
  return _mm_cvtss_f32(sum);
}

}  // namespace

__attribute__((target("avx2,fma"))) void run_dot_rows(uint16_t* out, const float* a_float, const uint16_t* w,
                                                      int64_t ldw, int64_t m, int64_t k, int64_t n, int64_t begin,
                                                      int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const uint16_t* row = w + i * ldw;
    for (int64_t r = 0; r < m; ++r) {
      out[r * n + i] = c10::BFloat16(dot(row, a_float + r * k, k, uintptr_t(kAheadRows * ldw) * sizeof(uint16_t))).x;
    }
  }
}

#else

bool dot_form_cpu() { return false; }

void run_dot_rows(uint16_t*, const float*, const uint16_t*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t) {}

#endif  // defined(__x86_64__)

void widen_activations(float* out, const uint16_t* a, int64_t lda, int64_t m, int64_t k) {
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < k; ++j) {
      const uint32_t bits = uint32_t(a[r * lda + j]) << 16;
      std::memcpy(&out[r * k + j], &bits, sizeof(float));
    }
  }
}

}  // namespace torch_neuron
