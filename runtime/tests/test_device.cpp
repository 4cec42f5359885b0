#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <set>
#include <thread>
#include <vector>

#include "runtime/device.h"
#include "runtime/error.h"

using namespace neuron_rt;

TEST(Runtime, DevicesStreamsAndCurrentDevicePerThread) {
  Runtime& runtime = Runtime::get();
  ASSERT_GE(runtime.device_count(), 1);
  EXPECT_EQ(runtime.current_device(), 0);
  int last = runtime.device_count() - 1;
  runtime.set_current_device(last);
  int seen_in_other_thread = -1;
  std::thread([&] { seen_in_other_thread = Runtime::get().current_device(); }).join();
  EXPECT_EQ(seen_in_other_thread, 0);
  EXPECT_EQ(runtime.current_device(), last);
  runtime.set_current_device(0);
  int pool = runtime.next_pool_stream(0);
  EXPECT_GE(pool, 1);
  EXPECT_LE(pool, kStreamPoolSize);
}

TEST(Runtime, CommunicationStreamsAreApartFromThePool) {
  Runtime& runtime = Runtime::get();
  std::set<int> comm;
  for (int i = 0; i < kCommStreamCount; ++i) {
    const int id = runtime.next_comm_stream(0);
    EXPECT_TRUE(is_comm_stream(id)) << id;
    EXPECT_LT(id, kStreamCount);
    EXPECT_EQ(&runtime.stream(0, id), &runtime.stream(0, id));
    comm.insert(id);
  }
  EXPECT_EQ(int(comm.size()), kCommStreamCount);  // one per group until they run out
  for (int i = 0; i < 2 * kStreamPoolSize; ++i) EXPECT_FALSE(is_comm_stream(runtime.next_pool_stream(0)));
  EXPECT_THROW(runtime.stream(0, kStreamCount), Error);
  runtime.synchronize(0, /*communication=*/false);
  runtime.synchronize(0);
}

TEST(Runtime, OutOfRangeDeviceNamesTheRange) {
  Runtime& runtime = Runtime::get();
  try {
    runtime.set_current_device(runtime.device_count());
    FAIL() << "expected an invalid device error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInvalidDevice);
    EXPECT_NE(std::string(error.what()).find("out of range"), std::string::npos);
  }
  EXPECT_THROW(runtime.memory(-1), Error);
}

TEST(Runtime, AddressesMapToTheirDevice) {
  Runtime& runtime = Runtime::get();
  int last = runtime.device_count() - 1;
  BufferRef buffer = BufferRef::adopt(runtime.memory(last).allocate(1000));
  EXPECT_EQ(Runtime::device_of(buffer->data()), last);
  EXPECT_EQ(Runtime::device_of(static_cast<char*>(buffer->data()) + 999), last);
  uint64_t before = runtime.memory(last).stats().allocated_bytes;
  buffer = BufferRef();
  EXPECT_LT(runtime.memory(last).stats().allocated_bytes, before);
  int local = 0;
  EXPECT_EQ(Runtime::device_of(&local), -1);
}

TEST(Runtime, ConcurrentAllocationAndWorkOnAllDevices) {
  Runtime& runtime = Runtime::get();
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&runtime, t] {
      int device = t % runtime.device_count();
      Stream& stream = runtime.stream(device, 1 + t % kStreamPoolSize);
      for (int i = 0; i < 200; ++i) {
        BufferRef buffer = BufferRef::adopt(runtime.memory(device).allocate(4096));
        int* p = static_cast<int*>(buffer->data());
        stream.enqueue([buffer, p, i] { p[0] = i; });
        stream.synchronize();
        ASSERT_EQ(p[0], i);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  runtime.synchronize();
  for (int device = 0; device < runtime.device_count(); ++device) {
    EXPECT_EQ(runtime.memory(device).stats().allocated_bytes, 0u);
  }
}

TEST(Runtime, ForkedChildOfInitialisedParentGetsAClearError) {
  Runtime::get();
  pid_t child = fork();
  if (child == 0) {
    try {
      Runtime::get();
      _exit(1);
    } catch (const Error& error) {
      _exit(error.code() == ErrorCode::kBadFork &&
                    std::string(error.what()).find("spawn") != std::string::npos
                ? 0
                : 2);
    }
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}
