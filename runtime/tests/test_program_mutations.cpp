// The program loader against sealed, structurally mutated programs (program_fuzzing.h): every
// program decode_program accepts keeps to its own memory as the executor would use it, and
// every one it refuses is refused with Error(kCorruptProgram). Deterministic (fixed seeds), so
// it runs in `make test`, also under AddressSanitizer; `make fuzz` runs the same mutations
// under libFuzzer for as long as it is given.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "runtime/error.h"
#include "runtime/program.h"
#include "runtime/tests/program_fuzzing.h"

using namespace neuron_rt;

TEST(ProgramMutations, SeedsAreAcceptedAndKeepToTheirMemory) {
  for (const ProgramDesc& seed : fuzzing::seed_programs()) {
    const std::string sealed = seal_program("seed", encode_program(seed));
    ProgramDesc loaded;
    ASSERT_NO_THROW(loaded = decode_program(unseal_program(sealed, "seed"))) << seed.name;
    EXPECT_EQ(fuzzing::first_breach(loaded), "") << seed.name;
  }
}

TEST(ProgramMutations, EveryAcceptedMutantKeepsToItsMemory) {
  const auto seeds = fuzzing::seed_programs();
  std::map<std::string, int> refusals;  // first words of each refusal: the checks reached
  int accepted = 0, refused = 0;
  constexpr int kRounds = 60000;
  for (int round = 0; round < kRounds; ++round) {
    fuzzing::Mutator mutator(0x5eed0000 + uint64_t(round));
    ProgramDesc program = seeds[round % seeds.size()];
    const int generations = 1 + int(mutator.below(4));
    for (int g = 0; g < generations; ++g) mutator.mutate(program);
    const std::string sealed = seal_program("k", encode_program(program));
    ProgramDesc loaded;
    try {
      loaded = decode_program(unseal_program(sealed, "k"));
    } catch (const Error& error) {
      ASSERT_EQ(error.code(), ErrorCode::kCorruptProgram) << error.what();
      ++refused;
      std::string rule;  // the message without its numbers and names: which check refused it
      for (char c : std::string(error.what())) {
        if (c == '(' || c == '\'') break;
        if (!(c >= '0' && c <= '9') && !(rule.size() && rule.back() == '#' && c == '#')) rule += c;
        else if (rule.empty() || rule.back() != '#') rule += '#';
      }
      refusals[rule] += 1;
      continue;
    }
    ++accepted;
    const std::string breach = fuzzing::first_breach(loaded);
    ASSERT_EQ(breach, "") << "round " << round << ": the loader accepted a program that " << breach;
  }
  // Both outcomes are exercised in quantity, and many distinct checks refuse something.
  EXPECT_GT(accepted, kRounds / 20);
  EXPECT_GT(refused, kRounds / 4);
  EXPECT_GT(refusals.size(), 30u);
  if (::testing::Test::HasFailure() || std::getenv("NEURON_SHOW_REFUSALS")) {
    std::printf("accepted %d, refused %d:\n", accepted, refused);
    for (const auto& [rule, times] : refusals) std::printf("%6d  %s\n", times, rule.c_str());
  }
}

TEST(ProgramMutations, ResealedByteDamageIsRefusedOrHarmless) {
  // Damage inside a payload that is then sealed again (a valid checksum over wrong bytes).
  const auto seeds = fuzzing::seed_programs();
  std::mt19937_64 random(77);
  for (int round = 0; round < 20000; ++round) {
    std::string payload = encode_program(seeds[round % seeds.size()]);
    const int edits = 1 + int(random() % 4);
    for (int e = 0; e < edits && !payload.empty(); ++e) {
      const size_t at = random() % payload.size();
      switch (random() % 3) {
        case 0: payload[at] = char(random()); break;
        case 1: payload[at] = char(payload[at] + (random() % 2 ? 1 : -1)); break;
        default: {  // an 8-byte field set to an edge value
          if (payload.size() >= 8) {
            const int64_t edges[] = {-1, 0, 1, INT64_MAX, INT64_MIN, int64_t(1) << 62, 4096};
            const int64_t v = edges[random() % 7];
            std::memcpy(&payload[random() % (payload.size() - 7)], &v, 8);
          }
        }
      }
    }
    ProgramDesc loaded;
    try {
      loaded = decode_program(unseal_program(seal_program("k", payload), "k"));
    } catch (const Error& error) {
      ASSERT_EQ(error.code(), ErrorCode::kCorruptProgram);
      continue;
    }
    ASSERT_EQ(fuzzing::first_breach(loaded), "") << "round " << round;
  }
}
