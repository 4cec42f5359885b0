#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include "runtime/error.h"
#include "runtime/metrics.h"
#include "runtime/program.h"
#include "runtime/program_cache.h"

using namespace neuron_rt;

namespace {
ProgramDesc sample_program() {
  ProgramDesc p;
  p.name = "LlamaForCausalLM_0_inference_0";
  TensorSpec spec{6, {2, 3}, {3, 1}, 0};  // float32
  p.values.push_back({ProgramValue::Kind::kInput, 0, 24, spec});
  p.values.push_back({ProgramValue::Kind::kConstant, 0, 24, spec});
  p.values.push_back({ProgramValue::Kind::kArena, 64, 24, spec});
  p.values.push_back({ProgramValue::Kind::kView, 2, 0, TensorSpec{6, {3, 2}, {1, 3}, 0}});
  p.values.push_back({ProgramValue::Kind::kOutput, 0, 24, spec});
  p.inputs = {0};
  p.constants = {std::string(24, '\x01')};
  ProgramNode add;
  add.op = "aten::add.Tensor";
  add.args.resize(3);
  add.args[0].kind = ProgramArg::Kind::kValue;
  add.args[0].integer = 0;
  add.args[1].kind = ProgramArg::Kind::kValue;
  add.args[1].integer = 1;
  add.args[2].kind = ProgramArg::Kind::kDouble;
  add.args[2].real = 1.0;
  add.outputs = {2};
  ProgramNode sum;
  sum.op = "aten::sum.dim_IntList";
  sum.args.resize(2);
  sum.args[0].kind = ProgramArg::Kind::kValue;
  sum.args[0].integer = 3;
  sum.args[1].kind = ProgramArg::Kind::kIntList;
  sum.args[1].list = {0};
  sum.outputs = {4};
  p.nodes = {add, sum};
  p.outputs = {4};
  p.arena_bytes = 128;
  p.metadata["model_name"] = "demo";
  return p;
}

std::string temporary_directory() {
  char path[] = "/tmp/neuron_program_test_XXXXXX";
  return mkdtemp(path);
}
}  // namespace

TEST(Program, RoundTripsThroughTheFileFormat) {
  const ProgramDesc p = sample_program();
  const std::string file = seal_program("abcdef0123", encode_program(p));
  const ProgramDesc back = decode_program(unseal_program(file, "abcdef0123"));
  EXPECT_EQ(back.name, p.name);
  ASSERT_EQ(back.values.size(), p.values.size());
  EXPECT_EQ(back.values[3].spec.strides, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(back.nodes[1].op, "aten::sum.dim_IntList");
  EXPECT_EQ(back.nodes[1].args[1].list, (std::vector<int64_t>{0}));
  EXPECT_EQ(back.nodes[0].args[2].real, 1.0);
  EXPECT_EQ(back.constants[0], p.constants[0]);
  EXPECT_EQ(back.arena_bytes, 128u);
  EXPECT_EQ(back.metadata.at("model_name"), "demo");
}

TEST(Program, DetectsTruncatedCorruptForeignAndOtherVersions) {
  const std::string file = seal_program("key1", encode_program(sample_program()));
  auto reason = [&](const std::string& bytes, const std::string& key) -> std::string {
    try {
      unseal_program(bytes, key);
      return "accepted";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kCorruptProgram);
      return error.what();
    }
  };
  for (size_t cut : {size_t(0), size_t(5), file.size() / 2, file.size() - 1}) {
    EXPECT_NE(reason(file.substr(0, cut), "key1"), "accepted") << cut;
  }
  EXPECT_NE(reason(file, "key2").find("foreign"), std::string::npos);
  for (size_t at = 0; at < file.size(); ++at) {  // every single flipped byte is caught
    std::string damaged = file;
    damaged[at] = char(damaged[at] ^ 0x20);
    EXPECT_NE(reason(damaged, "key1"), "accepted") << "byte " << at;
  }
  std::string other_version = file;
  other_version[13] = 9;  // the version field follows the 13-byte magic
  EXPECT_NE(reason(other_version, "key1").find("format version"), std::string::npos);
  EXPECT_NE(reason("not a program at all, just text of some length", "key1").find("bad magic"), std::string::npos);
}

TEST(Program, DecodeRejectsIndicesThatPointNowhere) {
  ProgramDesc p = sample_program();
  p.nodes[0].args[0].integer = 99;
  EXPECT_THROW(decode_program(encode_program(p)), Error);
  p = sample_program();
  p.values[3].index = 4;  // a view of a later value
  EXPECT_THROW(decode_program(encode_program(p)), Error);
  p = sample_program();
  p.values[2].index = 120;  // slot past the arena
  EXPECT_THROW(decode_program(encode_program(p)), Error);
}

// Well-sealed but wrong programs (a writer's bug, an older writer): tensors larger than the
// memory under them are refused, never executed.
TEST(Program, DecodeRejectsTensorsLargerThanTheirMemory) {
  EXPECT_NO_THROW(decode_program(encode_program(sample_program())));
  auto rejected = [](const ProgramDesc& p) {
    try {
      // sealed and unsealed: the checksum is right, the content is not
      decode_program(unseal_program(seal_program("k", encode_program(p)), "k"));
      return false;
    } catch (const Error& e) {
      return e.code() == ErrorCode::kCorruptProgram;
    }
  };
  ProgramDesc p = sample_program();
  p.values[2].spec.sizes = {64, 64};  // 16 KiB in a 24-byte slot
  p.values[2].spec.strides = {64, 1};
  EXPECT_TRUE(rejected(p));
  p = sample_program();
  p.values[1].spec.sizes = {4, 3};  // a constant tensor past its 24 bytes
  EXPECT_TRUE(rejected(p));
  p = sample_program();
  p.values[3].spec.offset = 5;  // the view reaches past its slot
  EXPECT_TRUE(rejected(p));
  p = sample_program();
  p.values[2].spec.strides = {-3, 1};
  EXPECT_TRUE(rejected(p));
  p = sample_program();
  p.values[2].spec.dtype = 200;
  EXPECT_TRUE(rejected(p));
}

TEST(Program, RandomDamageNeverCrashesTheLoader) {
  // A fuzz test: damaged payloads and files go to the decoder and the unsealer, which
  // must either return a well-formed program or throw Error (ASan/UBSan runs watch it).
  const std::string payload = encode_program(sample_program());
  const std::string file = seal_program("k", payload);
  std::mt19937_64 random(1234);
  int accepted = 0;
  for (int round = 0; round < 20000; ++round) {
    std::string bytes = round % 2 ? payload : file;
    const int edits = 1 + int(random() % 8);
    for (int e = 0; e < edits; ++e) {
      switch (random() % 4) {
        case 0: bytes[random() % bytes.size()] = char(random()); break;
        case 1: bytes.resize(random() % (bytes.size() + 1)); break;
        case 2: bytes.insert(random() % (bytes.size() + 1), 1 + random() % 16, char(random())); break;
        case 3: {  // a huge count where a length was
          if (bytes.size() >= 8) {
            uint64_t big = ~0ull >> (random() % 40);
            std::memcpy(&bytes[random() % (bytes.size() - 7)], &big, 8);
          }
          break;
        }
      }
      if (bytes.empty()) bytes = "x";
    }
    try {
      if (round % 2) {
        decode_program(bytes);
      } else {
        decode_program(unseal_program(bytes, "k"));
      }
      ++accepted;
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kCorruptProgram);
    }
  }
  EXPECT_LT(accepted, 20000);
}

TEST(ProgramCache, MemoryThenDiskWithTheRealLayoutAndCounters) {
  Metrics::get().set_enabled(true);
  Metrics::get().clear_counters();
  const std::string dir = temporary_directory();
  const std::string key = "0123456789abcdef0123456789abcdef";
  {
    ProgramCache cache(dir, 4);
    EXPECT_FALSE(cache.get(key).has_value());
    cache.put(key, "payload-bytes");
    bool from_disk = true;
    EXPECT_EQ(cache.get(key, &from_disk).value(), "payload-bytes");
    EXPECT_FALSE(from_disk);
  }
  const std::string path = ProgramCache::path_for(dir, key);
  EXPECT_EQ(path, dir + "/01/23/" + key + ".neff");
  struct stat info {};
  EXPECT_EQ(stat(path.c_str(), &info), 0);
  ProgramCache fresh(dir, 4);  // a new process: from disk
  bool from_disk = false;
  EXPECT_FALSE(fresh.get(key, &from_disk).has_value());  // "payload-bytes" is not a well-formed program
  EXPECT_NE(stat(path.c_str(), &info), 0);                // ... so the entry was deleted
  const std::string program = encode_program(sample_program());
  fresh.put(key, program);
  ProgramCache third(dir, 4);
  EXPECT_EQ(third.get(key, &from_disk).value(), program);
  EXPECT_TRUE(from_disk);
  EXPECT_EQ(Metrics::get().counter_value("CompilationCache.PersistentHits").value_or(0), 1);
  EXPECT_GE(Metrics::get().counter_value("CompilationCache.PersistentMisses").value_or(0), 2);
  Metrics::get().set_enabled(false);
}

TEST(ProgramCache, CorruptEntriesAreReportedDeletedAndMissed) {
  const std::string dir = temporary_directory();
  const std::string key = "ffee0123456789abcdef0123456789ab";
  std::vector<std::string> reports;
  ProgramCache writer(dir, 4);
  writer.put(key, encode_program(sample_program()));
  const std::string path = ProgramCache::path_for(dir, key);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('\x7f');
  }
  ProgramCache reader(dir, 4, [&](const std::string& message) { reports.push_back(message); });
  EXPECT_FALSE(reader.get(key).has_value());
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_NE(reports[0].find("deleted, recompiling"), std::string::npos);
  struct stat info {};
  EXPECT_NE(stat(path.c_str(), &info), 0);
}

TEST(ProgramCache, EvictsLeastRecentlyUsedAndWritesAtomicallyFromManyThreads) {
  ProgramCache memory_only("", 2);
  memory_only.put("a", "1");
  memory_only.put("b", "2");
  memory_only.get("a");
  memory_only.put("c", "3");
  EXPECT_TRUE(memory_only.get("a").has_value());
  EXPECT_FALSE(memory_only.get("b").has_value());
  const std::string dir = temporary_directory();
  const std::string key = "aabbccddeeff00112233445566778899";
  const std::string program = encode_program(sample_program());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      ProgramCache cache(dir, 1);
      for (int i = 0; i < 50; ++i) {
        cache.put(key, program);
        ProgramCache reader(dir, 1);
        auto got = reader.get(key);  // never a half-written file
        if (got) EXPECT_EQ(*got, program);
      }
    });
  }
  for (auto& thread : threads) thread.join();
}
