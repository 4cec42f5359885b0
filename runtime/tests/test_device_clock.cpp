// The device clock (Note [Device clock] in runtime/cost_model.h): the platform data file, the
// cost model against values computed by hand from the file's constants, and the timeline's
// ordering by streams and events. No host timing is measured.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/cost_model.h"
#include "runtime/error.h"
#include "runtime/event.h"
#include "runtime/platform_spec.h"
#include "runtime/stream.h"

using namespace neuron_rt;

namespace {
const std::map<std::string, PlatformSpec>& specs() {
  static const auto loaded = load_platform_specs(NEURON_PLATFORM_FILE);
  return loaded;
}
const PlatformSpec& trn2() { return specs().at("trn2"); }
double c(const char* name) { return trn2().get(name); }
uint64_t ns(double value) { return uint64_t(std::llround(value)); }
}  // namespace

TEST(PlatformSpec, EveryPlatformHasEveryConstantWithASource) {
  ASSERT_EQ(specs().size(), 3u);
  const auto& reference = trn2().constants();
  for (const char* platform : {"trn1", "trn2", "trn3"}) {
    const PlatformSpec& spec = specs().at(platform);
    for (const auto& [name, constant] : reference) {
      ASSERT_TRUE(spec.constants().count(name)) << platform << " lacks " << name;
      EXPECT_FALSE(spec.constants().at(name).source.empty()) << platform << "." << name;
      EXPECT_GT(spec.constants().at(name).value, 0) << platform << "." << name;
    }
    EXPECT_EQ(spec.constants().size(), reference.size()) << platform;
    CostModel model(spec, platform == std::string("trn1") ? 1 : 2);  // every constant it reads exists
  }
}

TEST(PlatformSpec, RejectsAnEntryWithoutASource) {
  EXPECT_THROW(parse_platform_specs("[trn2]\nx = { value = 1 }\n", "t"), Error);
  EXPECT_THROW(parse_platform_specs("[trn2]\nx = { value = 1, source = \"\" }\n", "t"), Error);
  EXPECT_THROW(parse_platform_specs("x = { value = 1, source = \"s\" }\n", "t"), Error);
  EXPECT_THROW(parse_platform_specs("[trn2]\nx = { value = 1, source = \"a\" }\nx = { value = 2, source = \"b\" }\n", "t"),
               Error);
  for (const char* value : {"0", "-1", "nan", "inf"}) {  // a rate of 0 would divide by zero
    EXPECT_THROW(parse_platform_specs(std::string("[trn2]\nx = { value = ") + value + ", source = \"s\" }\n", "t"),
                 Error)
        << value;
  }
  auto parsed = parse_platform_specs("# c\n[p]  # c\nx = { value = 2.5e3, source = \"a, b\" }  # c\n", "t");
  EXPECT_EQ(parsed.at("p").get("x"), 2500.0);
  EXPECT_EQ(parsed.at("p").constants().at("x").source, "a, b");
  EXPECT_THROW(parsed.at("p").get("y"), Error);
}

TEST(CostModel, MatmulIsTheRooflineOfPaddedTensorWorkAndHbmTraffic) {
  CostModel model(trn2(), 2);
  // bf16 [300, 200] @ [200, 100]: k pads to 256, n to 128 on the 128 x 128 array.
  Work work;
  work.kind = WorkKind::kMatmul;
  work.format = NumberFormat::kBF16;
  work.matmul = {1, 300, 200, 100};
  work.hbm_bytes_read = (300 * 200 + 200 * 100) * 2;
  work.hbm_bytes_written = 300 * 100 * 2;
  const double compute = 2.0 * 300 * 256 * 128 / (c("tensor_bf16_tflops") * 1e3 * 2 * c("tensor_utilization"));
  const double memory = double(work.hbm_bytes_read + work.hbm_bytes_written) /
                        (c("hbm_chip_gbps") / c("physical_cores_per_chip") * 2);
  const WorkCost cost = model.cost(work);
  EXPECT_DOUBLE_EQ(cost.compute_ns, compute);
  EXPECT_DOUBLE_EQ(cost.memory_ns, memory);
  EXPECT_EQ(cost.ns, ns(c("eager_launch_ns") + std::max(compute, memory)));
  // A large square matmul is compute-bound; FP8 halves and FP32 quarters-ish its compute.
  work.matmul = {4, 4096, 4096, 4096};
  work.hbm_bytes_read = work.hbm_bytes_written = 0;
  work.eager_launch = false;
  const double bf16 = 2.0 * 4 * 4096.0 * 4096 * 4096 / (c("tensor_bf16_tflops") * 1e3 * 2 * c("tensor_utilization"));
  EXPECT_EQ(model.cost(work).ns, ns(bf16));
  work.format = NumberFormat::kFP8;
  EXPECT_EQ(model.cost(work).ns, ns(bf16 * c("tensor_bf16_tflops") / c("tensor_fp8_tflops")));
  work.format = NumberFormat::kFP32;
  EXPECT_EQ(model.cost(work).ns, ns(bf16 * c("tensor_bf16_tflops") / c("tensor_fp32_tflops")));
}

TEST(CostModel, CollectivesPerAlgorithmAndLink) {
  CostModel model(trn2(), 2);  // a collective's cost does not depend on LNC
  const double bytes = 1 << 20, link = c("neuronlink_chip_gbps"), alpha = c("neuronlink_latency_ns");
  CollectiveWork work;
  work.bytes = 1 << 20;
  work.ranks = 4;
  // ring allreduce: 2(n-1)/n * bytes / B + 2(n-1) * alpha
  WorkCost cost = model.cost(work);
  EXPECT_DOUBLE_EQ(cost.compute_ns, 2.0 * 3 / 4 * bytes / link);
  EXPECT_DOUBLE_EQ(cost.fixed_ns, 2.0 * 3 * alpha);
  EXPECT_EQ(cost.ns, ns(2.0 * 3 / 4 * bytes / link + 6 * alpha));
  work.algorithm = CollectiveAlgorithm::kRingAllGather;
  EXPECT_EQ(model.cost(work).ns, ns(3.0 / 4 * bytes / link + 3 * alpha));
  work.algorithm = CollectiveAlgorithm::kRingReduceScatter;
  EXPECT_EQ(model.cost(work).ns, ns(3.0 / 4 * bytes / link + 3 * alpha));
  work.algorithm = CollectiveAlgorithm::kBroadcast;
  EXPECT_EQ(model.cost(work).ns, ns(bytes / link + 3 * alpha));
  work.algorithm = CollectiveAlgorithm::kPointToPoint;
  EXPECT_EQ(model.cost(work).ns, ns(bytes / link + alpha));
  // across instances: EFA's bandwidth and latency
  work.algorithm = CollectiveAlgorithm::kRingAllReduce;
  work.link = CollectiveLink::kEFA;
  EXPECT_EQ(model.cost(work).ns, ns(2.0 * 3 / 4 * bytes / c("efa_chip_gbps") + 6 * c("efa_latency_ns")));
  // 64 ranks, 4 on each of 16 chips: within each chip, then across the chips
  work.link = CollectiveLink::kNeuronLink;
  work.ranks = 64;
  work.ranks_per_chip = 4;
  EXPECT_EQ(model.cost(work).ns, ns(2.0 * 63 / 64 * bytes / link + (2 * 3 + 2 * 15) * alpha));
  work.algorithm = CollectiveAlgorithm::kRingAllGather;
  EXPECT_EQ(model.cost(work).ns, ns(63.0 / 64 * bytes / link + (3 + 15) * alpha));
  work.ranks_per_chip = 1;  // a flat ring
  EXPECT_EQ(model.cost(work).ns, ns(63.0 / 64 * bytes / link + 63 * alpha));
  work.ranks = 1;  // nothing to exchange
  EXPECT_EQ(model.cost(work).ns, 0u);
  EXPECT_EQ(model.program_launch_ns(), c("program_launch_ns"));
}

TEST(CostModel, PointwiseReductionSoftmaxAndCopies) {
  CostModel lnc1(trn2(), 1);
  const double launch = c("eager_launch_ns");
  Work add;
  add.kind = WorkKind::kPointwise;
  add.format = NumberFormat::kFP32;
  add.elements = 1 << 20;
  add.hbm_bytes_read = 2u << 22;
  add.hbm_bytes_written = 1u << 22;
  const double vector = double(1 << 20) / (c("vector_lanes_other") * c("vector_clock_ghz"));
  const double memory = double(3u << 22) / (c("hbm_chip_gbps") / c("physical_cores_per_chip"));
  EXPECT_EQ(lnc1.cost(add).ns, ns(launch + std::max(vector, memory)));
  add.format = NumberFormat::kBF16;
  add.hbm_bytes_read = add.hbm_bytes_written = 0;
  EXPECT_EQ(lnc1.cost(add).ns, ns(launch + double(1 << 20) / (c("vector_lanes_bf16") * c("vector_clock_ghz"))));

  Work softmax = add;
  softmax.kind = WorkKind::kSoftmax;
  const double per_vector = double(1 << 20) / (c("vector_lanes_bf16") * c("vector_clock_ghz"));
  const double per_scalar = double(1 << 20) / (c("scalar_lanes_bf16") * c("scalar_clock_ghz"));
  EXPECT_EQ(lnc1.cost(softmax).ns, ns(launch + 2 * per_vector + per_scalar));

  Work copy;
  copy.kind = WorkKind::kDeviceCopy;
  copy.moved_bytes = 64u << 20;
  copy.hbm_bytes_read = copy.hbm_bytes_written = 64u << 20;
  const double dma = double(64u << 20) / (c("dma_chip_gbps") / c("physical_cores_per_chip"));
  const double hbm = double(128u << 20) / (c("hbm_chip_gbps") / c("physical_cores_per_chip"));
  EXPECT_EQ(lnc1.cost(copy).ns, ns(launch + std::max(dma, hbm)));

  Work upload;
  upload.kind = WorkKind::kHostToDevice;
  upload.moved_bytes = upload.hbm_bytes_written = 64u << 20;
  EXPECT_EQ(lnc1.cost(upload).ns, ns(launch + double(64u << 20) / c("host_link_gbps")));
}

TEST(CostModel, LogicalCoresOfTwoPhysicalCoresAreTwiceAsFast) {
  Work work;
  work.kind = WorkKind::kPointwise;
  work.format = NumberFormat::kBF16;
  work.elements = 1 << 24;
  work.eager_launch = false;
  EXPECT_NEAR(double(CostModel(trn2(), 1).cost(work).ns), 2.0 * double(CostModel(trn2(), 2).cost(work).ns), 1.0);
}

TEST(Timeline, StreamsAppendInIssueOrderAndEventWaitsOrderThem) {
  Stream a(0, 0, /*launch_blocking=*/true), b(0, 1, true);
  EXPECT_EQ(a.timeline().append(100).start_ns, 0u);
  EXPECT_EQ(a.timeline().append(50).end_ns, 150u);
  Event after_a;
  after_a.record(a);
  EXPECT_EQ(after_a.device_time_ns(), 150u);
  b.timeline().append(10);  // b runs beside a
  EXPECT_EQ(b.timeline().now_ns(), 10u);
  after_a.wait(b);          // b's later work waits for a's
  const TimelineSpan span = b.timeline().append(5);
  EXPECT_EQ(span.start_ns, 150u);
  EXPECT_EQ(span.end_ns, 155u);
  after_a.wait(b);          // waiting again for an earlier time changes nothing
  EXPECT_EQ(b.timeline().now_ns(), 155u);
  Event start, end;
  start.record(b);
  b.timeline().append(1000);
  end.record(b);
  EXPECT_DOUBLE_EQ(start.device_elapsed_ms(end), 1000 / 1e6);
  Event never;
  never.wait(a);  // an event never recorded is done at time 0
  EXPECT_EQ(a.timeline().now_ns(), 150u);
}

TEST(Timeline, StreamsOfOneDeviceStartNoEarlierThanWorkIssuedBefore) {
  auto frontier = std::make_shared<IssueFrontier>();
  Stream a(0, 0, /*launch_blocking=*/true, nullptr, frontier), b(0, 1, true, nullptr, frontier);
  a.timeline().append(100);
  EXPECT_EQ(b.timeline().append(10).start_ns, 0u);  // issued beside a's first launch: overlaps it
  a.timeline().append(50);                           // starts at 100: the frontier
  EXPECT_EQ(frontier->now_ns(), 100u);
  Event start;
  start.record(b);  // b is idle: the event is at the frontier, not at b's old end (10)
  EXPECT_EQ(start.device_time_ns(), 100u);
  const TimelineSpan late = b.timeline().append(5);  // issued after a's second launch
  EXPECT_EQ(late.start_ns, 100u);
  Event end;
  end.record(b);
  EXPECT_DOUBLE_EQ(start.device_elapsed_ms(end), 5 / 1e6);
  EXPECT_EQ(a.timeline().now_ns(), 150u);  // a keeps its own order
  frontier->advance_to(40);                // earlier times change nothing
  EXPECT_EQ(frontier->now_ns(), 100u);
}

TEST(Event, DeviceElapsedTimeRefusesEventsOfTwoDevices) {
  Stream a(0, 0, /*launch_blocking=*/true), b(1, 0, true);
  Event start, end;
  start.record(a);
  end.record(b);
  try {
    start.device_elapsed_ms(end);
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(error.what()).find("neuron:0 and the end event on neuron:1"), std::string::npos);
  }
}
