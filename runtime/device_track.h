// The profiler's device track: while recording is on, each launch the device clock costs
// (Note [Device clock] in cost_model.h) leaves a span: its place on its stream's timeline
// (the span Timeline::append returned, so nothing is costed twice), its op, its engine and
// what it moves and computes. The profiler shows them as one track per (device, stream),
// beside the host's ops.
//
// Equivalent to: the activity buffer CUPTI fills with a CUDA stream's kernels for Kineto's GPU
// track, with predicted instead of measured times.
//
// Bounded: a recording holds at most capacity() spans; later ones are dropped and counted
// (dropped()), so a long profile never grows memory without limit.
//
// Thread safety: every method may be called from any thread at once; record() takes a mutex,
// recording() is one relaxed load (the clock reads it on every launch).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "cost_model.h"

namespace neuron_rt {

// The engine of a NeuronCore that does a span's work.
enum class Engine : uint8_t {
  kNone,        // no compute: a launch that pays its fixed cost only (empty, view, ...)
  kTensor,      // TensorE: matmuls
  kVector,      // VectorE: pointwise ops, reductions, norms
  kScalar,      // ScalarE: transcendentals, softmax
  kDMA,         // the DMA engines: copies, host transfers, data movement
  kCollective,  // the collective engine over NeuronLink / EFA
  kProgram,     // a compiled program: all of them, one launch
};
// "TensorE", "VectorE", "ScalarE", "DMA", "CC", "program", "none".
const char* engine_name(Engine engine);
Engine engine_of(WorkKind kind);

// One launch on a stream's device timeline.
struct DeviceSpan {
  int device = 0;
  int stream = 0;           // Stream::id()
  uint64_t start_ns = 0;    // predicted device time, ns since the runtime started
  uint64_t end_ns = 0;
  std::string name;         // the op ("aten::mm"), program or collective
  const char* path = "";    // where the launch came from ("direct", "copy", ...); a static string
  Engine engine = Engine::kNone;
  const char* work = "";    // work_kind_name() of its (first) part, or "program" / "collective"; static
  uint64_t bytes = 0;       // HBM bytes read and written (a collective: its buffer); 0 when unknown
  uint64_t flops = 0;       // matmul FLOPs (2 * batch * m * k * n, unpadded); 0 for other work
  double fixed_ns = 0, compute_ns = 0, memory_ns = 0;  // the cost's parts (WorkCost)
};

class DeviceTrack {
 public:
  static constexpr size_t kDefaultCapacity = size_t(1) << 20;

  // The process's track (made on first use, never destroyed: launches may come during exit).
  static DeviceTrack& get();

  bool recording() const { return recording_.load(std::memory_order_relaxed); }
  // Starts a recording: forgets the spans and the drop count of the previous one.
  void start();
  // Stops recording; the spans stay until take() (a later start() forgets them).
  void stop();
  // Adds `span` while recording (ignored otherwise); drops and counts it when full.
  void record(DeviceSpan&& span);

  struct Recording {
    std::vector<DeviceSpan> spans;  // in the order they were recorded
    uint64_t dropped = 0;
  };
  // Stops recording and hands over what was recorded (the track is empty afterwards).
  Recording take();

  // The most spans a recording keeps (at least 0); applies from the next record().
  void set_capacity(size_t capacity);
  size_t capacity() const;

 private:
  std::atomic<bool> recording_{false};
  mutable std::mutex mutex_;
  std::vector<DeviceSpan> spans_;  // guarded by mutex_
  uint64_t dropped_ = 0;           // guarded by mutex_
  size_t capacity_ = kDefaultCapacity;  // guarded by mutex_
};

}  // namespace neuron_rt
