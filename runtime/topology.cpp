#include "topology.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "error.h"

namespace neuron_rt {

namespace {
constexpr uint64_t kGiB = 1ull << 30;

std::string get_setting(const std::map<std::string, std::string>* env, const char* name) {
  if (env) {
    auto it = env->find(name);
    return it == env->end() ? std::string() : it->second;
  }
  const char* value = std::getenv(name);
  return value ? std::string(value) : std::string();
}

long parse_int(const std::string& text, const char* setting) {
  char* end = nullptr;
  long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0') {
    throw Error(ErrorCode::kInvalidArgument,
                std::string(setting) + "='" + text + "' is not an integer");
  }
  return value;
}
}  // namespace

std::string format_bytes(unsigned long long bytes) {
  char buffer[64];
  if (bytes >= kGiB) {
    std::snprintf(buffer, sizeof(buffer), "%.2f GiB", double(bytes) / double(kGiB));
  } else if (bytes >= (1ull << 20)) {
    std::snprintf(buffer, sizeof(buffer), "%.2f MiB", double(bytes) / double(1ull << 20));
  } else if (bytes >= 1024) {
    std::snprintf(buffer, sizeof(buffer), "%.2f KiB", double(bytes) / 1024.0);
  } else {
    std::snprintf(buffer, sizeof(buffer), "%llu bytes", bytes);
  }
  return buffer;
}

std::vector<int> parse_core_list(const std::string& text, int limit) {
  std::vector<int> cores;
  std::stringstream stream(text);
  std::string item;
  auto bad = [&](const std::string& why) {
    return Error(ErrorCode::kInvalidArgument,
                 "NEURON_RT_VISIBLE_CORES='" + text + "': " + why +
                     " (expected a core index, a range like 0-3, or a comma list; "
                     "this instance has logical cores 0-" + std::to_string(limit - 1) + ")");
  };
  while (std::getline(stream, item, ',')) {
    if (item.empty()) throw bad("empty entry");
    auto dash = item.find('-');
    long first, last;
    try {
      if (dash == std::string::npos) {
        first = last = parse_int(item, "NEURON_RT_VISIBLE_CORES");
      } else {
        first = parse_int(item.substr(0, dash), "NEURON_RT_VISIBLE_CORES");
        last = parse_int(item.substr(dash + 1), "NEURON_RT_VISIBLE_CORES");
      }
    } catch (const Error&) {
      throw bad("'" + item + "' is not a core index or range");
    }
    if (first > last) throw bad("range '" + item + "' is reversed");
    if (first < 0 || last >= limit) throw bad("core " + std::to_string(first < 0 ? first : last) + " does not exist");
    for (long core = first; core <= last; ++core) cores.push_back(int(core));
  }
  std::sort(cores.begin(), cores.end());
  cores.erase(std::unique(cores.begin(), cores.end()), cores.end());
  if (cores.empty()) throw bad("no cores listed");
  return cores;
}

int Topology::total_logical_cores() const {
  int physical_per_chip = platform == Platform::kTrn1 ? 2 : 8;
  return chips * physical_per_chip / logical_nc_config;
}

std::string Topology::platform_name() const {
  return platform == Platform::kTrn1 ? "trn1" : platform == Platform::kTrn3 ? "trn3" : "trn2";
}

Topology Topology::make(Platform platform, int chips, int logical_nc_config,
                        const std::string& visible_cores, uint64_t hbm_override) {
  Topology topology;
  topology.platform = platform;
  if (chips < 1 || chips > 64) {
    throw Error(ErrorCode::kInvalidArgument,
                "NEURON_SIM_CHIPS=" + std::to_string(chips) + " is out of range (1 to 64)");
  }
  topology.chips = chips;
  if (platform == Platform::kTrn1 && logical_nc_config != 1) {
    throw Error(ErrorCode::kInvalidArgument,
                "NEURON_LOGICAL_NC_CONFIG=" + std::to_string(logical_nc_config) +
                    " is not supported on trn1 (only 1); unset it or use NEURON_SIM_PLATFORM=trn2");
  }
  if (logical_nc_config != 1 && logical_nc_config != 2) {
    throw Error(ErrorCode::kInvalidArgument,
                "NEURON_LOGICAL_NC_CONFIG=" + std::to_string(logical_nc_config) + " must be 1 or 2");
  }
  topology.logical_nc_config = logical_nc_config;
  const int physical_per_chip = platform == Platform::kTrn1 ? 2 : 8;
  const uint64_t hbm_per_physical =
      platform == Platform::kTrn1 ? 16 * kGiB : platform == Platform::kTrn3 ? 18 * kGiB : 12 * kGiB;
  const int total = topology.total_logical_cores();
  std::vector<int> indices;
  if (visible_cores.empty()) {
    for (int i = 0; i < total; ++i) indices.push_back(i);
  } else {
    indices = parse_core_list(visible_cores, total);
  }
  const int logical_per_chip = physical_per_chip / logical_nc_config;
  for (int index : indices) {
    LogicalCore core;
    core.global_index = index;
    core.chip = index / logical_per_chip;
    core.first_physical_core = index * logical_nc_config;
    core.physical_cores = logical_nc_config;
    core.hbm_bytes = hbm_override ? hbm_override : hbm_per_physical * logical_nc_config;
    topology.visible.push_back(core);
  }
  return topology;
}

Topology Topology::from_environment(const std::map<std::string, std::string>* env) {
  std::string platform_text = get_setting(env, "NEURON_SIM_PLATFORM");
  Platform platform = Platform::kTrn2;
  if (platform_text == "trn1") {
    platform = Platform::kTrn1;
  } else if (platform_text == "trn3") {
    platform = Platform::kTrn3;
  } else if (!platform_text.empty() && platform_text != "trn2") {
    throw Error(ErrorCode::kInvalidArgument,
                "NEURON_SIM_PLATFORM='" + platform_text + "' is unknown; use trn1, trn2 or trn3");
  }
  std::string chips_text = get_setting(env, "NEURON_SIM_CHIPS");
  int chips = chips_text.empty() ? 1 : int(parse_int(chips_text, "NEURON_SIM_CHIPS"));
  std::string lnc_text = get_setting(env, "NEURON_LOGICAL_NC_CONFIG");
  int lnc = lnc_text.empty() ? (platform == Platform::kTrn1 ? 1 : 2)
                             : int(parse_int(lnc_text, "NEURON_LOGICAL_NC_CONFIG"));
  std::string hbm_text = get_setting(env, "NEURON_SIM_HBM_BYTES_PER_CORE");
  uint64_t hbm = 0;
  if (!hbm_text.empty()) {
    long value = parse_int(hbm_text, "NEURON_SIM_HBM_BYTES_PER_CORE");
    if (value <= 0) {
      throw Error(ErrorCode::kInvalidArgument, "NEURON_SIM_HBM_BYTES_PER_CORE must be positive");
    }
    hbm = uint64_t(value);
  }
  return make(platform, chips, lnc, get_setting(env, "NEURON_RT_VISIBLE_CORES"), hbm);
}

}  // namespace neuron_rt
