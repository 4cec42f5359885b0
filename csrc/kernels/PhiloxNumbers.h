// Note [Philox numbers]: the numbers of a random op's elements. Element i of an op (row-major)
// draws its k-th number from word offset + i of Philox subsequence k (Note [Random kernels] in
// Random.h), computed a chunk of elements at a time; the result does not depend on how the
// elements are split among threads. Used by the kernels of Random.cpp.
//
// Thread safety: a ChunkDraws belongs to one thread; fill_elements parallelises over chunks.
#pragma once

#include <ATen/Parallel.h>
#include <ATen/core/PhiloxRNGEngine.h>
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstdint>

#include "../NeuronGenerator.h"

namespace torch_neuron {
namespace philox {

// Word `word` of Philox subsequence `subsequence` under key `seed` (ATen's Philox4x32-10:
// one 128-bit block per 4 words).
inline uint32_t philox_word(uint64_t seed, uint64_t subsequence, uint64_t word) {
  at::philox_engine engine(seed, subsequence, word / 4);
  for (uint64_t skip = word % 4; skip > 0; --skip) engine();
  return engine();
}

// The numbers of elements [first, first + count) of one op (count <= kChunk): row k holds
// each element's k-th number, computed for the whole chunk the first time an element asks
// for it (one Philox block per 4 elements); numbers past kRows are computed one by one
// (rejection samplers: gamma, Poisson, binomial).
class ChunkDraws {
 public:
  static constexpr int64_t kChunk = 256;
  static constexpr uint32_t kRows = 4;

  ChunkDraws(const PhiloxDraws& draws, int64_t first, int64_t count) : draws_(draws), first_(first), count_(count) {}

  uint32_t word(uint32_t subsequence, int64_t index) {
    if (subsequence >= kRows) return philox_word(draws_.seed, subsequence, draws_.offset + first_ + index);
    if (!(ready_ & (1u << subsequence))) fill(subsequence);
    return rows_[subsequence][index];
  }

 private:
  void fill(uint32_t subsequence) {
    const uint64_t word = draws_.offset + uint64_t(first_);
    at::philox_engine engine(draws_.seed, subsequence, word / 4);
    for (uint64_t skip = word % 4; skip > 0; --skip) engine();
    for (int64_t i = 0; i < count_; ++i) rows_[subsequence][i] = engine();
    ready_ |= 1u << subsequence;
  }

  PhiloxDraws draws_;
  int64_t first_, count_;
  uint32_t ready_ = 0;
  uint32_t rows_[kRows][kChunk];
};

// The source of numbers of one element, in the interface ATen's distributions draw from
// (random(), random64()); it keeps no normal sample between elements.
struct ElementDraws {
  ChunkDraws* chunk;
  int64_t index;
  uint32_t next = 0;
  uint32_t random() { return chunk->word(next++, index); }
  uint64_t random64() {
    const uint64_t low = random();
    return (uint64_t(random()) << 32) | low;
  }
};

// Writes value(element's draws, i) to every element i (row-major) of host tensor `out`.
// The result does not depend on how the elements are split among threads.
template <typename scalar_t, typename Value>
void fill_elements(const at::Tensor& out, const PhiloxDraws& draws, const Value& value) {
  const at::Tensor target = out.is_contiguous() ? out : at::empty(out.sizes(), out.options());
  scalar_t* data = target.mutable_data_ptr<scalar_t>();
  at::parallel_for(0, target.numel(), 16 * ChunkDraws::kChunk, [&](int64_t begin, int64_t end) {
    for (int64_t first = begin; first < end; first += ChunkDraws::kChunk) {
      const int64_t count = std::min(ChunkDraws::kChunk, end - first);
      ChunkDraws chunk(draws, first, count);
      for (int64_t j = 0; j < count; ++j) {
        ElementDraws rng{&chunk, j};
        data[first + j] = value(rng, first + j);
      }
    }
  });
  if (!target.is_same(out)) out.copy_(target);
}

}  // namespace philox
}  // namespace torch_neuron
