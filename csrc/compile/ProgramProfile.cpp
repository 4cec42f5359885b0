// The executor's step profile (program_profile() in Executor.h).
#include "Executor.h"

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "Step.h"

namespace torch_neuron {

// NEURON_SIM_PROGRAM_PROFILE=1: time spent per op kind in programs (program_profile()), for
// finding what a compiled graph spends its time on. Off: one branch per step.
namespace {
struct StepProfile {
  std::mutex mutex;
  std::unordered_map<std::string, std::pair<uint64_t, uint64_t>> by_name;  // calls, ns
};
StepProfile& step_profile() {
  static StepProfile profile;
  return profile;
}
const bool kProfileSteps = [] {
  const char* value = std::getenv("NEURON_SIM_PROGRAM_PROFILE");
  return value && std::string(value) == "1";
}();
}  // namespace

std::vector<std::tuple<std::string, uint64_t, double>> program_profile(bool reset) {
  auto& profile = step_profile();
  std::lock_guard<std::mutex> lock(profile.mutex);
  std::vector<std::tuple<std::string, uint64_t, double>> rows;
  for (const auto& [name, entry] : profile.by_name) rows.emplace_back(name, entry.first, double(entry.second) * 1e-9);
  if (reset) profile.by_name.clear();
  return rows;
}

void ProgramExecutor::execute_steps_profiled(RunState& state) {
  if (kProfileSteps) {
    std::vector<std::pair<const std::string*, uint64_t>> times;
    times.reserve(steps_.size());
    execute_steps(state, &times);
    auto& profile = step_profile();
    std::lock_guard<std::mutex> lock(profile.mutex);
    for (const auto& [name, ns] : times) {
      auto& entry = profile.by_name[*name];
      entry.first += 1;
      entry.second += ns;
    }
    return;
  }
  execute_steps(state, nullptr);
}

}  // namespace torch_neuron
