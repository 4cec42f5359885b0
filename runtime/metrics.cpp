#include "metrics.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>

namespace neuron_rt {

Metrics& Metrics::get() {
  static Metrics* metrics = new Metrics();
  return *metrics;
}

Metrics::Metrics() {
  const char* setting = std::getenv("TORCH_NEURONX_METRICS_ENABLED");
  if (setting) {
    std::string value(setting);
    enabled_ = value == "1" || value == "true" || value == "True" || value == "yes";
  }
}

bool Metrics::enabled() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return enabled_;
}

void Metrics::set_enabled(bool enabled) {
  std::lock_guard<std::mutex> lock(mutex_);
  enabled_ = enabled;
}

void Metrics::increment(const std::string& counter, int64_t by) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (enabled_) counters_[counter] += by;
}

void Metrics::record(const std::string& metric, double value) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!enabled_) return;
  MetricData& data = metrics_[metric];
  data.min = data.count ? std::min(data.min, value) : value;
  data.max = data.count ? std::max(data.max, value) : value;
  data.count++;
  data.sum += value;
  if (data.recent.size() == kMaxSamples) data.recent.erase(data.recent.begin());
  data.recent.push_back(value);
}

std::vector<std::string> Metrics::counter_names() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> names;
  for (const auto& entry : counters_) names.push_back(entry.first);
  return names;
}

std::optional<int64_t> Metrics::counter_value(const std::string& counter) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = counters_.find(counter);
  if (it == counters_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> Metrics::metric_names() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> names;
  for (const auto& entry : metrics_) names.push_back(entry.first);
  return names;
}

std::optional<MetricData> Metrics::metric_data(const std::string& metric) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = metrics_.find(metric);
  if (it == metrics_.end()) return std::nullopt;
  return it->second;
}

std::string Metrics::report(const std::vector<std::string>& counters,
                            const std::vector<std::string>& metrics) const {
  const bool all = counters.empty() && metrics.empty();
  auto wanted = [](const std::vector<std::string>& list, const std::string& name) {
    return std::find(list.begin(), list.end(), name) != list.end();
  };
  std::lock_guard<std::mutex> lock(mutex_);
  std::ostringstream out;
  for (const auto& [name, data] : metrics_) {
    if (!all && !wanted(metrics, name)) continue;
    out << "Metric: " << name << "\n  TotalSamples: " << data.count << "\n  Accumulator: " << data.sum
        << "\n  Min: " << data.min << "\n  Max: " << data.max
        << "\n  Mean: " << (data.count ? data.sum / double(data.count) : 0.0) << "\n";
  }
  for (const auto& [name, value] : counters_) {
    if (!all && !wanted(counters, name)) continue;
    out << "Counter: " << name << "\n  Value: " << value << "\n";
  }
  return out.str();
}

void Metrics::clear_counters() {
  std::lock_guard<std::mutex> lock(mutex_);
  counters_.clear();
}

void Metrics::clear_metrics() {
  std::lock_guard<std::mutex> lock(mutex_);
  metrics_.clear();
}

}  // namespace neuron_rt
