// Note [Small bfloat16 matmuls]
// A bfloat16 aten::mm on an AVX-512 CPU goes to oneDNN's matmul primitive, which spends ~13-20 us
// per call building its primitive descriptor and scratchpad, whatever the size; a decode step of
// a small model is mostly such calls (28 of a 4-layer Llama's 29 matmuls are 128x128 to 128x256
// weights at one token). The arithmetic inside that primitive is oneDNN's brgemm micro-kernel
// (AMX tiles where the CPU has them, else vdpbf16ps on AVX512-BF16), and ATen exports that kernel
// directly (at::native::cpublas::brgemm, the one Inductor's CPU templates call), cached per
// shape. Eager mm (kernels/Hot.cpp on its direct path, kernels/Generic.cpp when queued in
// asynchronous mode) and programs (compile/Executor.cpp) run a bfloat16 matmul with at most 32
// rows of activations through it, in one of two forms (small_matmul_form()):
// - transposed (AMX): out^T = w @ a^T, so that the weight is the kernel's A operand, read where
//   it lies (nn.Linear's rows of k contiguous elements), and only the activations are packed
//   into the VNNI layout of its B operand (zero-padded to 16 or 32 columns; free for tiles).
//   ~2.5-4 us instead of ~18-20 for a 128x128 to 128x256 weight at one token; 53 instead of 121
//   for 768x2560 (Intel, two threads).
// - direct (AVX512-BF16 without AMX, where the padding above would cost 16 times the vdpbf16ps
//   of one row): out = a @ w^T, the weight packed 64 rows at a time into the B operand's VNNI
//   layout (16x16 transposes in registers, the block staying in cache) and the activations the
//   A operand as they lie. 1.0-1.6 us instead of ~13 for 128x128 to 128x256, 8 instead of 20 for
//   256x688, parity for a 32000-row vocabulary projection (AMD EPYC, one thread); with several
//   rows and weights of millions of elements up to ~15% slower than at::mm. One row of
//   activations (every decode step) skips brgemm and the packed copy: 32 weight rows at a time
//   are loaded, transposed in registers and fed to vdpbf16ps (the instruction brgemm runs, over
//   the same pairs in the same order), while the next 32 rows are prefetched into L2 in address
//   order; a weight of millions of elements then streams at ~15-22 GB/s instead of at::mm's ~8
//   (1.5-2.6x faster per product for 768x768 to 768x32000; AMD EPYC, one thread).
// - dot (an AVX2 CPU without AVX-512, SmallMatmulDot.h): at::mm runs no oneDNN there (ATen's
//   mkldnn_bf16_device_check wants AVX-512) but cpublas's gemm_transa_, one call of ATen's AVX2
//   bf16_dot_with_fp32_arith per output (eight accumulators on the stack, zeroed per call, a
//   fixed order of rounds, blocks and single elements). The kernel computes every output with the
//   same operations in the same order, the accumulators in registers, the activations widened to
//   float32 once per call, the weight rows prefetched ahead: 1.3-3x faster per product (AMD EPYC
//   Zen 3, one thread; 128x32000 2.3x, 768x768 2.5-3x, 768x2560 1.4-1.8x, 8x768x2560 3x). All of
//   K is one piece, and the thread count changes no bits (each output is one dot product).
// Every form: a weight changed in place, even through .data, is always seen (nothing derived from
// it is kept), each output is the same dot product of a weight row and an activation row that
// at::mm computes, by the same kernel, and it ends with the same hardware conversion to bfloat16
// (vcvtneps2bf16). oneDNN's matmul sums a long K in pieces (on AVX512-BF16 without AMX: 512 or
// 1024 elements, each summed from zero then added to the rest); run_rows and run_direct_rows sum
// in pieces of a given depth the same way (brgemm's add_C). A large weight's rows are split among
// the intra-op threads.
//
// The point is that the results stay equal to the CPU's at::mm bit for bit (eager neuron equals
// CPU, compiled equals eager, as the fused pointwise kernels of compile/Pointwise.h keep them).
// That is an observation about oneDNN, not a documented promise, so it is checked: the first
// time a process meets a shape at an intra-op thread count (oneDNN splits some shapes' sums
// among its threads, so at::mm's bits depend on the count; the kernel's do not), it runs both
// ways on probe data (random values, values whose float32 sum depends on the order of addition,
// products in the denormal range), for each candidate depth (all of K, then 512 and 1024), and
// uses the kernel for that shape and count at the first depth whose every bit matched;
// otherwise it keeps at::mm. One probe per key, outside any lock other calls need; later calls
// look the verdict up in a per-thread table.
//
// Kept at::mm: NEURON_SIM_SMALL_MATMUL=0; torch.backends.mkldnn.flags(enabled=False) (at::mm
// then avoids oneDNN, and ATen's brgemm refuses to run; checked per call; the dot form keeps
// at::mm there too); an AVX-512 CPU without AVX512-BF16, or where ATen's bfloat16 brgemm does not
// run (oneDNN's ISA below avx512_core_bf16, e.g. ONEDNN_MAX_CPU_ISA=AVX2; asked once per process
// by running it); any CPU but x86-64; ATen's dot products in another order than its AVX2 ones
// (ATEN_CPU_CAPABILITY=default: the probe rejects every shape); K odd; more than 32 rows of activations; weights over 32M elements (their probe would
// cost > 0.1 s); layouts the kernel cannot read (activations or weight rows not unit-strided
// along K, a non-contiguous output, an output overlapping an input).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace torch_neuron {

// Whether a bfloat16 out[m, n] = a[m, k] @ b[k, n] (b the transpose of a row-major weight)
// runs through the brgemm kernel: the size rule, the CPU, and the bit-for-bit probe of the
// shape (run once per process per shape).
bool small_matmul_applies(int64_t m, int64_t k, int64_t n);

// small_matmul_applies for a @ b given as tensors: both bfloat16 and 2-D, inner sizes equal.
// Probes the shape the first time: call it outside an allocation redirect or output lending.
bool small_matmul_suits(const at::Tensor& a, const at::Tensor& b);

// a @ b into a fresh CPU tensor (allocated as at::cpu::mm allocates its result, so that a
// redirect or lending in effect places it), through small_matmul.
at::Tensor small_matmul(const at::Tensor& a, const at::Tensor& b);

// out = a @ b: through the brgemm kernel when small_matmul_applies and the tensors' layout
// fits (and out overlaps neither input), else at::cpu::mm_out. out is [m, n].
void small_matmul(at::Tensor& out, const at::Tensor& a, const at::Tensor& b);

// Tests only: the kernel whatever the probe said (in the pieces of k the probe chose, or in one
// where it chose none), when the layout fits (false: it did not run).
bool small_matmul_unchecked(at::Tensor& out, const at::Tensor& a, const at::Tensor& b);

// How the kernel runs on this CPU: "transposed" (AMX), "direct" (AVX512-BF16 without AMX), "dot"
// (AVX2 without AVX-512) or "none" (at::mm everywhere: no AVX512-BF16, oneDNN's ISA limit below avx512_core_bf16, or
// NEURON_SIM_SMALL_MATMUL=0). Asked with oneDNN enabled; "none" while it is off.
std::string small_matmul_form();

// How many products took the brgemm kernel in this process (tests, profiling).
uint64_t small_matmul_calls();

}  // namespace torch_neuron
