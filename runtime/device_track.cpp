#include "device_track.h"

#include <utility>

namespace neuron_rt {

const char* engine_name(Engine engine) {
  switch (engine) {
    case Engine::kNone: return "none";
    case Engine::kTensor: return "TensorE";
    case Engine::kVector: return "VectorE";
    case Engine::kScalar: return "ScalarE";
    case Engine::kDMA: return "DMA";
    case Engine::kCollective: return "CC";
    case Engine::kProgram: return "program";
  }
  return "?";
}

Engine engine_of(WorkKind kind) {
  switch (kind) {
    case WorkKind::kNone: return Engine::kNone;
    case WorkKind::kMatmul: return Engine::kTensor;
    case WorkKind::kPointwise:
    case WorkKind::kReduction:
    case WorkKind::kNorm: return Engine::kVector;
    case WorkKind::kTranscendental:
    case WorkKind::kSoftmax: return Engine::kScalar;
    case WorkKind::kDataMovement:
    case WorkKind::kDeviceCopy:
    case WorkKind::kHostToDevice:
    case WorkKind::kDeviceToHost: return Engine::kDMA;
  }
  return Engine::kNone;
}

DeviceTrack& DeviceTrack::get() {
  static DeviceTrack* track = new DeviceTrack();
  return *track;
}

void DeviceTrack::start() {
  std::lock_guard<std::mutex> lock(mutex_);
  spans_.clear();
  dropped_ = 0;
  recording_.store(true, std::memory_order_relaxed);
}

void DeviceTrack::stop() {
  std::lock_guard<std::mutex> lock(mutex_);
  recording_.store(false, std::memory_order_relaxed);
}

void DeviceTrack::record(DeviceSpan&& span) {
  std::lock_guard<std::mutex> lock(mutex_);
  // Checked again under the lock: a launch that saw recording() just before stop() adds nothing.
  if (!recording_.load(std::memory_order_relaxed)) return;
  if (spans_.size() >= capacity_) {
    ++dropped_;
    return;
  }
  spans_.push_back(std::move(span));
}

DeviceTrack::Recording DeviceTrack::take() {
  std::lock_guard<std::mutex> lock(mutex_);
  recording_.store(false, std::memory_order_relaxed);
  Recording recording{std::move(spans_), dropped_};
  spans_ = {};
  dropped_ = 0;
  return recording;
}

void DeviceTrack::set_capacity(size_t capacity) {
  std::lock_guard<std::mutex> lock(mutex_);
  capacity_ = capacity;
}

size_t DeviceTrack::capacity() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return capacity_;
}

}  // namespace neuron_rt
