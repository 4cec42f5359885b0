#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "runtime/copy.h"
#include "runtime/error.h"
#include "runtime/event.h"
#include "runtime/stream.h"

using namespace neuron_rt;

class StreamModes : public ::testing::TestWithParam<bool> {};

TEST_P(StreamModes, RunsTasksInOrder) {
  Stream stream(0, 0, GetParam());
  std::vector<int> order;
  for (int i = 0; i < 1000; ++i) stream.enqueue([&order, i] { order.push_back(i); });
  stream.synchronize();
  ASSERT_EQ(order.size(), 1000u);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(order[i], i);
  EXPECT_TRUE(stream.query());
}

TEST_P(StreamModes, CopiesAreOrderedWithWork) {
  Stream stream(0, 0, GetParam());
  std::vector<float> host(1024, 1.0f), device(1024, 0.0f), back(1024, 0.0f);
  copy_host_to_device(stream, device.data(), host.data(), host.size() * 4, false);
  stream.enqueue([&] { for (auto& x : device) x *= 3.0f; });
  copy_device_to_host(stream, back.data(), device.data(), back.size() * 4);
  EXPECT_EQ(back[0], 3.0f);
  EXPECT_EQ(back[1023], 3.0f);
}

TEST_P(StreamModes, ManyThreadsEnqueueAtOnce) {
  Stream stream(0, 1, GetParam());
  std::atomic<int> count{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i) stream.enqueue([&count] { count++; });
    });
  }
  for (auto& thread : threads) thread.join();
  stream.synchronize();
  EXPECT_EQ(count.load(), 4000);
}

TEST_P(StreamModes, EventsRecordQueryAndTime) {
  Stream stream(0, 0, GetParam());
  Event start, end;
  EXPECT_TRUE(start.query());  // never recorded counts as done
  start.record(stream);
  stream.enqueue([] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); });
  end.record(stream);
  end.synchronize();
  EXPECT_TRUE(end.query());
  EXPECT_GE(start.elapsed_ms(end), 15.0);
}

TEST_P(StreamModes, ThreadsSynchronizeWhileOthersEnqueue) {
  // Regression: in launch-blocking mode a task finishing on one thread must wake a
  // thread waiting in synchronize() (model loading copies weights from a thread pool).
  Stream stream(0, 0, GetParam());
  std::atomic<int> count{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 300; ++i) {
        stream.enqueue([&count] {
          std::this_thread::sleep_for(std::chrono::microseconds(50));
          count++;
        });
        stream.synchronize();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(count.load(), 1200);
}

INSTANTIATE_TEST_SUITE_P(BlockingAndAsync, StreamModes, ::testing::Values(true, false));

TEST(Stream, AsyncEnqueueReturnsBeforeTheWorkRuns) {
  Stream stream(0, 0, false);
  std::atomic<bool> release{false};
  std::atomic<bool> ran{false};
  stream.enqueue([&] {
    while (!release.load()) std::this_thread::yield();
    ran = true;
  });
  EXPECT_FALSE(stream.query());
  EXPECT_FALSE(ran.load());
  release = true;
  stream.synchronize();
  EXPECT_TRUE(ran.load());
}

TEST(Stream, AsyncFailureIsRaisedBySynchronizeAndLaterWorkSkipped) {
  Stream stream(2, 0, false);
  bool later_ran = false;
  stream.enqueue([] { throw std::runtime_error("kernel exploded"); });
  stream.enqueue([&] { later_ran = true; });
  try {
    stream.synchronize();
    FAIL() << "expected the task's failure";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kAsyncFailure);
    EXPECT_NE(std::string(error.what()).find("kernel exploded"), std::string::npos);
    EXPECT_NE(std::string(error.what()).find("neuron:2"), std::string::npos);
  }
  EXPECT_FALSE(later_ran);
  stream.synchronize();  // the error is reported once
}

TEST(Event, StreamWaitsForEventOfAnotherStream) {
  Stream producer(0, 1, false), consumer(0, 2, false);
  std::atomic<bool> release{false};
  std::atomic<int> value{0};
  producer.enqueue([&] {
    while (!release.load()) std::this_thread::yield();
    value = 42;
  });
  Event ready;
  ready.record(producer);
  ready.wait(consumer);
  int seen = -1;
  consumer.enqueue([&] { seen = value.load(); });
  EXPECT_FALSE(ready.query());
  release = true;
  consumer.synchronize();
  EXPECT_EQ(seen, 42);
}

TEST(Event, ElapsedTimeNeedsRecordedEvents) {
  Event a, b;
  EXPECT_THROW(a.elapsed_ms(b), Error);
}
