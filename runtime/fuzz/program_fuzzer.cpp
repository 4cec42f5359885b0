// libFuzzer target of the program loader (`make fuzz`; clang, AddressSanitizer and
// UndefinedBehaviorSanitizer). An input is a sealed program file (key "fuzz"). The property:
// unseal_program + decode_program either refuse it with Error(kCorruptProgram) or return a
// program that keeps to its own memory as the executor uses it (fuzzing::first_breach).
//
// The custom mutator works on structure, so that mutants pass the checksum and reach the
// loader's checks: it parses the payload (parse_program_unchecked), applies
// fuzzing::Mutator's structural changes and seals the result. Some mutants instead get
// libFuzzer's byte mutations inside the payload, then are sealed again (a valid checksum over
// wrong bytes), and a few get byte mutations of the whole file (damaged files). An input that
// does not parse is replaced by one of fuzzing::seed_programs(), so an empty corpus works.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "runtime/error.h"
#include "runtime/program.h"
#include "runtime/tests/program_fuzzing.h"

using namespace neuron_rt;

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace {

const char kKey[] = "fuzz";

size_t emit(const std::string& file, uint8_t* data, size_t max_size) {
  if (file.size() > max_size) return 0;
  std::memcpy(data, file.data(), file.size());
  return file.size();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string file(reinterpret_cast<const char*>(data), size);
  ProgramDesc program;
  try {
    program = decode_program(unseal_program(file, kKey));
  } catch (const Error& error) {
    if (error.code() != ErrorCode::kCorruptProgram) {
      std::fprintf(stderr, "the loader threw error code %d: %s\n", int(error.code()), error.what());
      std::abort();
    }
    return 0;
  }
  const std::string breach = fuzzing::first_breach(program);
  if (!breach.empty()) {
    std::fprintf(stderr, "the loader accepted a program that %s\n", breach.c_str());
    std::abort();
  }
  return 0;
}

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  fuzzing::Mutator mutator(seed);
  const std::string file(reinterpret_cast<const char*>(data), size);
  if (mutator.below(32) == 0) return LLVMFuzzerMutate(data, size, max_size);  // a damaged file
  std::string payload;
  ProgramDesc program;
  bool parsed = false;
  try {
    payload = unseal_program(file, kKey);
    program = parse_program_unchecked(payload);
    parsed = true;
  } catch (const Error&) {
  }
  if (!parsed) {
    const auto seeds = fuzzing::seed_programs();
    program = seeds[mutator.below(seeds.size())];
    payload = encode_program(program);
  }
  if (mutator.below(8) == 0) {  // byte mutations inside the payload, sealed again
    std::string bytes = payload;
    bytes.resize(bytes.size() + 64);
    const size_t n = LLVMFuzzerMutate(reinterpret_cast<uint8_t*>(bytes.data()), payload.size(), bytes.size());
    bytes.resize(n);
    return emit(seal_program(kKey, bytes), data, max_size);
  }
  mutator.mutate(program);
  const size_t written = emit(seal_program(kKey, encode_program(program)), data, max_size);
  return written ? written : emit(seal_program(kKey, payload), data, max_size);
}
