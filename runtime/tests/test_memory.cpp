#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "runtime/error.h"
#include "runtime/memory.h"

using namespace neuron_rt;

TEST(DeviceMemory, AllocatesRoundsAndCountsStats) {
  DeviceMemory memory(0, 1 << 20);
  void* a = memory.allocate(100);
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE(memory.owns(a));
  EXPECT_FALSE(memory.owns(static_cast<char*>(a) + 99));
  EXPECT_TRUE(memory.contains(static_cast<char*>(a) + 99));
  MemoryStats stats = memory.stats();
  EXPECT_EQ(stats.allocated_bytes, 512u);
  EXPECT_EQ(stats.requested_bytes, 100u);
  EXPECT_EQ(stats.allocations, 1u);
  EXPECT_TRUE(memory.free(a));
  EXPECT_FALSE(memory.owns(a));
  stats = memory.stats();
  EXPECT_EQ(stats.allocated_bytes, 0u);
  EXPECT_EQ(stats.reserved_bytes, 512u);  // cached
  EXPECT_EQ(stats.peak_allocated_bytes, 512u);
  EXPECT_EQ(memory.allocate(0), nullptr);
}

TEST(DeviceMemory, ReusesCachedBlocks) {
  DeviceMemory memory(0, 1 << 20);
  void* a = memory.allocate(4000);
  memory.free(a);
  void* b = memory.allocate(3900);  // same rounded size class
  EXPECT_EQ(a, b);
  EXPECT_EQ(memory.stats().segments, 1u);
  memory.free(b);
  void* c = memory.allocate(100);  // far smaller: not worth the big block
  EXPECT_NE(c, a);
  memory.free(c);
  memory.empty_cache();
  EXPECT_EQ(memory.stats().reserved_bytes, 0u);
}

TEST(DeviceMemory, OutOfMemoryNamesSizesAndKeepsEarlierBlocks) {
  DeviceMemory memory(3, 1 << 20);
  void* a = memory.allocate(600 << 10);
  std::memset(a, 7, 600 << 10);
  try {
    memory.allocate(600 << 10);
    FAIL() << "expected out of memory";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kOutOfMemory);
    std::string text = error.what();
    EXPECT_NE(text.find("neuron:3"), std::string::npos) << text;
    EXPECT_NE(text.find("tried to allocate 600.00 KiB"), std::string::npos) << text;
    EXPECT_NE(text.find("1.00 MiB of HBM in total"), std::string::npos) << text;
    EXPECT_NE(text.find("free"), std::string::npos) << text;
  }
  EXPECT_EQ(memory.stats().ooms, 1u);
  EXPECT_EQ(static_cast<unsigned char*>(a)[1000], 7);  // untouched
  memory.free(a);
  void* b = memory.allocate(900 << 10);  // the cache is released to make room
  EXPECT_NE(b, nullptr);
  memory.free(b);
}

TEST(DeviceMemory, ManyThreadsAllocateAndFreeAtOnce) {
  DeviceMemory memory(0, 64 << 20);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&memory, t] {
      for (int i = 0; i < 2000; ++i) {
        size_t bytes = 64 + (i * 37 + t * 11) % 8192;
        auto* p = static_cast<unsigned char*>(memory.allocate(bytes));
        p[0] = static_cast<unsigned char>(t);
        p[bytes - 1] = static_cast<unsigned char>(t);
        ASSERT_EQ(p[0], t);
        ASSERT_EQ(p[bytes - 1], t);
        memory.free(p);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  MemoryStats stats = memory.stats();
  EXPECT_EQ(stats.allocated_bytes, 0u);
  EXPECT_EQ(stats.allocations, 16000u);
  EXPECT_EQ(stats.frees, 16000u);
  EXPECT_LE(stats.peak_reserved_bytes, 64u << 20);
}
