// Counters and metrics of the runtime, under the names torch_neuronx.metrics reports
// ("CompilationCache.InMemoryHits", "CompilationCache.CompilationTime", ...).
//
// Equivalent to: torch_xla's debug metrics, which torch_neuronx.metrics follows. A counter
// is a named integer; a metric is a named series of samples (count, sum, min, max and the
// most recent kMaxSamples values). Collection is off unless TORCH_NEURONX_METRICS_ENABLED=1
// (read once) or set_enabled(true); increment() and record() do nothing while it is off.
//
// Thread safety: every method may be called from any thread at once.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace neuron_rt {

struct MetricData {
  uint64_t count = 0;
  double sum = 0, min = 0, max = 0;
  std::vector<double> recent;  // the latest samples, oldest first
};

class Metrics {
 public:
  static constexpr size_t kMaxSamples = 1024;
  // The process's metrics (made on first use, never destroyed).
  static Metrics& get();

  bool enabled() const;
  void set_enabled(bool enabled);
  void increment(const std::string& counter, int64_t by = 1);
  void record(const std::string& metric, double value);

  std::vector<std::string> counter_names() const;  // sorted
  std::optional<int64_t> counter_value(const std::string& counter) const;
  std::vector<std::string> metric_names() const;  // sorted
  std::optional<MetricData> metric_data(const std::string& metric) const;
  // A text report of the given counters and metrics (all when both lists are empty).
  std::string report(const std::vector<std::string>& counters = {},
                     const std::vector<std::string>& metrics = {}) const;
  void clear_counters();
  void clear_metrics();

 private:
  Metrics();
  mutable std::mutex mutex_;
  bool enabled_ = false;
  std::map<std::string, int64_t> counters_;
  std::map<std::string, MetricData> metrics_;
};

}  // namespace neuron_rt
