#include <cmath>
#include "platform_spec.h"

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "error.h"

namespace neuron_rt {

double PlatformSpec::get(const std::string& name) const {
  auto it = constants_.find(name);
  if (it == constants_.end()) {
    throw Error(ErrorCode::kInvalidArgument, "the platform data file has no constant '" + name + "' for " +
                                                 platform_ + " (add it with its source)");
  }
  return it->second.value;
}

namespace {

// A cursor over one line, for the tiny grammar in platform_spec.h.
struct Line {
  const std::string& text;
  size_t at = 0;
  void skip_spaces() {
    while (at < text.size() && std::isspace(static_cast<unsigned char>(text[at]))) ++at;
  }
  bool take(char c) {
    skip_spaces();
    if (at < text.size() && text[at] == c) {
      ++at;
      return true;
    }
    return false;
  }
  std::string name() {
    skip_spaces();
    const size_t begin = at;
    while (at < text.size() && (std::isalnum(static_cast<unsigned char>(text[at])) || text[at] == '_')) ++at;
    return text.substr(begin, at - begin);
  }
  bool at_end_or_comment() {
    skip_spaces();
    return at == text.size() || text[at] == '#';
  }
};

}  // namespace

std::map<std::string, PlatformSpec> parse_platform_specs(const std::string& text, const std::string& origin) {
  std::map<std::string, std::map<std::string, PlatformConstant>> tables;
  std::string current;
  std::istringstream lines(text);
  std::string raw;
  int number = 0;
  while (std::getline(lines, raw)) {
    ++number;
    auto bad = [&](const std::string& why) {
      return Error(ErrorCode::kInvalidArgument, origin + ":" + std::to_string(number) + ": " + why +
                                                    " (expected [platform] or name = { value = N, source = \"...\" })");
    };
    Line line{raw};
    if (line.at_end_or_comment()) continue;
    if (line.take('[')) {
      current = line.name();
      if (current.empty() || !line.take(']') || !line.at_end_or_comment()) throw bad("bad table header");
      if (tables.count(current)) throw bad("table [" + current + "] appears twice");
      tables[current];
      continue;
    }
    if (current.empty()) throw bad("a constant before the first [platform] table");
    const std::string key = line.name();
    if (key.empty() || !line.take('=') || !line.take('{')) throw bad("bad entry");
    if (line.name() != "value" || !line.take('=')) throw bad("the entry must start with 'value ='");
    line.skip_spaces();
    const char* begin = raw.c_str() + line.at;
    char* end = nullptr;
    PlatformConstant constant;
    constant.value = std::strtod(begin, &end);
    if (end == begin) throw bad("'value' is not a number");
    // Every constant is a size, a rate, a count or a latency: a zero, negative, nan or inf value
    // would make the cost model divide by it or drop a term without a word.
    if (!std::isfinite(constant.value) || constant.value <= 0) {
      throw bad("'" + key + "' must be a finite number above 0");
    }
    line.at += size_t(end - begin);
    if (!line.take(',') || line.name() != "source" || !line.take('=') || !line.take('"')) {
      throw bad("the entry needs a source: '..., source = \"...\"'");
    }
    const size_t close = raw.find('"', line.at);
    if (close == std::string::npos) throw bad("unterminated source string");
    constant.source = raw.substr(line.at, close - line.at);
    line.at = close + 1;
    if (constant.source.empty()) throw bad("empty source for '" + key + "'");
    if (!line.take('}') || !line.at_end_or_comment()) throw bad("text after the entry");
    if (!tables[current].emplace(key, std::move(constant)).second) throw bad("'" + key + "' appears twice");
  }
  std::map<std::string, PlatformSpec> specs;
  for (auto& [name, constants] : tables) specs.emplace(name, PlatformSpec(name, std::move(constants)));
  return specs;
}

std::map<std::string, PlatformSpec> load_platform_specs(const std::string& path) {
  std::ifstream file(path);
  if (!file) {
    throw Error(ErrorCode::kInvalidArgument, "cannot read the platform data file '" + path + "'");
  }
  std::stringstream text;
  text << file.rdbuf();
  return parse_platform_specs(text.str(), path);
}

}  // namespace neuron_rt
