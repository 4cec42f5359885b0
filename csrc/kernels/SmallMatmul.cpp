#include "SmallMatmul.h"
#include "SmallMatmulDot.h"

#include <ATen/CPUFunctions.h>
#include <ATen/Context.h>
#include <ATen/EmptyTensor.h>
#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <ATen/native/CPUBlas.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/BFloat16.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace torch_neuron {
namespace {

constexpr int64_t kMaxRows = 32;              // m: the columns of the packed operand
constexpr int64_t kMaxWeight = int64_t(1) << 25;  // k * n: a larger weight's probe costs > 0.1 s
constexpr int64_t kMaxK = int64_t(1) << 16;       // k: the transposed form's packed activations (4 MiB)
constexpr int64_t kParallelWeight = 1 << 16;    // k * n from which the rows are split among threads
constexpr int64_t kChunkRows = 1024;            // weight rows per brgemm call (bounds the accumulator)
constexpr int64_t kProbeRows = 2048;            // weight rows drawn at random by the probe

std::atomic<uint64_t> kernel_calls{0};  // small_matmul_calls()

// The CPU's side: AVX512-BF16 for the final conversion, and ATen's bfloat16 brgemm with VNNI
// operands running at all. ATen allows that kernel from oneDNN's avx512_core, but oneDNN's
// bfloat16 micro-kernel needs avx512_core_bf16 (AMX is not needed: on an AVX512-BF16 CPU without
// AMX it runs with vdpbf16ps), and it refuses below that (an AVX2 CPU, or ONEDNN_MAX_CPU_ISA=AVX2,
// AVX512_CORE, AVX512_CORE_VNNI). oneDNN's own ISA query is not exported from libtorch, so the
// answer is the kernel's: one 16x16x2 product, which throws where it cannot run (and while
// torch.backends.mkldnn is off: form() does not keep an answer it cannot trust).
bool kernel_runs_here() {
  try {
    const uint16_t one = 0x3F80;  // 1.0 in bfloat16
    std::vector<uint16_t> w(16 * 2, one), packed(16 * 2, one);
    std::vector<float> out(16 * 16, 0.0f);
    at::native::cpublas::brgemm(16, 16, 2, 2, 16, 16, /*add_C=*/false, reinterpret_cast<const at::BFloat16*>(w.data()),
                                reinterpret_cast<const at::BFloat16*>(packed.data()), out.data(), /*is_vnni=*/true);
    at::native::cpublas::brgemm_release(/*is_vnni=*/true);
    return out[0] == 2.0f && out[255] == 2.0f;
  } catch (const std::exception&) {
    return false;
  }
}

// How the kernel runs on this CPU (Note [Small bfloat16 matmuls]): not at all; transposed, the
// weight read in place as brgemm's A operand (AMX: tiles make the padding of one row of
// activations to 16 columns free); direct, the weight packed block by block into brgemm's B
// operand (AVX512-BF16: each vdpbf16ps then covers 16 outputs, where the transposed form would
// spend 16 on one row of activations); dot, at::mm's own dot products computed faster
// (SmallMatmulDot.h: an AVX2 CPU without AVX-512, where at::mm runs no oneDNN).
enum class Form { kUnknown, kNone, kTransposed, kDirect, kDot };
std::atomic<Form> cpu_form{Form::kUnknown};
std::atomic<Form> last_found{Form::kUnknown};  // the previous determination, not kept yet

// The form for this CPU (and oneDNN's ISA limit); call while oneDNN is enabled. could_pack asks
// oneDNN's effective ISA for AMX (ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 on an AMX machine: direct);
// the trial asks whether ATen's brgemm runs bfloat16 at all (oneDNN's ISA at least
// avx512_core_bf16: not under ONEDNN_MAX_CPU_ISA=AVX2, AVX512_CORE or AVX512_CORE_VNNI).
Form form() {
  const Form known = cpu_form.load(std::memory_order_acquire);
  if (known != Form::kUnknown) return known;
  const char* env = std::getenv("NEURON_SIM_SMALL_MATMUL");
#if defined(__x86_64__)
  const bool supported = !(env && std::string(env) == "0") && __builtin_cpu_supports("avx512f") &&
                         __builtin_cpu_supports("avx512bf16") && kernel_runs_here();
#else
  const bool supported = false;  // arm64: at::mm everywhere
#endif
  // oneDNN switched off by another thread during the trial: no answer to keep yet.
  if (!at::globalContext().userEnabledMkldnn()) return Form::kNone;
  // Without AVX-512 at::mm runs no oneDNN for bfloat16 (ATen's mkldnn_bf16_device_check) but
  // cpublas's dot products, which the dot form computes; with AVX-512 but without AVX512-BF16 it
  // runs oneDNN, which no form here follows.
#if defined(__x86_64__)
  const bool dot = !(env && std::string(env) == "0") && !__builtin_cpu_supports("avx512f") && dot_form_cpu();
#else
  const bool dot = false;
#endif
  const Form found = dot                                                    ? Form::kDot
                     : !supported                                           ? Form::kNone
                     : at::native::cpublas::could_pack(at::kBFloat16) ? Form::kTransposed
                                                                            : Form::kDirect;
  if (!at::globalContext().userEnabledMkldnn()) return Form::kNone;
  // Kept once two determinations agree: another thread may switch oneDNN off for a moment during
  // the trial (ATen's brgemm then refuses as it does on a CPU it cannot run on, and could_pack
  // answers no), after which this one answers for the call that made it only.
  if (last_found.exchange(found, std::memory_order_acq_rel) == found) cpu_form.store(found, std::memory_order_release);
  return found;
}

bool cpu_supported() { return form() != Form::kNone; }

#if defined(__x86_64__)
// float32 -> bfloat16 with vcvtneps2bf16, the instruction oneDNN's kernels end with (round to
// nearest even, denormal inputs as zero). count is a multiple of 16.
__attribute__((target("avx512f,avx512bf16"))) void to_bfloat16(const float* in, uint16_t* out, int64_t count) {
  for (int64_t i = 0; i < count; i += 16) {
    const __m256bh converted = _mm512_cvtneps_pbh(_mm512_loadu_ps(in + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), reinterpret_cast<const __m256i&>(converted));
  }
}

// t[j][i] = v[i][j] for a 16x16 block of 32-bit elements (v is clobbered): within 128-bit lanes
// (32- then 64-bit interleaves), then the 4x4 grid of lanes.
__attribute__((target("avx512f"), always_inline)) inline void transpose16x16(__m512i* v, __m512i* t) {
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    v[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    v[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    v[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    v[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  // v[4g + j], lane L: elements 4g..4g+3 of column 4L + j
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __m512i low01 = _mm512_shuffle_i32x4(v[j], v[4 + j], 0x44), high01 = _mm512_shuffle_i32x4(v[j], v[4 + j], 0xEE);
    const __m512i low23 = _mm512_shuffle_i32x4(v[8 + j], v[12 + j], 0x44),
                  high23 = _mm512_shuffle_i32x4(v[8 + j], v[12 + j], 0xEE);
    t[j] = _mm512_shuffle_i32x4(low01, low23, 0x88);
    t[4 + j] = _mm512_shuffle_i32x4(low01, low23, 0xDD);
    t[8 + j] = _mm512_shuffle_i32x4(high01, high23, 0x88);
    t[12 + j] = _mm512_shuffle_i32x4(high01, high23, 0xDD);
  }
}

// Writes columns [first, first + columns) of out [m, n] in bfloat16 from accumulator [columns][width]
// (out^T in float32): 16x16 blocks transposed in registers, the rest one element at a time.
__attribute__((target("avx512f,avx512bf16"))) void store_transposed(uint16_t* out, int64_t m, int64_t n,
                                                                     int64_t first, const float* accumulator,
                                                                     int64_t columns, int64_t width) {
  int64_t c0 = 0;
  for (; c0 + 16 <= columns; c0 += 16) {
    for (int64_t r0 = 0; r0 < m; r0 += 16) {
      __m512i v[16], t[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) v[i] = _mm512_castps_si512(_mm512_loadu_ps(accumulator + (c0 + i) * width + r0));
      transpose16x16(v, t);
      // t[r]: column r of the block = activation row r0 + r, over output columns c0..c0+15
      for (int64_t r = 0; r < std::min<int64_t>(16, m - r0); ++r) {
        const __m256bh converted = _mm512_cvtneps_pbh(_mm512_castsi512_ps(t[r]));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (r0 + r) * n + first + c0),
                            reinterpret_cast<const __m256i&>(converted));
      }
    }
  }
  if (c0 == columns) return;
  float row[16] = {0};
  uint16_t converted[16];
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = c0; c < columns; ++c) row[c - c0] = accumulator[c * width + r];
    to_bfloat16(row, converted, 16);
    std::memcpy(out + r * n + first + c0, converted, size_t(columns - c0) * sizeof(uint16_t));
  }
}

// Rows [begin, end) of out^T = w @ packed, kChunkRows at a time (accumulated in float32,
// [rows][width]), written to out's columns [begin, end) in bfloat16. Each output element is the
// brgemm dot product over k in pieces of `depth` elements (the last one shorter): each piece
// summed from zero by the kernel, then added to the sum of the pieces before it (brgemm's add_C),
// the order in which oneDNN's matmul sums a K it blocks (Note [Small bfloat16 matmuls]), whichever
// chunk of rows or thread computes it. depth >= k: one piece.
void run_rows(uint16_t* out, int64_t m, int64_t n, int64_t k, int64_t depth, const uint16_t* w, int64_t ldw,
              const uint16_t* packed, int64_t width, int64_t begin, int64_t end) {
  thread_local std::vector<float> accumulator;
  struct Release {  // the AMX state goes back also when brgemm throws
    ~Release() { at::native::cpublas::brgemm_release(/*is_vnni=*/true); }
  } release;
  for (int64_t first = begin; first < end; first += kChunkRows) {
    const int64_t rows = std::min(kChunkRows, end - first);
    accumulator.resize(size_t(rows * width));
    for (int64_t piece = 0; piece < k; piece += depth) {
      at::native::cpublas::brgemm(rows, width, std::min(depth, k - piece), ldw, width, width, /*add_C=*/piece > 0,
                                  reinterpret_cast<const at::BFloat16*>(w + first * ldw + piece),
                                  reinterpret_cast<const at::BFloat16*>(packed + piece * width), accumulator.data(),
                                  /*is_vnni=*/true);
    }
    store_transposed(out, m, n, first, accumulator.data(), rows, width);
  }
}

// The transposed form (AMX). out [m, n] contiguous = a [m, k] (row stride lda) @ w^T (w [n, k],
// row stride ldw), computed transposed: out^T [n, m] = w @ a^T. The weight is brgemm's A operand, read where it lies
// (rows of k contiguous elements, the layout nn.Linear keeps); only the activations are packed
// into the VNNI layout of the B operand, zero-padded to 16 or 32 columns. Each output is the
// dot product of a row of w and a row of a that at::mm computes, summed by the same kernel.
// A large weight's rows are split among the intra-op threads, in blocks of 16.
void run_transposed(uint16_t* out, const uint16_t* a, int64_t lda, const uint16_t* w, int64_t ldw, int64_t m,
                    int64_t k, int64_t n, int64_t depth) {
  thread_local std::vector<uint16_t> packed;  // a^T in VNNI layout [k/2][width][2]
  const int64_t width = m <= 16 ? 16 : 32;
  const int64_t pairs = k / 2;
  packed.assign(size_t(k * width), 0);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t p = 0; p < pairs; ++p) std::memcpy(&packed[size_t(2 * (p * width + r))], a + r * lda + 2 * p, 4);
  }
  const uint16_t* b = packed.data();
  if (k * n < kParallelWeight || at::get_num_threads() < 2 || at::in_parallel_region()) {
    run_rows(out, m, n, k, depth, w, ldw, b, width, 0, n);
    return;
  }
  const int64_t blocks = (n + 15) / 16;
  const int64_t threads = std::min<int64_t>(at::get_num_threads(), blocks);
  const int64_t per_thread = (blocks + threads - 1) / threads;
  at::parallel_for(0, threads, 1, [&](int64_t first, int64_t last) {
    for (int64_t t = first; t < last; ++t) {
      const int64_t begin = std::min(n, t * per_thread * 16), end = std::min(n, (t + 1) * per_thread * 16);
      if (begin < end) run_rows(out, m, n, k, depth, w, ldw, b, width, begin, end);
    }
  });
}

constexpr int64_t kBlock = 64;            // the direct form: weight rows packed per brgemm call
constexpr int64_t kMaxDirectDepth = 1024;  // the direct form: the longest piece of k packed at once

// The first `count` of 16 lanes (count in [0, 16]).
inline __mmask16 first_lanes(int64_t count) {
  return count >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << count) - 1);
}

// A partial 16x16 block of 32-bit pairs, transposed (t[q] = pair q of the 16 rows): rows [0, live)
// at w (row stride ldw), the pairs under `mask` loaded, the rest zero (no read past a row's last
// pair or the last row).
__attribute__((target("avx512f"), always_inline)) inline void load_partial_transposed(const uint16_t* w, int64_t ldw,
                                                                                       int64_t live, __mmask16 mask,
                                                                                       __m512i* t) {
  __m512i v[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) v[i] = i < live ? _mm512_maskz_loadu_epi32(mask, w + i * ldw) : _mm512_setzero_si512();
  transpose16x16(v, t);
}

// Pairs [first_pair, last_pair) of rows [0, rows) of w (row stride ldw) into brgemm's VNNI B
// layout packed[pair - first_pair][columns][2] (columns: rows rounded up to 16; the rows past
// `rows` are zero): 16x16 blocks of 32-bit pairs transposed in registers, partial blocks by
// load_partial_transposed.
__attribute__((target("avx512f"))) void pack_block(const uint16_t* w, int64_t ldw, int64_t rows, int64_t columns,
                                                   int64_t first_pair, int64_t last_pair, uint32_t* packed) {
  for (int64_t r0 = 0; r0 < columns; r0 += 16) {
    const int64_t live = std::min<int64_t>(16, rows - r0);
    for (int64_t p0 = first_pair; p0 < last_pair; p0 += 16) {
      const int64_t count = std::min<int64_t>(16, last_pair - p0);
      __m512i v[16], t[16];
      uint32_t* to = packed + (p0 - first_pair) * columns + r0;
      if (live == 16 && count == 16) {  // the common case, kept in registers
#pragma GCC unroll 16
        for (int i = 0; i < 16; ++i) v[i] = _mm512_loadu_si512(w + (r0 + i) * ldw + 2 * p0);
        transpose16x16(v, t);
#pragma GCC unroll 16
        for (int q = 0; q < 16; ++q) _mm512_storeu_si512(to + q * columns, t[q]);
        continue;
      }
      load_partial_transposed(w + r0 * ldw + 2 * p0, ldw, live, first_lanes(count), t);
      for (int64_t q = 0; q < count; ++q) _mm512_storeu_si512(to + q * columns, t[q]);
    }
  }
}

// One row of activations (a decode step) in the direct form, without brgemm or a packed copy:
// weight rows [begin, end) of out[0, :] = a @ w^T, kRowBlocks blocks of 16 rows at a time. For
// each 16 pairs of k, each block's 16 rows are loaded (16 x 64 bytes) and transposed in
// registers (load_transposed; partial blocks as pack_block), so that register q holds pair q of the
// 16 rows, and vdpbf16ps adds that pair's products with a's pair q (broadcast) into the block's
// 16 float32 sums: for each output the same instruction over the same pairs in the same order as
// brgemm over a packed block, each piece of k (depth) summed from zero and then added to the
// pieces before it, the sum converted with vcvtneps2bf16. The blocks are interleaved so that their
// chains of dependent vdpbf16ps overlap; the weight streams through once (the packed form wrote
// and re-read a copy of each block and paid a brgemm call per 64 rows).
constexpr int kRowBlocks = 2;

// t[q] = pair q of rows 0..15 (32-bit lanes: lane r = row r), for 16 rows of 16 pairs at w (row
// stride ldw): each 128-bit lane of u[4g + j] is loaded with pairs 4g..4g+3 of row 4L + j (four
// 128-bit loads merged by masked broadcasts, done by the load ports), then a 4x4 transpose within
// each lane (8 in-lane shuffles per 4 registers) puts pair 4g + c of rows 4L..4L+3 in lane L of
// t[4g + c]: 32 shuffles where transpose16x16 needs 64.
__attribute__((target("avx512f"), always_inline)) inline void load_transposed(const uint16_t* w, int64_t ldw,
                                                                               __m512i* t) {
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    __m512i u[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const uint16_t* at = w + 8 * g;  // pairs 4g..4g+3 of a row: 8 elements
      __m512i v = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at + j * ldw)));
      v = _mm512_mask_broadcast_i32x4(v, 0x00F0, _mm_loadu_si128(reinterpret_cast<const __m128i*>(at + (4 + j) * ldw)));
      v = _mm512_mask_broadcast_i32x4(v, 0x0F00, _mm_loadu_si128(reinterpret_cast<const __m128i*>(at + (8 + j) * ldw)));
      u[j] = _mm512_mask_broadcast_i32x4(v, 0xF000, _mm_loadu_si128(reinterpret_cast<const __m128i*>(at + (12 + j) * ldw)));
    }
    // lane L of u[j]: dwords c = pair 4g + c of row 4L + j -> lane L of t[4g + c]: dword j = row 4L + j
    const __m512i a0 = _mm512_unpacklo_epi32(u[0], u[1]), a1 = _mm512_unpackhi_epi32(u[0], u[1]);
    const __m512i a2 = _mm512_unpacklo_epi32(u[2], u[3]), a3 = _mm512_unpackhi_epi32(u[2], u[3]);
    t[4 * g + 0] = _mm512_unpacklo_epi64(a0, a2);
    t[4 * g + 1] = _mm512_unpackhi_epi64(a0, a2);
    t[4 * g + 2] = _mm512_unpacklo_epi64(a1, a3);
    t[4 * g + 3] = _mm512_unpackhi_epi64(a1, a3);
  }
}

// Group `group` of `groups` asks for its share of the next row blocks' weight (elements [next,
// stop) of w), to be brought into L2 (prefetcht1), a line at a time: the weight streams
// from memory in address order while the current blocks are computed. Without it each of the 32
// rows is its own stream of 64-byte reads, and the hardware's prefetchers keep up with few of them
// (measured on an AMD EPYC, one thread: 768x2560 weights at 8 GB/s without, 18 with).
__attribute__((always_inline)) inline void prefetch_share(const uint16_t* w, int64_t next, int64_t stop,
                                                          int64_t group, int64_t groups) {
  // [next, stop): element offsets from w (no pointer is formed past the weight's end)
  const char* from = reinterpret_cast<const char*>(w);
  const int64_t first = next * int64_t(sizeof(uint16_t)), bytes = (stop - next) * int64_t(sizeof(uint16_t));
  if (bytes <= 0) return;  // the last row blocks
  const int64_t share = (bytes + groups - 1) / groups;
  for (int64_t offset = group * share; offset < std::min(bytes, (group + 1) * share); offset += 64) {
    _mm_prefetch(from + first + offset, _MM_HINT_T1);
  }
}

__attribute__((target("avx512f,avx512bf16,avx512bw,avx512vl"))) void run_one_row(uint16_t* out, const uint16_t* a,
                                                                               const uint16_t* w, int64_t ldw,
                                                                               int64_t k, int64_t depth,
                                                                               int64_t begin, int64_t end) {
  const int64_t pairs = k / 2, piece_pairs = std::max<int64_t>(1, std::min(depth, k) / 2);
  const int64_t groups = (pairs + 15) / 16;  // of 16 pairs, per row block
  for (int64_t r0 = begin; r0 < end; r0 += 16 * kRowBlocks) {
    int64_t live[kRowBlocks];
    for (int b = 0; b < kRowBlocks; ++b) live[b] = std::clamp<int64_t>(end - (r0 + 16 * b), 0, 16);
    // the next row blocks (up to row `end`), prefetched a share per group of pairs
    const int64_t next = (r0 + 16 * kRowBlocks) * ldw, next_stop = std::min(end * ldw, next + 16 * kRowBlocks * ldw);
    __m512 total[kRowBlocks];
    for (int64_t piece = 0; piece < pairs; piece += piece_pairs) {
      const int64_t last = std::min(pairs, piece + piece_pairs);
      __m512 sum[kRowBlocks];
      for (int b = 0; b < kRowBlocks; ++b) sum[b] = _mm512_setzero_ps();
      for (int64_t p0 = piece; p0 < last; p0 += 16) {
        const int64_t count = std::min<int64_t>(16, last - p0);
        prefetch_share(w, next, next_stop, p0 / 16, groups);
#pragma GCC unroll 2
        for (int b = 0; b < kRowBlocks; ++b) {
          if (live[b] == 0) continue;
          const uint16_t* rows = w + (r0 + 16 * b) * ldw + 2 * p0;
          __m512i t[16];
          if (live[b] == 16 && count == 16) {
            load_transposed(rows, ldw, t);
          } else {
            load_partial_transposed(rows, ldw, live[b], first_lanes(count), t);
          }
          for (int64_t q = 0; q < count; ++q) {
            int32_t bits;  // a's pair p0 + q
            std::memcpy(&bits, a + 2 * (p0 + q), sizeof(bits));
            const __m512i pair = _mm512_set1_epi32(bits);
            sum[b] = _mm512_dpbf16_ps(sum[b], reinterpret_cast<const __m512bh&>(t[q]),
                                      reinterpret_cast<const __m512bh&>(pair));
          }
        }
      }
      for (int b = 0; b < kRowBlocks; ++b) {
        if (piece == 0) {
          total[b] = sum[b];
        } else {
          // sum + total with the new piece first, as brgemm's add_C: of two NaNs x86 returns the
          // first operand's, so the later piece's NaN wins, as in at::mm (review 44, finding 1).
          // _mm512_add_ps(sum, total) would not do: the compiler may swap a commutative add.
          __m512 added;
          asm("vaddps %2, %1, %0" : "=v"(added) : "v"(sum[b]), "v"(total[b]));
          total[b] = added;
        }
      }
    }
    for (int b = 0; b < kRowBlocks; ++b) {
      if (live[b] == 0) continue;
      const __m256bh converted = _mm512_cvtneps_pbh(total[b]);
      _mm256_mask_storeu_epi16(out + r0 + 16 * b, first_lanes(live[b]), reinterpret_cast<const __m256i&>(converted));
    }
  }
}

// Weight rows [begin, end) in the direct form: blocks of up to kBlock rows, each piece of k
// (depth elements, as in run_rows) packed and multiplied by brgemm (a is its A operand as it
// lies: out[:, block] = a @ block^T, the piece's sum added to the pieces before it), each row of
// the float32 result converted to bfloat16. The packed piece is at most depth/2 x kBlock pairs
// (candidate_depths keeps depth <= kMaxDirectDepth in this form), so it stays in cache.
void run_direct_rows(uint16_t* out, const uint16_t* a, int64_t lda, const uint16_t* w, int64_t ldw, int64_t m,
                     int64_t k, int64_t n, int64_t depth, int64_t begin, int64_t end) {
  if (m == 1) {
    run_one_row(out, a, w, ldw, k, depth, begin, end);
    return;
  }
  thread_local std::vector<uint32_t> packed;
  thread_local std::vector<float> accumulator;
  packed.resize(size_t((std::min(depth, k) / 2) * kBlock));
  accumulator.resize(size_t(m * kBlock));
  struct Release {  // as in run_rows
    ~Release() { at::native::cpublas::brgemm_release(/*is_vnni=*/true); }
  } release;
  uint16_t converted[kBlock];
  for (int64_t first = begin; first < end; first += kBlock) {
    const int64_t rows = std::min(kBlock, end - first);
    const int64_t columns = (rows + 15) / 16 * 16;
    for (int64_t piece = 0; piece < k; piece += depth) {
      const int64_t length = std::min(depth, k - piece);
      pack_block(w + first * ldw, ldw, rows, columns, piece / 2, (piece + length) / 2, packed.data());
      at::native::cpublas::brgemm(m, columns, length, lda, columns, kBlock, /*add_C=*/piece > 0,
                                  reinterpret_cast<const at::BFloat16*>(a + piece),
                                  reinterpret_cast<const at::BFloat16*>(packed.data()), accumulator.data(),
                                  /*is_vnni=*/true);
    }
    for (int64_t r = 0; r < m; ++r) {
      to_bfloat16(accumulator.data() + r * kBlock, converted, columns);
      std::memcpy(out + r * n + first, converted, size_t(rows) * sizeof(uint16_t));
    }
  }
}

// The direct form (AVX512-BF16 without AMX), its weight rows split among the intra-op threads in
// blocks of kBlock.
void run_direct(uint16_t* out, const uint16_t* a, int64_t lda, const uint16_t* w, int64_t ldw, int64_t m, int64_t k,
                int64_t n, int64_t depth) {
  if (k * n < kParallelWeight || at::get_num_threads() < 2 || at::in_parallel_region()) {
    run_direct_rows(out, a, lda, w, ldw, m, k, n, depth, 0, n);
    return;
  }
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  const int64_t threads = std::min<int64_t>(at::get_num_threads(), blocks);
  const int64_t per_thread = (blocks + threads - 1) / threads;
  at::parallel_for(0, threads, 1, [&](int64_t first, int64_t last) {
    for (int64_t t = first; t < last; ++t) {
      const int64_t begin = std::min(n, t * per_thread * kBlock), end = std::min(n, (t + 1) * per_thread * kBlock);
      if (begin < end) run_direct_rows(out, a, lda, w, ldw, m, k, n, depth, begin, end);
    }
  });
}

// The dot form (an AVX2 CPU without AVX-512): the activations widened once, the weight rows
// split among the intra-op threads exactly as at::mm's gemm_transa_ splits them
// (at::parallel_for(0, n, 1): the same chunks on the same threads), so that even a per-thread
// floating-point mode (torch.set_flush_denormal after the pool started sets the calling thread's
// only) meets the same rows in both (review 45).
void run_dot(uint16_t* out, const uint16_t* a, int64_t lda, const uint16_t* w, int64_t ldw, int64_t m, int64_t k,
             int64_t n) {
  constexpr size_t kKeptFloats = size_t(1) << 16;  // a larger buffer is not kept for the thread's life
  thread_local std::vector<float> kept;
  std::vector<float> large;
  std::vector<float>& widened = size_t(m * k) <= kKeptFloats ? kept : large;
  widened.resize(size_t(m * k));
  widen_activations(widened.data(), a, lda, m, k);
  const float* a_float = widened.data();
  at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) { run_dot_rows(out, a_float, w, ldw, m, k, n, begin, end); });
}

// out [m, n] contiguous = a [m, k] @ w^T in the form `form`, k in pieces of depth (the dot form:
// all of k). The caller reads form() once and passes it: form() may answer kNone for a moment
// before its answer is kept (oneDNN switched off by another thread), and an AVX2 CPU must never
// reach the AVX-512 forms' code (review 45: SIGILL). kNone throws (callers fall back to at::mm).
void run_kernel(Form form, uint16_t* out, const uint16_t* a, int64_t lda, const uint16_t* w, int64_t ldw, int64_t m,
                int64_t k, int64_t n, int64_t depth) {
  switch (form) {
    case Form::kDot: run_dot(out, a, lda, w, ldw, m, k, n); return;
    case Form::kTransposed: run_transposed(out, a, lda, w, ldw, m, k, n, depth); return;
    case Form::kDirect: run_direct(out, a, lda, w, ldw, m, k, n, depth); return;
    default: TORCH_CHECK(false, "small matmul: no kernel form runs now (oneDNN switched off meanwhile?)");
  }
}
#else
// Off x86-64 form() is kNone: nothing calls the kernel.
void run_kernel(Form, uint16_t*, const uint16_t*, int64_t, const uint16_t*, int64_t, int64_t, int64_t, int64_t,
                int64_t) {
  TORCH_INTERNAL_ASSERT(false, "the small-matmul kernel runs on x86-64 only");
}
#endif  // defined(__x86_64__)

bool size_rule(int64_t m, int64_t k, int64_t n) {
  return m >= 1 && m <= kMaxRows && k >= 2 && k <= kMaxK && k % 2 == 0 && n >= 1 && k * n <= kMaxWeight;
}

// Probe data, as bfloat16 bits from a xorshift generator (a shape's probe fills its weight
// twice, and a vocabulary projection has tens of millions of elements).
struct Bits {
  uint64_t state;
  uint64_t next() {
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return state * 0x2545F4914F6CDD1DULL;
  }
  // A draw in [low, high] (multiply-shift: no division per element).
  int in_range(uint64_t r, int low, int high) { return low + int(((r >> 32) * uint64_t(high - low + 1)) >> 32); }
  // +-(1 + 7 random mantissa bits) * 2^e, e uniform in [low, high]
  uint16_t value(int low, int high) {
    const uint64_t r = next();
    return uint16_t(((r & 1) << 15) | (uint64_t(in_range(r, low, high) + 127) << 7) | ((r >> 1) & 0x7F));
  }
  // +-1, +-2 or +-3, times 2^e with e uniform in [low, high], as bfloat16 bits (3 = 1.5 * 2)
  uint16_t small_integer(int low = 0, int high = 0) {
    const uint64_t r = next();
    const int v = 1 + int(((r >> 1) & 0xFFFF) * 3 >> 16);
    const int e = in_range(r, low, high) + (v > 1 ? 1 : 0);
    return uint16_t(((r & 1) << 15) | (uint64_t(e + 127) << 7) | (v == 3 ? 0x40 : 0));
  }
};

// Activations of one kind: 0 ~1; 1 +-1..3 times 2^-2..2^12; 2 tiny (their products with the
// ~2^-40 weight fall in float32's denormal range, where kernels differ in flushing); 3 a wide
// mix of magnitudes; 4 +-1..3 (against the cancelling weight).
void fill_activations(std::vector<uint16_t>& a, int kind, Bits& bits) {
  for (auto& v : a) {
    switch (kind) {
      case 0: v = bits.value(-2, 1); break;
      case 1: v = bits.small_integer(-2, 12); break;
      case 2: v = bits.value(-100, -86); break;
      case 3: v = bits.value(-30, 30); break;
      default: v = bits.small_integer(); break;
    }
  }
}

// The depths tried, in order: all of k in one piece (AMX; any k up to 512), then the pieces in
// which oneDNN's avx512_core_bf16 matmul blocks a longer K (seen on an AMD EPYC without AMX: 512
// for one row of activations and for k <= 1024, else 1024). Which one oneDNN uses is its own
// heuristic, so the probe tries each and keeps the first whose bits all match.
std::vector<int64_t> candidate_depths(int64_t k, Form form) {
  std::vector<int64_t> depths;
  if (form == Form::kDot) return {k};  // at::mm's dot products sum all of k
  // the direct form packs a piece at once: all of a long k would not stay in cache
  if (form == Form::kTransposed || k <= kMaxDirectDepth) depths.push_back(k);
  for (const int64_t depth : {int64_t(512), int64_t(1024)}) {
    if (depth < k) depths.push_back(depth);
  }
  return depths;
}

// The depth (run_rows) at which the kernel equals at::mm bit for bit on every probe draw, or 0.
int64_t probe(int64_t m, int64_t k, int64_t n) {
  // Programs are built while torch.compile holds a FakeTensorMode: the probe's tensors are
  // real host memory and must not meet Python dispatch (as in ProgramExecutor::execute).
  c10::impl::ExcludeDispatchKeyGuard no_python(
      c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot}));
  Bits bits{uint64_t(m * 1000003 + k * 1009 + n) | 1};
  std::vector<uint16_t> a(size_t(m * k)), w(size_t(n * k)), mine(size_t(m * n));
  // The form once for the whole probe: an unsettled form() may answer kNone for a moment
  // (oneDNN switched off by another thread); that throws, and the verdict is not kept.
  const Form kernel_form = form();
  TORCH_CHECK(kernel_form != Form::kNone, "small matmul probe: no kernel form runs now");
  std::vector<int64_t> depths = candidate_depths(k, kernel_form);  // those still matching
  const auto options = at::TensorOptions().dtype(at::kBFloat16);
  // Two weights: values ~2^-40 with random mantissas (kinds 0-3), and a cancellation pattern
  // (kind 4): an eighth of entries +-2^20..2^26 among +-1..3, so that float32 partial sums
  // drop the small terms added while a big one is pending and the result shows the order of
  // addition (a kernel that sums in another order differs in most draws).
  for (int weight = 0; weight < 2; ++weight) {
    // Random rows up to kProbeRows, repeated below them (a vocabulary projection has tens of
    // millions of elements): every row is still computed and compared, in every thread's part.
    const size_t random = size_t(std::min(n, kProbeRows) * k);
    for (size_t i = 0; i < random; ++i) {
      w[i] = weight == 0 ? bits.value(-43, -38) : (bits.next() % 8 == 0 ? bits.value(20, 26) : bits.small_integer());
    }
    for (size_t done = random; done < w.size(); done += random) {
      std::memcpy(&w[done], w.data(), std::min(random, w.size() - done) * sizeof(uint16_t));
    }
    for (int kind = weight == 0 ? 0 : 4; kind < (weight == 0 ? 4 : 5); ++kind) {
      for (int draw = 0; draw < 2; ++draw) {
        fill_activations(a, kind, bits);
        const at::Tensor ta = at::from_blob(a.data(), {m, k}, options);
        const at::Tensor b = at::from_blob(w.data(), {k, n}, {1, k}, options);  // w^T, as nn.Linear passes it
        const at::Tensor expected = at::cpu::mm(ta, b);  // eager's kernel, without the dispatcher
        std::vector<int64_t> matching;
        for (const int64_t depth : depths) {
          run_kernel(kernel_form, mine.data(), a.data(), k, w.data(), k, m, k, n, depth);
          if (std::memcmp(expected.const_data_ptr(), mine.data(), mine.size() * sizeof(uint16_t)) == 0) {
            matching.push_back(depth);
          }
        }
        depths = std::move(matching);
        if (depths.empty()) return 0;
      }
    }
  }
  return depths.front();
}

// The depth at which the kernel computes a bfloat16 [m, k] @ [k, n] as at::mm does, at the
// current intra-op thread count; 0: keep at::mm.
int64_t kernel_depth(int64_t m, int64_t k, int64_t n) {
  // torch.backends.mkldnn.flags(enabled=False): at::mm then avoids oneDNN, and ATen's brgemm
  // refuses to run. Checked on every call, before the CPU's side.
  if (!size_rule(m, k, n) || !at::globalContext().userEnabledMkldnn() || !cpu_supported()) return 0;
  // oneDNN's matmul splits some shapes' sums among its threads, so at::mm's bits depend on the
  // intra-op thread count (32x768x31 sums differently at 1 thread and at 2); the kernel's
  // do not. A verdict holds for one thread count: the current thread's, as at::mm would use.
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t>;
  const Key key{m, k, n, int64_t(at::get_num_threads())};
  thread_local std::map<Key, int64_t> seen;  // no lock on later calls
  const auto known = seen.find(key);
  if (known != seen.end()) return known->second;
  // One probe per key, run outside the table's lock: a probe of a large shape takes up to
  // ~0.1 s, and calls on other shapes need not wait for it. A verdict is stored only when it
  // is reliable: oneDNN stayed on during the probe (another thread may turn it off for a
  // moment: at::mm then sums another way, or brgemm throws), and a
  // "no" is confirmed by a second probe. An unreliable one answers "no" for this call only.
  struct Verdict {
    std::mutex mutex;
    bool known = false;
    int64_t depth = 0;
  };
  static std::mutex mutex;
  static std::map<Key, std::shared_ptr<Verdict>> checked;
  std::shared_ptr<Verdict> verdict;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto& slot = checked[key];
    if (!slot) slot = std::make_shared<Verdict>();
    verdict = slot;
  }
  std::lock_guard<std::mutex> lock(verdict->mutex);
  if (!verdict->known) {
    auto attempt = [&]() -> std::optional<int64_t> {
      try {
        const int64_t value = probe(m, k, n);
        if (!at::globalContext().userEnabledMkldnn()) return std::nullopt;
        return value;
      } catch (const std::exception&) {  // e.g. oneDNN turned off meanwhile
        return std::nullopt;
      }
    };
    std::optional<int64_t> value = attempt();
    if (value.has_value() && *value == 0) value = attempt();
    if (!value.has_value()) return 0;
    verdict->known = true;
    verdict->depth = *value;
  }
  seen.emplace(key, verdict->depth);
  return verdict->depth;
}

}  // namespace

bool small_matmul_applies(int64_t m, int64_t k, int64_t n) { return kernel_depth(m, k, n) > 0; }

std::string small_matmul_form() {
  if (!at::globalContext().userEnabledMkldnn()) return "none";
  switch (form()) {
    case Form::kTransposed: return "transposed";
    case Form::kDirect: return "direct";
    case Form::kDot: return "dot";
    default: return "none";
  }
}

uint64_t small_matmul_calls() { return kernel_calls.load(std::memory_order_relaxed); }

bool small_matmul_suits(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == at::kBFloat16 && b.scalar_type() == at::kBFloat16 && a.dim() == 2 && b.dim() == 2 &&
         a.size(1) == b.size(0) && small_matmul_applies(a.size(0), a.size(1), b.size(1));
}

namespace {

// Whether the memory two tensors span (first to last element) intersects. Programs keep
// their values in one arena, so sharing a storage is common; sharing bytes is not.
bool spans_overlap(const at::Tensor& x, const at::Tensor& y) {
  if (x.numel() == 0 || y.numel() == 0) return false;
  auto span = [](const at::Tensor& t) {
    int64_t last = 0;
    for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
    const auto* first = static_cast<const char*>(t.const_data_ptr());
    return std::make_pair(first, first + (last + 1) * int64_t(t.element_size()));
  };
  const auto [x0, x1] = span(x);
  const auto [y0, y1] = span(y);
  return x0 < y1 && y0 < x1;
}

// The brgemm kernel at `depth` when the tensors' layout fits (whatever the probe says), else false.
bool run_if_layout_fits(at::Tensor& out, const at::Tensor& a, const at::Tensor& b, int64_t depth) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  const bool fits = a.scalar_type() == at::kBFloat16 && b.scalar_type() == at::kBFloat16 &&
                    out.scalar_type() == at::kBFloat16 && out.is_contiguous() && size_rule(m, k, n) &&
                    a.stride(1) == 1 && (m == 1 || a.stride(0) >= k) &&  // a: rows of k contiguous elements
                    b.stride(0) == 1 && b.stride(1) >= k &&              // b = w^T, w's rows contiguous
                    // threads write rows of out while others read rows of w
                    !spans_overlap(out, a) && !spans_overlap(out, b);
  if (!fits) return false;
  run_kernel(form(), static_cast<uint16_t*>(out.mutable_data_ptr()), static_cast<const uint16_t*>(a.const_data_ptr()),
             m == 1 ? k : a.stride(0), static_cast<const uint16_t*>(b.const_data_ptr()), b.stride(1), m, k, n, depth);
  kernel_calls.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace

void small_matmul(at::Tensor& out, const at::Tensor& a, const at::Tensor& b) {
  if (const int64_t depth = kernel_depth(a.size(0), a.size(1), b.size(1))) {
    try {
      if (run_if_layout_fits(out, a, b, depth)) return;
    } catch (const c10::Error&) {
      // ATen's brgemm checks oneDNN's flag on every call: another thread turned it off after
      // our check. at::mm computes it instead (out overlaps neither
      // input and is rewritten whole).
    }
  }
  at::cpu::mm_out(out, a, b);
}

at::Tensor small_matmul(const at::Tensor& a, const at::Tensor& b) {
  at::Tensor out = at::detail::empty_cpu({a.size(0), b.size(1)}, a.options());
  small_matmul(out, a, b);
  return out;
}

bool small_matmul_unchecked(at::Tensor& out, const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(at::globalContext().userEnabledMkldnn() && cpu_supported(),
              "small_matmul_unchecked: this CPU (or oneDNN's setting) does not run the brgemm kernel");
  // The depth the probe chose, or all of k in one piece where it chose none.
  const int64_t depth = kernel_depth(a.size(0), a.size(1), b.size(1));
  return run_if_layout_fits(out, a, b, depth > 0 ? depth : a.size(1));
}

}  // namespace torch_neuron
