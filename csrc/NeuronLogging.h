// The log of the torch_neuronx face, configured as the real package's:
//   TORCH_NEURONX_LOG_LEVEL  0 = ERROR, 1 = WARNING (default), 2 = INFO, 3 = DEBUG
//   TORCH_NEURONX_LOG_FILE   append the log to this file instead of standard error
// Both are read once, on first use. Thread safety: log() may be called from any thread.
#pragma once

#include <string>

namespace torch_neuron {

enum class LogLevel { kError = 0, kWarning = 1, kInfo = 2, kDebug = 3 };

bool log_enabled(LogLevel level);
// Writes one line: "[torch_neuronx] INFO: <message>".
void log(LogLevel level, const std::string& message);

}  // namespace torch_neuron
