// The dot form of the small bfloat16 matmuls (Note [Small bfloat16 matmuls], SmallMatmul.h): an
// AVX2 CPU without AVX-512, where at::mm computes a bfloat16 product as one dot product per
// output (ATen's cpublas gemm_transa_ calling its AVX2 bf16_dot_with_fp32_arith for each weight
// row and row of activations). Internal to SmallMatmul.cpp.
#pragma once

#include <cstdint>

namespace torch_neuron {

// Whether this CPU runs the dot form's kernel (x86-64 with AVX2 and FMA).
bool dot_form_cpu();

// out[r, i] (r < m, i in [begin, end); out is [m, n] contiguous) = the bfloat16 of the dot
// product of weight row i (w + i * ldw, k elements) and activation row r (a + r * lda), summed
// as ATen's AVX2 bf16_dot_with_fp32_arith sums it. `a_float` holds the activations widened to
// float32, m rows of k (widen_activations).
void run_dot_rows(uint16_t* out, const float* a_float, const uint16_t* w, int64_t ldw, int64_t m, int64_t k,
                  int64_t n, int64_t begin, int64_t end);

// a [m, k] (row stride lda) widened to float32 into `out` (m * k floats): exact.
void widen_activations(float* out, const uint16_t* a, int64_t lda, int64_t m, int64_t k);

}  // namespace torch_neuron
