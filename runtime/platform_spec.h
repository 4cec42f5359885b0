// The constants of one target platform (trn1, trn2, trn3) for the device clock, read from
// the platform data file (python/torch_neuron_sim/data/platforms.toml): each a number with
// its source. Note [Device clock] in cost_model.h says how they are used.
//
// Equivalent to: a device's capability table (cudaDeviceProp's clock rate, memory bus width);
// here every entry also carries where it comes from.
//
// File format: a subset of TOML, one entry per line:
//   # comment
//   [trn2]
//   name = { value = 79, source = "where the figure comes from" }
// The source is a plain string without escapes. Anything else is an error naming the line.
//
// Thread safety: a loaded PlatformSpec is immutable; read it from any thread.
#pragma once

#include <map>
#include <string>

namespace neuron_rt {

struct PlatformConstant {
  double value = 0;
  std::string source;
};

class PlatformSpec {
 public:
  PlatformSpec() = default;
  PlatformSpec(std::string platform, std::map<std::string, PlatformConstant> constants)
      : platform_(std::move(platform)), constants_(std::move(constants)) {}

  const std::string& platform() const { return platform_; }
  // The constant `name`; throws Error(kInvalidArgument) naming the platform when missing.
  double get(const std::string& name) const;
  const std::map<std::string, PlatformConstant>& constants() const { return constants_; }

 private:
  std::string platform_;
  std::map<std::string, PlatformConstant> constants_;
};

// Every platform of the file at `path`; throws Error(kInvalidArgument) naming the file and
// line of a malformed entry, an entry without a source, or a duplicate.
std::map<std::string, PlatformSpec> load_platform_specs(const std::string& path);
// The same, from the file's text (`origin` names it in errors).
std::map<std::string, PlatformSpec> parse_platform_specs(const std::string& text, const std::string& origin);

}  // namespace neuron_rt
