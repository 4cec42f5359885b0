// The profiler's device track (device_track.h): a bounded, thread-safe buffer of spans that
// records only between start() and stop(), and the engine of each kind of work.
#include <gtest/gtest.h>

#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/device_track.h"

using namespace neuron_rt;

namespace {
DeviceSpan span(int stream, uint64_t start, uint64_t end) {
  DeviceSpan s;
  s.stream = stream;
  s.start_ns = start;
  s.end_ns = end;
  s.name = "aten::mm";
  s.path = "direct";
  s.engine = Engine::kTensor;
  return s;
}
}  // namespace

TEST(DeviceTrack, EachKindOfWorkHasItsEngine) {
  EXPECT_STREQ(engine_name(engine_of(WorkKind::kMatmul)), "TensorE");
  for (WorkKind kind : {WorkKind::kPointwise, WorkKind::kReduction, WorkKind::kNorm}) {
    EXPECT_EQ(engine_of(kind), Engine::kVector) << work_kind_name(kind);
  }
  for (WorkKind kind : {WorkKind::kTranscendental, WorkKind::kSoftmax}) {
    EXPECT_EQ(engine_of(kind), Engine::kScalar) << work_kind_name(kind);
  }
  for (WorkKind kind : {WorkKind::kDataMovement, WorkKind::kDeviceCopy, WorkKind::kHostToDevice, WorkKind::kDeviceToHost}) {
    EXPECT_EQ(engine_of(kind), Engine::kDMA) << work_kind_name(kind);
  }
  EXPECT_STREQ(engine_name(Engine::kCollective), "CC");
  EXPECT_STREQ(engine_name(Engine::kProgram), "program");
}

TEST(DeviceTrack, RecordsOnlyBetweenStartAndStop) {
  DeviceTrack track;
  track.record(span(0, 0, 10));  // not recording yet
  EXPECT_FALSE(track.recording());
  track.start();
  EXPECT_TRUE(track.recording());
  track.record(span(0, 0, 10));
  track.record(span(1, 5, 7));
  track.stop();
  track.record(span(0, 10, 20));  // after stop
  DeviceTrack::Recording recording = track.take();
  ASSERT_EQ(recording.spans.size(), 2u);
  EXPECT_EQ(recording.spans[1].stream, 1);
  EXPECT_EQ(recording.spans[1].start_ns, 5u);
  EXPECT_EQ(recording.spans[1].end_ns, 7u);
  EXPECT_EQ(recording.dropped, 0u);
  EXPECT_TRUE(track.take().spans.empty());  // taken once
}

TEST(DeviceTrack, ACapacityDropsAndCountsTheRest) {
  DeviceTrack track;
  EXPECT_EQ(track.capacity(), DeviceTrack::kDefaultCapacity);
  track.set_capacity(3);
  track.start();
  for (int i = 0; i < 10; ++i) track.record(span(0, i, i + 1));
  DeviceTrack::Recording recording = track.take();
  ASSERT_EQ(recording.spans.size(), 3u);
  EXPECT_EQ(recording.spans[2].start_ns, 2u);  // the first ones are kept
  EXPECT_EQ(recording.dropped, 7u);
  EXPECT_FALSE(track.recording());  // take() stops
  track.start();  // a new recording forgets the drops
  track.record(span(0, 0, 1));
  track.stop();
  recording = track.take();
  EXPECT_EQ(recording.spans.size(), 1u);
  EXPECT_EQ(recording.dropped, 0u);
}

TEST(DeviceTrack, ThreadsRecordingAtOnceLoseNothing) {
  DeviceTrack track;
  track.start();
  constexpr int kThreads = 4, kSpans = 5000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kSpans; ++i) track.record(span(t, i, i + 1));
    });
  }
  for (std::thread& thread : threads) thread.join();
  DeviceTrack::Recording recording = track.take();
  ASSERT_EQ(recording.spans.size(), size_t(kThreads * kSpans));
  std::set<std::pair<int, uint64_t>> seen;
  for (const DeviceSpan& s : recording.spans) seen.insert({s.stream, s.start_ns});
  EXPECT_EQ(seen.size(), size_t(kThreads * kSpans));
}
