#include "NeuronLogging.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace torch_neuron {
namespace {

struct Log {
  int level = int(LogLevel::kWarning);
  std::FILE* file = stderr;
  std::mutex mutex;
  Log() {
    if (const char* text = std::getenv("TORCH_NEURONX_LOG_LEVEL")) {
      char* end = nullptr;
      long value = std::strtol(text, &end, 10);
      if (end != text && *end == '\0' && value >= 0 && value <= 3) {
        level = int(value);
      } else {
        std::fprintf(stderr,
                     "[torch_neuronx] WARNING: TORCH_NEURONX_LOG_LEVEL='%s' is not 0 (ERROR), 1 "
                     "(WARNING), 2 (INFO) or 3 (DEBUG); using 1\n",
                     text);
      }
    }
    if (const char* path = std::getenv("TORCH_NEURONX_LOG_FILE")) {
      if (*path) {
        if (std::FILE* opened = std::fopen(path, "a")) {
          file = opened;
        } else {
          std::fprintf(stderr,
                       "[torch_neuronx] WARNING: cannot open TORCH_NEURONX_LOG_FILE='%s' for "
                       "appending; logging to standard error\n",
                       path);
        }
      }
    }
  }
};

Log& the_log() {
  static Log* log = new Log();  // never destroyed: ops may log during static destruction
  return *log;
}

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kError: return "ERROR";
    case LogLevel::kWarning: return "WARNING";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kDebug: return "DEBUG";
  }
  return "?";
}

}  // namespace

bool log_enabled(LogLevel level) { return int(level) <= the_log().level; }

void log(LogLevel level, const std::string& message) {
  Log& log = the_log();
  if (int(level) > log.level) return;
  std::lock_guard<std::mutex> lock(log.mutex);
  std::fprintf(log.file, "[torch_neuronx] %s: %s\n", level_name(level), message.c_str());
  std::fflush(log.file);
}

}  // namespace torch_neuron
