#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "runtime/copy.h"
#include "runtime/error.h"
#include "runtime/event.h"
#include "runtime/memory.h"
#include <cstring>
#include <memory>
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

TEST_P(StreamModes, CopiesAreOrderedWithWorkAndHoldTheirBuffers) {
  Stream stream(0, 0, GetParam());
  DeviceMemory memory(0, 16 << 20, MemoryBacking::kAnonymous, false, {&stream});
  std::vector<float> host(1024, 1.0f), back(1024, 0.0f);
  BufferRef device = BufferRef::adopt(memory.allocate(host.size() * 4));
  BufferRef pinned = BufferRef::adopt(HostMemory::get().allocate(host.size() * 4));
  std::memcpy(pinned->data(), host.data(), host.size() * 4);
  copy_host_to_device(stream, device, 0, pinned->data(), pinned, host.size() * 4, /*blocking=*/false);
  pinned = BufferRef();  // the queued copy holds it
  float* values = static_cast<float*>(device->data());
  stream.enqueue([device, values] { for (int i = 0; i < 1024; ++i) values[i] *= 3.0f; });
  BufferRef copy = BufferRef::adopt(memory.allocate(host.size() * 4));
  copy_device_to_device(stream, copy, 0, device, 0, host.size() * 4, false);
  device = BufferRef();  // held by the queued work
  copy_device_to_host(stream, back.data(), BufferRef(), copy, 0, back.size() * 4, true);
  EXPECT_EQ(back[0], 3.0f);
  EXPECT_EQ(back[1023], 3.0f);
  EXPECT_THROW(copy_host_to_device(stream, copy, 0, host.data(), BufferRef(), 4, false), Error);
}

TEST(StreamAsync, BlockingUploadToAnIdleStreamIsDoneByTheCaller) {
  Stream stream(0, 0, /*launch_blocking=*/false);
  DeviceMemory memory(0, 1 << 20, MemoryBacking::kAnonymous, false, {&stream});
  BufferRef device = BufferRef::adopt(memory.allocate(16));
  const float host[4] = {1, 2, 3, 4};
  copy_host_to_device(stream, device, 0, host, BufferRef(), sizeof host, /*blocking=*/true);
  EXPECT_EQ(stream.enqueued(), 0u);  // nothing pending: no hand-off to the worker
  EXPECT_EQ(static_cast<float*>(device->data())[3], 4.0f);
  // Behind pending work the copy is queued, in order: it lands after the task.
  stream.enqueue([device] {
    static_cast<float*>(device->data())[0] = -1.0f;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  });
  const float again[4] = {5, 6, 7, 8};
  copy_host_to_device(stream, device, 0, again, BufferRef(), sizeof again, /*blocking=*/true);
  EXPECT_EQ(stream.enqueued(), 2u);
  EXPECT_EQ(static_cast<float*>(device->data())[0], 5.0f);
  // A failed stream refuses the copy with its error, idle or not.
  stream.enqueue([] { throw std::runtime_error("boom"); });
  EXPECT_THROW(stream.synchronize(), Error);
  EXPECT_THROW(copy_host_to_device(stream, device, 0, host, BufferRef(), sizeof host, /*blocking=*/true), Error);
  EXPECT_EQ(static_cast<float*>(device->data())[0], 5.0f);  // not written
}

TEST(StreamAsync, AWaiterIsWokenAtItsMarkerNotPerTask) {
  // A host wait behind a long queue: the worker notifies once the awaited marker is
  // reached, not for every task it drains (measured as waits that blocked, and correctness
  // of a wait for an early marker while a later one is awaited too).
  Stream stream(0, 0, /*launch_blocking=*/false);
  std::atomic<int> ran{0};
  stream.enqueue([] { std::this_thread::sleep_for(std::chrono::milliseconds(30)); });
  const uint64_t early = stream.marker();
  for (int i = 0; i < 2000; ++i) stream.enqueue([&ran] { ran++; });
  const uint64_t late = stream.marker();
  std::thread late_waiter([&] { EXPECT_TRUE(stream.wait_for(late, std::chrono::seconds(10))); });
  EXPECT_TRUE(stream.wait_for(early, std::chrono::seconds(10)));
  EXPECT_TRUE(stream.reached(early));
  late_waiter.join();
  EXPECT_EQ(ran.load(), 2000);
  EXPECT_TRUE(stream.query());
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

TEST(Stream, AsyncFailureIsStickyAndLaterWorkSkipped) {
  Stream stream(2, 0, false);
  bool later_ran = false;
  auto held = std::make_shared<int>(1);
  stream.enqueue([] { throw std::runtime_error("kernel exploded"); });
  stream.enqueue([&later_ran, held] { later_ran = true; });
  for (int attempt = 0; attempt < 2; ++attempt) {  // every later wait fails the same way
    try {
      stream.synchronize();
      FAIL() << "expected the task's failure";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kAsyncFailure);
      EXPECT_NE(std::string(error.what()).find("kernel exploded"), std::string::npos);
      EXPECT_NE(std::string(error.what()).find("neuron:2"), std::string::npos);
    }
  }
  EXPECT_FALSE(later_ran);
  EXPECT_EQ(held.use_count(), 1);  // the skipped task was destroyed: what it held is released
  Event after;
  after.record(stream);  // an event recorded after the failure fails, it does not hang
  EXPECT_THROW(after.synchronize(), Error);
  EXPECT_THROW(after.query(), Error);
  Stream other(2, 1, false);
  after.wait(other);  // a stream waiting on a failed event fails with its message
  try {
    other.synchronize();
    FAIL() << "expected the waiting stream to fail";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("kernel exploded"), std::string::npos);
  }
}

TEST(Stream, DestroyingASkippedTaskMayUseTheStream) {
  // Regression: skipped tasks were destroyed under the stream's lock; a destructor that
  // queried the stream deadlocked.
  Stream stream(0, 0, false);
  struct QueriesOnDestruction {
    Stream* stream;
    ~QueriesOnDestruction() {
      if (stream) stream->query();
    }
  };
  stream.enqueue([] { throw std::runtime_error("first failure"); });
  auto probe = std::make_shared<QueriesOnDestruction>(QueriesOnDestruction{&stream});
  stream.enqueue([probe] {});
  probe.reset();
  EXPECT_THROW(stream.synchronize(), Error);
}

TEST(Stream, AbortWakesWaitersAndFailsTheStream) {
  Stream stream(0, 3, false);
  std::atomic<bool> release{false};
  stream.enqueue([&] {
    while (!release.load()) std::this_thread::yield();
  });
  Event event;
  event.record(stream);
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    stream.abort("collective allreduce timed out");
  });
  try {
    stream.synchronize();  // returns although the running task is stuck
    FAIL() << "expected the abort";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kAborted);
    EXPECT_NE(std::string(error.what()).find("allreduce timed out"), std::string::npos);
  }
  EXPECT_THROW(event.synchronize(), Error);  // not reached, and the stream was aborted
  aborter.join();
  release = true;
}

TEST(Stream, WaitForTimesOut) {
  Stream stream(0, 4, false);
  std::atomic<bool> release{false};
  stream.enqueue([&] {
    while (!release.load()) std::this_thread::yield();
  });
  EXPECT_FALSE(stream.wait_for(stream.marker(), std::chrono::milliseconds(20)));
  Event event;
  event.record(stream);
  EXPECT_FALSE(event.wait_for(std::chrono::milliseconds(20)));
  release = true;
  EXPECT_TRUE(stream.wait_for(stream.marker(), std::chrono::milliseconds(-1)));
  EXPECT_TRUE(event.wait_for(std::chrono::milliseconds(1000)));
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

// Review 7, item 13: abort() had no effect on later work in launch-blocking mode.
TEST(Stream, AbortInLaunchBlockingModeStopsLaterWork) {
  Stream stream(0, 0, /*launch_blocking=*/true);
  stream.abort("collective timed out");
  bool ran = false;
  EXPECT_THROW(stream.enqueue([&] { ran = true; }), Error);
  EXPECT_FALSE(ran);
  Event event;
  event.record(stream);
  EXPECT_THROW(event.synchronize(), Error);
  EXPECT_THROW(stream.synchronize(), Error);
}

// Review 7, item 14: Event::wait_for slept in 100 ms slices past short deadlines.
TEST(Event, WaitForHonoursShortTimeouts) {
  Stream stream(0, 0, false);
  std::atomic<bool> release{false};
  stream.enqueue([&] {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  Event event;
  event.record(stream);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(event.wait_for(std::chrono::milliseconds(5)));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took, std::chrono::milliseconds(95));  // the bug took >= 100 ms
  release = true;
  stream.synchronize();
}

// Review 7, item 5: in launch-blocking mode a short task finishing after a long one started
// made the long one's marker count as reached.
TEST(Stream, LaunchBlockingMarkersStayExactAcrossThreads) {
  Stream stream(0, 0, /*launch_blocking=*/true);
  std::atomic<bool> started{false}, release{false};
  std::thread slow([&] {
    stream.enqueue([&] {
      started = true;
      while (!release.load()) std::this_thread::yield();
    });
  });
  while (!started.load()) std::this_thread::yield();
  const uint64_t after_slow = stream.marker();
  stream.enqueue([] {});  // finishes while the slow one runs
  EXPECT_FALSE(stream.reached(after_slow));
  EXPECT_FALSE(stream.query());
  release = true;
  slow.join();
  EXPECT_TRUE(stream.reached(stream.marker()));
}

// Review 7, item 2: a failure is the device's, not one stream's.
TEST(Stream, AFailureFailsEveryStreamOfTheDevice) {
  auto device_failure = std::make_shared<FailureState>();
  Stream a(0, 0, false, device_failure), b(0, 1, false, device_failure);
  a.enqueue([] { throw std::runtime_error("index out of range"); });
  EXPECT_THROW(a.synchronize(), Error);
  bool ran = false;
  b.enqueue([&] { ran = true; });
  try {
    b.synchronize();
    FAIL() << "expected the device's failure";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("index out of range"), std::string::npos);
    EXPECT_NE(std::string(error.what()).find("stream 0"), std::string::npos);
  }
  EXPECT_FALSE(ran);
}

TEST(StreamAsync, ATaskSeesWhetherTheHostWaitsForItsStream) {
  // Note [Kernel threads] in csrc: a queued kernel takes the host's core only while the host
  // is blocked waiting for the stream. The time blocked is counted.
  Stream stream(0, 0, /*launch_blocking=*/false);
  std::atomic<bool> release{false};
  std::atomic<int> seen_waiting{-1}, seen_idle{-1};
  stream.enqueue([&] { seen_idle = stream.host_waiting(); });
  while (seen_idle == -1) std::this_thread::yield();  // the host polls: it never blocks in a wait
  EXPECT_EQ(seen_idle.load(), 0);
  stream.synchronize();
  stream.enqueue([&] {
    while (!release) std::this_thread::yield();
  });
  stream.enqueue([&] { seen_waiting = stream.host_waiting(); });
  const uint64_t blocked_before = stream.host_wait_ns();
  std::thread host([&] { stream.synchronize(); });
  while (!stream.host_waiting()) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  release = true;
  host.join();
  EXPECT_EQ(seen_waiting.load(), 1);
  EXPECT_FALSE(stream.host_waiting());
  EXPECT_GE(stream.host_wait_ns() - blocked_before, uint64_t(20'000'000));
}

// Note [Concatenation buffer]
TEST(StreamConcatenation, BufferedTasksRunInOrderWithOtherWorkAsOneGroup) {
  Stream stream(0, 0, /*launch_blocking=*/false);
  std::vector<int> order;
  const auto quiet = std::chrono::seconds(10);  // only the flushes below
  EXPECT_TRUE(stream.enqueue_fusable([&order] { order.push_back(0); }, 1024, quiet));
  EXPECT_FALSE(stream.enqueue_fusable([&order] { order.push_back(1); }, 1024, quiet));
  EXPECT_EQ(stream.buffered(), 2u);
  EXPECT_FALSE(stream.query());       // buffered work is pending work
  EXPECT_EQ(stream.marker(), 2u);     // and has its sequence numbers
  stream.enqueue([&order] { order.push_back(2); });  // flushes the group before it
  EXPECT_EQ(stream.buffered(), 0u);
  EXPECT_TRUE(stream.enqueue_fusable([&order] { order.push_back(3); }, 1024, quiet));
  stream.synchronize();  // flushes
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(stream.groups_flushed(), 2u);
  EXPECT_EQ(stream.tasks_grouped(), 3u);
  EXPECT_TRUE(stream.query());
}

TEST(StreamConcatenation, LimitAndQuietIntervalFlush) {
  Stream stream(0, 0, /*launch_blocking=*/false);
  std::atomic<int> ran{0};
  for (int i = 0; i < 7; ++i) stream.enqueue_fusable([&ran] { ran.fetch_add(1); }, 3, std::chrono::seconds(10));
  EXPECT_EQ(stream.buffered(), 1u);  // two groups of 3 went at the limit
  EXPECT_EQ(stream.groups_flushed(), 2u);
  // Nobody waits: the worker flushes the last task once nothing joined it for 1 ms.
  stream.enqueue_fusable([&ran] { ran.fetch_add(1); }, 1024, std::chrono::milliseconds(1));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (ran.load() < 8 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(ran.load(), 8);
  EXPECT_EQ(stream.buffered(), 0u);
}

TEST(StreamConcatenation, EventsAndWaitsSeeBufferedWork) {
  Stream stream(0, 0, /*launch_blocking=*/false);
  std::atomic<int> value{0};
  stream.enqueue_fusable([&value] { value.store(1); }, 1024, std::chrono::seconds(10));
  const uint64_t marker = stream.marker();
  Event event;
  event.record(stream);  // a marker: flushes the group before it
  EXPECT_TRUE(event.wait_for(std::chrono::seconds(10)));
  EXPECT_EQ(value.load(), 1);
  stream.enqueue_fusable([&value] { value.store(2); }, 1024, std::chrono::seconds(10));
  EXPECT_TRUE(stream.wait_for(stream.marker(), std::chrono::seconds(10)));  // flushes, then waits
  EXPECT_TRUE(stream.reached(marker));
  EXPECT_EQ(value.load(), 2);
}

TEST(StreamConcatenation, AFailingTaskSkipsTheRestOfItsGroupAndIsReportedAtTheWait) {
  Stream stream(0, 0, /*launch_blocking=*/false);
  std::atomic<int> ran{0};
  stream.enqueue_fusable([&ran] { ran.fetch_add(1); }, 1024, std::chrono::seconds(10));
  stream.enqueue_fusable([] { throw std::runtime_error("aten::bad: boom"); }, 1024, std::chrono::seconds(10));
  stream.enqueue_fusable([&ran] { ran.fetch_add(1); }, 1024, std::chrono::seconds(10));
  try {
    stream.synchronize();
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("aten::bad: boom"), std::string::npos) << error.what();
  }
  EXPECT_EQ(ran.load(), 1);
  EXPECT_TRUE(stream.query());  // every task counted as finished (run or skipped)
}

TEST(StreamConcatenation, DestroyingTheStreamRunsWhatIsBuffered) {
  std::atomic<int> ran{0};
  {
    Stream stream(0, 0, /*launch_blocking=*/false);
    stream.enqueue_fusable([&ran] { ran.fetch_add(1); }, 1024, std::chrono::seconds(10));
  }
  EXPECT_EQ(ran.load(), 1);
}

TEST(StreamConcatenation, LaunchBlockingRunsAtOnce) {
  Stream stream(0, 0, /*launch_blocking=*/true);
  int ran = 0;
  stream.enqueue_fusable([&ran] { ++ran; }, 1024, std::chrono::seconds(10));
  EXPECT_EQ(ran, 1);
  EXPECT_EQ(stream.buffered(), 0u);
}

TEST(StreamConcatenation, StarvingTasksGoToAnIdleWorkerAtOnce) {
  Stream stream(0, 0, /*launch_blocking=*/false);
  std::atomic<int> ran{0};
  // The quiet interval is long: only the idle worker can take the group.
  stream.enqueue_fusable([&ran] { ran.fetch_add(1); }, 1024, std::chrono::seconds(100), /*starving=*/true);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (ran.load() < 1 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::microseconds(100));
  EXPECT_EQ(ran.load(), 1);
  // Behind a busy worker they are buffered together.
  std::atomic<bool> release{false};
  stream.enqueue([&release] { while (!release.load()) std::this_thread::yield(); });
  for (int i = 0; i < 5; ++i) stream.enqueue_fusable([&ran] { ran.fetch_add(1); }, 1024, std::chrono::seconds(100), true);
  EXPECT_EQ(stream.buffered(), 5u);
  release.store(true);
  stream.synchronize();
  EXPECT_EQ(ran.load(), 6);
}
