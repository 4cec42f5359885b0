// Platform topology of the simulated Neuron device: which chips and logical
// NeuronCores exist, and how much HBM each logical core may use.
//
// Facts matched from the real hardware:
//   trn1: 2 NeuronCores per chip, 16 GiB HBM each, LNC=1 only.
//   trn2: 8 physical NeuronCores per chip and 96 GiB HBM; LNC=2 (default) groups
//         them into 4 logical cores of 24 GiB, LNC=1 gives 8 cores of 12 GiB.
//   trn3: 8 physical NeuronCores per chip and 144 GiB HBM; LNC=2 (default) gives 4 logical
//         cores of 36 GiB, LNC=1 8 cores of 18 GiB.
//
// Settings (read once, when the runtime starts):
//   NEURON_SIM_PLATFORM       trn1 | trn2 | trn3             (default trn2)
//   NEURON_SIM_CHIPS          number of chips                (default 1)
//   NEURON_LOGICAL_NC_CONFIG  1 | 2                          (default: 2 on trn2/trn3, 1 on trn1)
//   NEURON_RT_VISIBLE_CORES   "2", "0-3", "0,2,5"            (default: all)
//   NEURON_SIM_HBM_BYTES_PER_CORE  override of the per-core budget (for tests)
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace neuron_rt {

enum class Platform { kTrn1, kTrn2, kTrn3 };

struct LogicalCore {
  int global_index;         // index among all logical cores of the instance
  int chip;                 // chip holding this core
  int first_physical_core;  // first physical NeuronCore of this logical core (global)
  int physical_cores;       // physical cores grouped into it (= LNC)
  uint64_t hbm_bytes;       // HBM budget of this logical core
};

struct Topology {
  Platform platform = Platform::kTrn2;
  int chips = 1;
  int logical_nc_config = 2;
  std::vector<LogicalCore> visible;  // device index i is visible[i]

  int total_logical_cores() const;
  std::string platform_name() const;  // "trn1" / "trn2" / "trn3"

  // Builds a topology; throws Error(kInvalidArgument) naming the bad setting.
  static Topology make(Platform platform, int chips, int logical_nc_config,
                       const std::string& visible_cores, uint64_t hbm_override = 0);
  // Builds the topology from the settings above, given an environment map
  // (the process environment when `env` is null).
  static Topology from_environment(const std::map<std::string, std::string>* env = nullptr);
};

// Parses "0-3", "1,3", "2" into a sorted list of indices; throws on bad text.
std::vector<int> parse_core_list(const std::string& text, int limit);

}  // namespace neuron_rt
