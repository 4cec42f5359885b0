#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "runtime/metrics.h"

using neuron_rt::Metrics;

TEST(Metrics, NothingIsCollectedWhileDisabled) {
  Metrics& metrics = Metrics::get();
  metrics.set_enabled(false);
  metrics.clear_counters();
  metrics.increment("Test.Disabled");
  EXPECT_FALSE(metrics.counter_value("Test.Disabled").has_value());
}

TEST(Metrics, CountersAndMetricsFromManyThreads) {
  Metrics& metrics = Metrics::get();
  metrics.set_enabled(true);
  metrics.clear_counters();
  metrics.clear_metrics();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        metrics.increment("Test.Hits");
        metrics.record("Test.Time", double(i));
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(metrics.counter_value("Test.Hits").value(), 4000);
  auto data = metrics.metric_data("Test.Time").value();
  EXPECT_EQ(data.count, 4000u);
  EXPECT_EQ(data.min, 0.0);
  EXPECT_EQ(data.max, 999.0);
  EXPECT_EQ(data.recent.size(), Metrics::kMaxSamples);
  EXPECT_NE(metrics.report().find("Counter: Test.Hits\n  Value: 4000"), std::string::npos);
  EXPECT_EQ(metrics.report({"Other"}, {}).find("Test.Hits"), std::string::npos);
  metrics.clear_counters();
  EXPECT_TRUE(metrics.counter_names().empty());
  metrics.set_enabled(false);
}
