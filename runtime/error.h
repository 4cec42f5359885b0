// Errors raised by the simulated Neuron runtime.
//
// The runtime never includes torch headers: it throws neuron_rt::Error, and the
// bridge (csrc/) converts it to a PyTorch error in one place.
#pragma once

#include <stdexcept>
#include <string>

namespace neuron_rt {

enum class ErrorCode {
  kInvalidDevice,    // device index out of range or not visible
  kOutOfMemory,      // allocation beyond the per-core HBM budget
  kInvalidArgument,  // a bad setting or argument
  kBadFork,          // runtime used in a forked child after the parent initialised it
  kAsyncFailure,     // an asynchronous task on a stream failed (the stream's sticky error)
  kTimeout,          // a wait did not finish within its time limit
  kAborted,          // the stream was aborted (e.g. a collective gave up)
  kCorruptProgram,   // a program file or payload is damaged, truncated or foreign
};

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

// Formats a byte count as "1.50 GiB" / "12.00 MiB" / "512 bytes".
std::string format_bytes(unsigned long long bytes);

}  // namespace neuron_rt
