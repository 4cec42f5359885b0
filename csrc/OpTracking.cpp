#include "OpTracking.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <unordered_set>

#include "NeuronLogging.h"

namespace torch_neuron {
namespace {

struct Registry {
  std::mutex mutex;
  std::vector<TrackedOp*> ops;  // every record ever made; records are never destroyed
  std::shared_mutex set_mutex;
  std::unordered_set<std::string> device_ops;
  std::unordered_set<std::string> cpu_ops;
};

Registry& registry() {
  static auto* r = new Registry();
  return *r;
}

// "aten::add.out" -> "add"; "aten::index_select" -> "index_select".
std::string base_name(const std::string& name) {
  size_t start = name.find("::");
  start = start == std::string::npos ? 0 : start + 2;
  size_t dot = name.find('.', start);
  return name.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
}

bool fallback_only_for_unimplemented_ops() {
  static const bool value = [] {
    const char* text = std::getenv("TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS");
    if (!text) return false;
    std::string v(text);
    return v == "1" || v == "true" || v == "True" || v == "TRUE" || v == "yes";
  }();
  return value;
}

}  // namespace

namespace detail {
thread_local const TrackedOp* t_current_op = nullptr;
}
const TrackedOp* current_op() { return detail::t_current_op; }

TrackedOp::TrackedOp(std::string name, KernelPath path) : name_(std::move(name)), path_(path) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.ops.push_back(this);
}

bool TrackedOp::on_device() const {
  auto& r = registry();
  const std::string base = base_name(name_);
  std::shared_lock<std::shared_mutex> lock(r.set_mutex);
  return r.device_ops.count(base) && !r.cpu_ops.count(base);
}

void TrackedOp::first_hit() {
  seen_.store(true, std::memory_order_relaxed);
  if (!log_enabled(LogLevel::kInfo) || logged_.exchange(true)) return;
  if (!on_device()) {
    log(LogLevel::kInfo, "Operator '" + name_ + "' fell back to CPU");
  } else if (log_enabled(LogLevel::kDebug)) {
    log(LogLevel::kDebug, "Operator '" + name_ + "' executed on Neuron");
  }
}

void TrackedOp::failed(const std::exception& error) {
  const bool native = on_device();
  if (native && fallback_only_for_unimplemented_ops()) {
    TORCH_CHECK(false, "CPU fallback disabled because TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS=1. ",
                "Operation ", name_, " failed to execute on Neuron (last implementation: ",
                path_ == KernelPath::kHot ? "neuron kernel" : "neuron generic kernel", "). Details: ",
                error.what());
  }
  if (native && !failed_.exchange(true)) {
    log(LogLevel::kInfo, "Operator '" + name_ + "' executed via CPU fallback");
  }
  throw;  // the CPU would raise the same error: the caller gets it unchanged
}

void TrackedOp::clear() {
  count_.store(0);
  seen_.store(false);
  failed_.store(false);
}

TrackedOp& tracked_op(const c10::OperatorHandle& op) {
  static std::shared_mutex mutex;
  static auto* records = new std::unordered_map<const c10::FunctionSchema*, std::unique_ptr<TrackedOp>>();
  const c10::FunctionSchema* schema = &op.schema();
  {
    std::shared_lock<std::shared_mutex> lock(mutex);
    auto it = records->find(schema);
    if (it != records->end()) return *it->second;
  }
  const auto& name = op.operator_name();
  std::string full = name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
  std::unique_lock<std::shared_mutex> lock(mutex);
  auto& slot = (*records)[schema];
  if (!slot) slot = std::make_unique<TrackedOp>(std::move(full), KernelPath::kGeneric);
  return *slot;
}

void set_torchneuron_op_set(const std::vector<std::string>& device_ops,
                            const std::vector<std::string>& cpu_ops) {
  auto& r = registry();
  std::unique_lock<std::shared_mutex> lock(r.set_mutex);
  r.device_ops = std::unordered_set<std::string>(device_ops.begin(), device_ops.end());
  r.cpu_ops = std::unordered_set<std::string>(cpu_ops.begin(), cpu_ops.end());
}

namespace {
template <typename Keep>
std::vector<TrackedOp*> select(Keep keep) {
  auto& r = registry();
  std::vector<TrackedOp*> all;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    all = r.ops;
  }
  std::vector<TrackedOp*> kept;
  std::unordered_set<std::string> names;  // two records (hot and generic) may share a name
  for (TrackedOp* op : all) {
    if (op->seen() && keep(*op) && names.insert(op->name()).second) kept.push_back(op);
  }
  return kept;
}

std::vector<std::string> names_of(const std::vector<TrackedOp*>& ops) {
  std::vector<std::string> names;
  for (TrackedOp* op : ops) names.push_back(op->name());
  return names;
}
}  // namespace

std::vector<std::string> executed_op_names() {
  return names_of(select([](const TrackedOp& op) { return op.on_device(); }));
}

std::vector<std::string> fallback_op_names() {
  return names_of(select([](TrackedOp& op) { return !op.on_device() || op.failed_once(); }));
}

void clear_op_tracking() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (TrackedOp* op : r.ops) op->clear();
}

std::vector<OpCount> op_counts() {
  auto& r = registry();
  std::vector<OpCount> counts;
  std::lock_guard<std::mutex> lock(r.mutex);
  for (TrackedOp* op : r.ops) {
    if (op->seen()) counts.push_back({op->name(), op->count(), op->path(), op->on_device()});
  }
  return counts;
}

}  // namespace torch_neuron
