#include "DeviceClock.h"

#include <ATen/core/ivalue.h>
#include <c10/core/ScalarType.h>

#include <c10/util/SmallVector.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <array>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "DeviceTrack.h"
#include "NeuronCommon.h"
#include "runtime/platform_spec.h"

namespace torch_neuron {

using neuron_rt::NumberFormat;
using neuron_rt::Work;
using neuron_rt::WorkKind;

namespace {

// ---- what an op is, from its name -------------------------------------------------------------

// How the matmul dimensions of an op are read from its tensor operands.
enum class Operands : uint8_t {
  kGeneral,     // no matmul
  kMatmul,      // mm, bmm, matmul, mv, dot, _scaled_mm: (a, b)
  kAfterBias,   // addmm, baddbmm, addbmm, addmv: (bias, a, b)
  kLinear,      // linear: (x, weight[n, k], bias)
  kConvolution, // convolution: (input, weight[out, in/groups, ...], bias)
  kAttention,   // scaled dot product attention: (q, k, v, ...): two matmuls and a softmax
  kAttentionBackward,  // its backward: (grad_out, q, k, v, ...): five matmuls and the softmax's backward
  kFlashAttention,          // FlashAttention's forward: (q, k, v, cum_seq_q, ...), packed or dense
  kFlashAttentionBackward,  // its backward: (grad_out, q, k, v, out, logsumexp, cum_seq_q, ...)
};
struct OpClass {
  WorkKind kind = WorkKind::kPointwise;
  Operands operands = Operands::kGeneral;
  bool in_place = false;  // the name ends in '_': writes its first operand
  bool out_variant = false;  // overload "out": its out= operands are written, not read
  bool scatters = false;  // writes given values at given indexes of its destination (index_copy, scatter, ...)
};

// The base name: "aten::add_.Tensor" -> "add_", "neuron::rms_norm" -> "rms_norm".
std::string_view base_name(std::string_view name) {
  const size_t scope = name.find("::");
  if (scope != std::string_view::npos) name.remove_prefix(scope + 2);
  return name.substr(0, name.find('.'));
}

OpClass classify_name(std::string_view full) {
  static const std::unordered_map<std::string_view, std::pair<WorkKind, Operands>> table = [] {
    std::unordered_map<std::string_view, std::pair<WorkKind, Operands>> t;
    auto add = [&](WorkKind kind, Operands operands, std::initializer_list<const char*> names) {
      for (const char* name : names) t[name] = {kind, operands};
    };
    add(WorkKind::kMatmul, Operands::kMatmul, {"mm", "bmm", "matmul", "mv", "dot", "vdot", "_scaled_mm", "inner"});
    add(WorkKind::kMatmul, Operands::kAfterBias, {"addmm", "baddbmm", "addbmm", "addmv", "_addmm_activation"});
    add(WorkKind::kMatmul, Operands::kLinear, {"linear"});
    add(WorkKind::kMatmul, Operands::kConvolution,
        {"convolution", "_convolution", "conv1d", "conv2d", "conv3d", "mkldnn_convolution", "_slow_conv2d_forward"});
    add(WorkKind::kMatmul, Operands::kAttention,
        {"scaled_dot_product_attention", "_scaled_dot_product_flash_attention_for_cpu",
         "_scaled_dot_product_attention_math", "_scaled_dot_product_flash_attention",
         "_scaled_dot_product_efficient_attention", "_scaled_dot_product_fused_attention_overrideable"});
    add(WorkKind::kMatmul, Operands::kAttentionBackward,
        {"_scaled_dot_product_flash_attention_for_cpu_backward", "_scaled_dot_product_flash_attention_backward",
         "_scaled_dot_product_efficient_attention_backward", "_scaled_dot_product_cudnn_attention_backward",
         "_scaled_dot_product_fused_attention_overrideable_backward"});
    add(WorkKind::kMatmul, Operands::kFlashAttention,
        {"_flash_attention_forward", "_flash_attention_forward_no_dropout_inplace", "flash_attention_forward"});
    add(WorkKind::kMatmul, Operands::kFlashAttentionBackward, {"_flash_attention_backward", "flash_attention_backward"});
    add(WorkKind::kTranscendental, Operands::kGeneral,
        {"exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "tanh", "sigmoid", "gelu", "silu", "mish",
         "softplus", "erf", "erfc", "erfinv", "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh",
         "asinh", "acosh", "atanh", "rsqrt", "sqrt", "reciprocal", "pow", "elu", "selu", "celu", "logit",
         "log_sigmoid_forward", "gelu_backward", "silu_backward", "tanh_backward", "sigmoid_backward", "lgamma",
         "digamma"});
    add(WorkKind::kSoftmax, Operands::kGeneral,
        {"softmax", "_softmax", "log_softmax", "_log_softmax", "_safe_softmax", "_softmax_backward_data",
         "_log_softmax_backward_data"});
    add(WorkKind::kNorm, Operands::kGeneral,
        {"layer_norm", "native_layer_norm", "rms_norm", "_fused_rms_norm", "group_norm", "native_group_norm",
         "batch_norm", "native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
         "native_layer_norm_backward", "_fused_rms_norm_backward"});
    add(WorkKind::kReduction, Operands::kGeneral,
        {"sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "prod", "var", "std", "var_mean",
         "std_mean", "norm", "linalg_vector_norm", "cumsum", "cumprod", "logsumexp", "all", "any", "topk", "sort",
         "aminmax", "nansum", "count_nonzero"});
    add(WorkKind::kDataMovement, Operands::kGeneral,
        {"cat", "stack", "index_select", "embedding", "gather", "scatter", "scatter_add", "index", "index_put",
         "_index_put_impl", "clone", "contiguous", "_to_copy", "repeat", "repeat_interleave", "expand_copy",
         "permute_copy", "narrow_copy", "slice_scatter", "select_scatter", "masked_select", "nonzero", "flip",
         "roll", "unfold", "_unsafe_index", "index_copy", "embedding_dense_backward", "constant_pad_nd",
         "copy", "_copy_from", "_copy_from_and_resize", "index_add", "index_reduce", "scatter_reduce",
         "masked_scatter"});
    add(WorkKind::kNone, Operands::kGeneral,
        {"empty", "empty_strided", "resize", "set", "_local_scalar_dense", "as_strided", "view", "_reshape_alias",
         "alias", "detach"});
    return t;
  }();
  OpClass op;
  std::string_view base = base_name(full);
  const size_t dot = full.find('.');
  op.out_variant = dot != std::string_view::npos && full.substr(dot + 1).rfind("out", 0) == 0;
  if (!base.empty() && base.back() == '_' && base != "_") {
    op.in_place = true;
    base.remove_suffix(1);
  }
  auto it = table.find(base);
  if (it != table.end()) {
    op.kind = it->second.first;
    op.operands = it->second.second;
  }
  static const std::unordered_set<std::string_view> scatter_family = {
      "index_copy", "index_put", "_index_put_impl", "scatter", "scatter_add", "scatter_reduce", "index_add",
      "index_reduce", "masked_scatter"};
  op.scatters = op.kind == WorkKind::kDataMovement && scatter_family.count(base) > 0;
  return op;  // everything else: one VectorE pass over its output (fill, random, where, add, ...)
}

// Names are static strings or a plan's name (kept for the process); the cache checks the text too.
const OpClass& classify(const char* name) {
  struct Entry {
    std::string text;
    OpClass op;
  };
  thread_local std::unordered_map<const char*, Entry> cache;
  auto it = cache.find(name);
  if (it == cache.end() || it->second.text != name) {
    it = cache.insert_or_assign(name, Entry{name, classify_name(name)}).first;
  }
  return it->second.op;
}

// ---- the tensors of a launch ----------------------------------------------------------------

// Pointers into what the call site holds (alive for the whole note_launch); no copies, no
// reference counts (Note [Device clock]: the clock's host cost stays small).
using TensorPointers = c10::SmallVector<const at::Tensor*, 8>;

// Nested tensors have no regular sizes to read: the clock leaves them out (their launch pays
// its fixed cost only).
bool costed(const at::Tensor& t) { return !t.is_nested(); }

void add(TensorPointers& into, const at::Tensor& t) {
  if (costed(t)) into.push_back(&t);
}

void each_tensor(const c10::IValue& value, TensorPointers& into) {
  if (value.isTensor()) {
    add(into, value.toTensor());
  } else if (value.isList()) {
    for (const c10::IValue& element : value.toListRef()) {
      if (element.isTensor()) add(into, element.toTensor());
    }
  }
}

struct Tensors {
  TensorPointers inputs, outputs;
};

void tensors_of(const Launch& launch, const OpClass& op, Tensors& t) {
  const LaunchOperands& given = launch.operands;
  for (const at::Tensor* p : given.input_pointers) add(t.inputs, *p);
  for (const at::Tensor& p : given.inputs) add(t.inputs, p);
  for (const c10::IValue& value : given.arguments) each_tensor(value, t.inputs);
  for (const at::Tensor& p : given.outputs) add(t.outputs, p);
  for (const c10::IValue& value : given.results) each_tensor(value, t.outputs);
  if (op.out_variant && !t.outputs.empty()) {
    // The out= operands are written, not read: each output drops its one occurrence among the
    // arguments (the last: out= comes after the inputs in the schema), and no other. An in-place
    // op run as add.out(x, y, out=x) still reads x.
    for (const at::Tensor* out : t.outputs) {
      if (!out->defined()) continue;
      for (size_t i = t.inputs.size(); i-- > 0;) {
        if (t.inputs[i]->defined() && t.inputs[i]->unsafeGetTensorImpl() == out->unsafeGetTensorImpl()) {
          t.inputs.erase(t.inputs.begin() + static_cast<std::ptrdiff_t>(i));
          break;
        }
      }
    }
  }
  if (t.outputs.empty() && op.in_place && !t.inputs.empty()) t.outputs.push_back(t.inputs.front());
}

uint64_t hbm_bytes(const at::Tensor& t) {
  return t.defined() && t.device().type() == kNeuron ? uint64_t(t.nbytes()) : 0;
}
uint64_t hbm_bytes(const TensorPointers& tensors) {
  uint64_t bytes = 0;
  for (const at::Tensor* t : tensors) bytes += hbm_bytes(*t);
  return bytes;
}
uint64_t largest_numel(const TensorPointers& tensors) {
  uint64_t numel = 0;
  for (const at::Tensor* t : tensors) {
    if (t->defined()) numel = std::max(numel, uint64_t(t->numel()));
  }
  return numel;
}

NumberFormat format_of(const at::Tensor& t) {
  if (!t.defined()) return NumberFormat::kFP32;
  switch (t.scalar_type()) {
    case at::kBFloat16:
    case at::kHalf:
      return NumberFormat::kBF16;
    case at::kFloat8_e4m3fn:
    case at::kFloat8_e5m2:
    case at::kFloat8_e4m3fnuz:
    case at::kFloat8_e5m2fnuz:
      return NumberFormat::kFP8;
    case at::kFloat:
      return NumberFormat::kFP32;
    default:
      return NumberFormat::kOther;
  }
}

const at::Tensor* operand(const TensorPointers& tensors, size_t index) {
  return index < tensors.size() && tensors[index]->defined() ? tensors[index] : nullptr;
}

// The dimensions of `a @ b` with torch.matmul's broadcasting (1-D operands as a row / a column).
neuron_rt::MatmulShape matmul_shape(const at::Tensor& a, const at::Tensor& b) {
  neuron_rt::MatmulShape s;
  if (a.dim() == 0 || b.dim() == 0) return s;
  s.k = a.size(-1);
  s.m = a.dim() >= 2 ? a.size(-2) : 1;
  s.n = b.dim() >= 2 ? b.size(-1) : 1;
  const int64_t a_batch = a.dim() > 2 && s.m * s.k > 0 ? a.numel() / (s.m * s.k) : 1;
  const int64_t b_batch = b.dim() > 2 && s.k * s.n > 0 ? b.numel() / (s.k * s.n) : 1;
  s.batch = std::max(a_batch, b_batch);
  return s;
}

// An attention's three parts from parts[0] (its operands' HBM traffic, counted once there): the
// scores' matmul, a softmax over `softmax_elements` and the weighted sum's matmul, the last two
// without a launch or HBM traffic of their own (the scores stay on chip). A backward is the
// scores recomputed and dP = dO v^T (two matmuls of the scores' shape), dV, dQ and dK (three of
// the weighted sum's) and the elementwise dS (the softmax's part).
int attention_parts(std::array<Work, kMaxLaunchParts>& parts, bool backward, neuron_rt::MatmulShape scores_shape,
                    uint64_t softmax_elements, neuron_rt::MatmulShape weighted_shape) {
  if (backward) {
    scores_shape.batch *= 2;
    weighted_shape.batch *= 3;
  }
  Work scores = parts[0], softmax = parts[0], weighted = parts[0];
  scores.matmul = scores_shape;
  softmax.kind = WorkKind::kSoftmax;
  softmax.elements = softmax_elements;
  weighted.matmul = weighted_shape;
  softmax.hbm_bytes_read = softmax.hbm_bytes_written = weighted.hbm_bytes_read = weighted.hbm_bytes_written = 0;
  softmax.eager_launch = weighted.eager_launch = false;
  parts[0] = scores;
  parts[1] = softmax;
  parts[2] = weighted;
  return 3;
}

// Fills `parts` with the launch's work (one part, or three for an attention); returns how many.
int describe(const Launch& launch, std::array<Work, kMaxLaunchParts>& parts) {
  Work& work = parts[0];
  if (launch.path == LaunchPath::kProgram || launch.path == LaunchPath::kCollective) {
    // Without a description (cost_of): one launch's fixed cost.
    work.kind = WorkKind::kNone;
    return 1;
  }
  const OpClass& op = classify(launch.name);
  Tensors t;
  tensors_of(launch, op, t);
  work.hbm_bytes_read = hbm_bytes(t.inputs);
  work.hbm_bytes_written = hbm_bytes(t.outputs);
  const at::Tensor* first_output = operand(t.outputs, 0);
  const at::Tensor* first_input = operand(t.inputs, 0);
  if (first_output || first_input) work.format = format_of(first_output ? *first_output : *first_input);

  if (launch.path == LaunchPath::kCopy && t.inputs.empty() && t.outputs.empty()) {
    // The simulator's own copy of a kernel's host result into device memory (HostViews.cpp,
    // "adopt a host result"): on the device the kernel writes its output in place, and the
    // op's launch already costs that. Nothing to add.
    work.kind = WorkKind::kNone;
    work.eager_launch = false;
    return 1;
  }
  if (launch.path == LaunchPath::kCopy) {
    const at::Tensor* source = first_input;
    const at::Tensor* destination = first_output;
    const bool from_device = source && source->device().type() == kNeuron;
    const bool to_device = destination && destination->device().type() == kNeuron;
    work.kind = from_device && to_device ? WorkKind::kDeviceCopy
                : to_device              ? WorkKind::kHostToDevice
                                         : WorkKind::kDeviceToHost;
    work.moved_bytes = destination ? uint64_t(destination->nbytes()) : 0;
    return 1;
  }
  work.kind = op.kind;
  switch (op.kind) {
    case WorkKind::kPointwise:
    case WorkKind::kTranscendental:
      work.elements = t.outputs.empty() ? largest_numel(t.inputs) : largest_numel(t.outputs);
      break;
    case WorkKind::kReduction:
    case WorkKind::kSoftmax:
    case WorkKind::kNorm:
      work.elements = largest_numel(t.inputs);
      break;
    case WorkKind::kDataMovement:
      // A gather or a copy reads what it writes (not the whole table it indexes). A scatter into
      // its destination in place (a KV cache's index_copy_) moves its values and indexes only:
      // the rest of the destination stays where it is.
      if (op.in_place && op.scatters && t.inputs.size() > 1) {
        // Reads every value and index (more values than slots, as scatter_add_ of many rows
        // into few: all of them); writes at most the destination.
        const uint64_t destination = hbm_bytes(*t.inputs.front());
        const uint64_t values = hbm_bytes(t.inputs) - destination;
        work.moved_bytes = values;
        work.hbm_bytes_read = values;
        work.hbm_bytes_written = std::min(values, destination);
        break;
      } else {
        work.moved_bytes = t.outputs.empty() ? work.hbm_bytes_read : work.hbm_bytes_written;
      }
      work.hbm_bytes_read = work.hbm_bytes_written = work.moved_bytes;
      break;
    case WorkKind::kMatmul: {
      const size_t first = op.operands == Operands::kAfterBias ? 1 : 0;
      const at::Tensor* a = operand(t.inputs, first);
      const at::Tensor* b = operand(t.inputs, first + 1);
      if (!a || !b) break;
      work.format = format_of(*a);
      if (op.operands == Operands::kLinear) {
        work.matmul.k = a->dim() ? a->size(-1) : 0;
        work.matmul.m = work.matmul.k ? a->numel() / work.matmul.k : 0;
        work.matmul.n = b->dim() == 2 ? b->size(0) : 1;
      } else if (op.operands == Operands::kConvolution) {
        work.matmul.n = b->dim() ? b->size(0) : 0;
        work.matmul.k = work.matmul.n ? b->numel() / work.matmul.n : 0;
        const uint64_t out_elements = first_output ? uint64_t(first_output->numel()) : 0;
        work.matmul.m = work.matmul.n ? int64_t(out_elements) / work.matmul.n : 0;
      } else if (op.operands == Operands::kFlashAttention || op.operands == Operands::kFlashAttentionBackward) {
        // Note [FlashAttention's ops on neuron]: q [total, Hq, D] with N + 1 offsets, or dense
        // [B, S, Hq, D]. A launch does not carry the offsets' values, so the N sequences are
        // costed as N of the average length (total / N): a lower bound of the sum of squares.
        // Forward and backward as kAttention's (attention_parts).
        const bool backward = op.operands == Operands::kFlashAttentionBackward;
        const at::Tensor* q = operand(t.inputs, backward ? 1 : 0);
        const at::Tensor* cum = operand(t.inputs, backward ? 6 : 3);
        if (!q || (q->dim() != 3 && q->dim() != 4)) break;
        const bool varlen = q->dim() == 3 && cum && cum->dim() == 1 && !at::isFloatingType(cum->scalar_type());
        const int64_t heads = q->size(-2), embed = q->size(-1);
        const int64_t sequences = varlen ? std::max<int64_t>(cum->numel() - 1, 1) : q->size(0);
        const int64_t length = varlen ? (q->size(0) + sequences - 1) / sequences : q->size(1);
        const int64_t batch = heads * sequences;
        return attention_parts(parts, backward, {batch, length, embed, length}, uint64_t(batch * length * length),
                               {batch, length, length, embed});
      } else if (op.operands == Operands::kAttention || op.operands == Operands::kAttentionBackward) {
        // The backward's operands follow its grad_out: (grad_out, q, k, v, ...).
        const bool backward = op.operands == Operands::kAttentionBackward;
        if (backward) {
          a = operand(t.inputs, 1);
          b = operand(t.inputs, 2);
        }
        const at::Tensor* v = operand(t.inputs, backward ? 3 : 2);
        if (!a || !b || !v || a->dim() < 2 || b->dim() < 2) break;
        // q [..., L, E], k [..., S, E], v [..., S, Ev]: q k^T, a softmax over S, then @ v; the
        // scores stay on chip (as a fused attention kernel keeps them), so HBM traffic is the
        // operands' and the output's, counted once on the first part.
        const int64_t length = a->size(-2), embed = a->size(-1), source = b->size(-2), value_embed = v->size(-1);
        const int64_t heads = (length * embed) != 0 ? a->numel() / (length * embed) : 0;
        return attention_parts(parts, backward, {heads, length, embed, source}, uint64_t(heads * length * source),
                               {heads, length, source, value_embed});
      } else {
        work.matmul = matmul_shape(*a, *b);
      }
      break;
    }
    default:
      break;
  }
  return 1;
}

// ---- the clock ----------------------------------------------------------------------------------

struct ClockState {
  bool on = false;
  std::map<std::string, neuron_rt::PlatformSpec> specs;
  std::once_flag model_made;
  std::unique_ptr<neuron_rt::CostModel> model;
};
ClockState& clock() {
  static auto* state = new ClockState();  // never destroyed: launches may come during exit
  return *state;
}

const neuron_rt::CostModel& cost_model() {
  ClockState& state = clock();
  std::call_once(state.model_made, [&] {
    const auto& topology = runtime().topology();
    auto it = state.specs.find(topology.platform_name());
    TORCH_CHECK(it != state.specs.end(), "the platform data file has no [", topology.platform_name(),
                "] table; add the platform's constants (with their sources) or choose another NEURON_SIM_PLATFORM");
    state.model = std::make_unique<neuron_rt::CostModel>(NEURON_RT_CALL(neuron_rt::CostModel(it->second, topology.logical_nc_config)));
  });
  return *state.model;
}

// The work each device has done (device_work()): FLOPs and HBM bytes, summed by the observer.
constexpr int kCountedDevices = 1024;
struct DeviceWorkCounters {
  std::atomic<uint64_t> flops{0}, hbm_bytes{0};
};
DeviceWorkCounters* work_counters() {
  static auto* counters = new DeviceWorkCounters[kCountedDevices];  // never destroyed (launches at exit)
  return counters;
}

class ClockObserver final : public LaunchObserver {
 public:
  void on_launch(const Launch& launch) override {
    if (launch.device < 0) return;
    const LaunchCost cost = cost_of(launch);
    const neuron_rt::Stream& stream = launch.stream ? *launch.stream : current_stream(launch.device);
    const neuron_rt::TimelineSpan span = stream.timeline().append(cost.cost.ns);
    if (launch.device < kCountedDevices) {
      DeviceWorkCounters& counters = work_counters()[launch.device];
      if (cost.cost.flops > 0) counters.flops.fetch_add(uint64_t(cost.cost.flops), std::memory_order_relaxed);
      if (cost.cost.hbm_bytes > 0) {
        counters.hbm_bytes.fetch_add(uint64_t(cost.cost.hbm_bytes), std::memory_order_relaxed);
      }
    }
    if (device_track_recording()) record_device_span(launch, stream, cost, span);
  }
};

void add_cost(neuron_rt::WorkCost& sum, const neuron_rt::WorkCost& cost) {
  sum.ns += cost.ns;
  sum.fixed_ns += cost.fixed_ns;
  sum.compute_ns += cost.compute_ns;
  sum.memory_ns += cost.memory_ns;
  sum.flops += cost.flops;
  sum.hbm_bytes += cost.hbm_bytes;
}

thread_local int program_steps_depth = 0;  // Note [Program steps run through the dispatcher]

}  // namespace

int enter_program_steps() { return program_steps_depth++; }
void leave_program_steps() {
  TORCH_CHECK(program_steps_depth > 0, "leave_program_steps() without enter_program_steps() on this thread");
  --program_steps_depth;
}

LaunchCost cost_of(const Launch& launch) {
  LaunchCost result;
  if (launch.operands.cost) {
    result.cost = *launch.operands.cost;
    return result;
  }
  const neuron_rt::CostModel& model = cost_model();
  if (launch.operands.collective) {
    result.cost = model.cost(*launch.operands.collective);
    return result;
  }
  result.part_count = describe(launch, result.parts);
  // A program's steps, and an op that joined a concatenation group (Note [Adaptive Eager
  // Execution]: the group's launch is its first op's), pay no launch of their own.
  const bool no_launch = program_steps_depth > 0 || launch.path == LaunchPath::kFused;
  for (int i = 0; i < result.part_count; ++i) {
    if (no_launch) result.parts[i].eager_launch = false;
    add_cost(result.cost, model.cost(result.parts[i]));
  }
  return result;
}

namespace {
neuron_rt::WorkCost program_cost(const std::vector<ProgramStepOperands>& steps, const neuron_rt::CostModel& model,
                                 std::vector<neuron_rt::WorkCost>* per_step = nullptr) {
  neuron_rt::WorkCost total;
  total.fixed_ns = model.program_launch_ns();
  total.ns = uint64_t(std::llround(total.fixed_ns));
  for (const ProgramStepOperands& step : steps) {
    if (std::string_view(step.name).rfind("_c10d_functional::", 0) == 0) {
      // Note [Collectives in programs]: the process group costs each collective when it runs.
      if (per_step) per_step->push_back(neuron_rt::WorkCost{});
      continue;
    }
    LaunchOperands operands = LaunchOperands::of_tensors(step.inputs, step.outputs);
    std::array<Work, kMaxLaunchParts> parts;
    const int count = describe(Launch{LaunchPath::kDirect, step.name, 0, nullptr, operands}, parts);
    neuron_rt::WorkCost cost;
    for (int i = 0; i < count; ++i) {
      parts[i].eager_launch = false;
      add_cost(cost, model.cost(parts[i]));
    }
    add_cost(total, cost);
    if (per_step) per_step->push_back(cost);
  }
  return total;
}
}  // namespace

neuron_rt::WorkCost cost_of_program(const std::vector<ProgramStepOperands>& steps) {
  return program_cost(steps, cost_model());
}

neuron_rt::WorkCost cost_of_program(const std::vector<ProgramStepOperands>& steps, const std::string& platform,
                                    int logical_nc_config, std::vector<neuron_rt::WorkCost>* per_step) {
  return program_cost(steps, cost_model_for(platform, logical_nc_config), per_step);
}

void start_device_clock(const std::string& path) {
  ClockState& state = clock();
  state.specs = NEURON_RT_CALL(neuron_rt::load_platform_specs(path));
  const char* setting = std::getenv("NEURON_SIM_DEVICE_CLOCK");
  const std::string value = setting ? setting : "";
  TORCH_CHECK(value.empty() || value == "0" || value == "1", "NEURON_SIM_DEVICE_CLOCK='", value,
              "' must be 1 (the predicted device clock, the default) or 0 (off: elapsed_time is host time)");
  state.on = value != "0";
  static auto* observer = new ClockObserver();  // never destroyed: launches may come during exit
  if (state.on) set_launch_observer(LaunchObserverSlot::kClock, observer);
}

bool device_clock_on() { return clock().on; }

namespace {
// -1: the current device; any other index must be a visible device's (IndexError otherwise).
int clock_device(int64_t device) {
  auto& rt = runtime();
  if (device == -1) return rt.current_device();
  NEURON_RT_CALL(rt.check_device(device));
  return int(device);
}
}  // namespace

std::pair<uint64_t, uint64_t> device_work(int64_t index) {
  TORCH_CHECK(device_clock_on(), "the device clock is off (NEURON_SIM_DEVICE_CLOCK=0); unset it to count device work");
  const int device = clock_device(index);
  if (device >= kCountedDevices) return {0, 0};
  const DeviceWorkCounters& counters = work_counters()[device];
  return {counters.flops.load(std::memory_order_relaxed), counters.hbm_bytes.load(std::memory_order_relaxed)};
}

uint64_t device_time_ns(int64_t index) {
  TORCH_CHECK(device_clock_on(), "the device clock is off (NEURON_SIM_DEVICE_CLOCK=0); unset it to predict device time");
  const int device = clock_device(index);
  return NEURON_RT_CALL(runtime().device_time_ns(device));
}

}  // namespace torch_neuron

// ---- the dry run: one op from its metadata (DeviceClock.h, cost_of_shapes) ------------------

namespace torch_neuron {
namespace {

// Sizes and a dtype, no memory: a null data pointer on the device (nothing reads it; the
// clock reads sizes, dtype, device and nbytes only).
at::Tensor shape_only_tensor(const OperandShape& shape) {
  const c10::Device device = shape.on_device ? c10::Device(kNeuron, 0) : c10::Device(c10::kCPU);
  const caffe2::TypeMeta dtype = c10::scalarTypeToTypeMeta(shape.dtype);
  int64_t numel = 1;
  for (int64_t size : shape.sizes) numel *= size;
  c10::Storage storage(c10::Storage::use_byte_size_t(), size_t(numel) * dtype.itemsize(),
                       c10::DataPtr(nullptr, device), /*allocator=*/nullptr, /*resizable=*/false);
  const c10::DispatchKeySet keys(shape.on_device ? c10::DispatchKey::PrivateUse1 : c10::DispatchKey::CPU);
  at::Tensor tensor = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), keys, dtype);
  tensor.unsafeGetTensorImpl()->set_sizes_contiguous(shape.sizes);
  return tensor;
}

// Op names kept for the process: classify() caches by the name's address.
const char* interned(const std::string& name) {
  static std::mutex mutex;
  static auto* names = new std::unordered_map<std::string, std::unique_ptr<std::string>>();
  std::lock_guard<std::mutex> lock(mutex);
  auto& entry = (*names)[name];
  if (!entry) entry = std::make_unique<std::string>(name);
  return entry->c_str();
}


}  // namespace

const neuron_rt::CostModel& cost_model_for(const std::string& platform, int logical_nc_config) {
  static std::mutex mutex;
  static auto* models = new std::map<std::pair<std::string, int>, std::unique_ptr<neuron_rt::CostModel>>();
  std::lock_guard<std::mutex> lock(mutex);
  auto& model = (*models)[{platform, logical_nc_config}];
  if (!model) {
    const ClockState& state = clock();
    auto it = state.specs.find(platform);
    TORCH_CHECK(it != state.specs.end(), "the platform data file has no [", platform,
                "] table; choose trn1, trn2 or trn3, or add the platform's constants (with their sources)");
    const double most = it->second.constants().count("max_logical_nc_config")
                            ? it->second.get("max_logical_nc_config") : 2.0;
    TORCH_CHECK(logical_nc_config >= 1 && logical_nc_config <= most, "logical core configuration (LNC) ",
                logical_nc_config, " is not offered on ", platform, " (1 to ", int(most), ")");
    model = std::make_unique<neuron_rt::CostModel>(NEURON_RT_CALL(neuron_rt::CostModel(it->second, logical_nc_config)));
  }
  return *model;
}


LaunchCost cost_of_shapes(const std::string& name, LaunchPath path, const std::vector<OperandShape>& inputs,
                          const std::vector<OperandShape>& outputs, const std::string& platform,
                          int logical_nc_config, bool eager_launch) {
  std::vector<at::Tensor> input_tensors, output_tensors;
  input_tensors.reserve(inputs.size());
  output_tensors.reserve(outputs.size());
  for (const OperandShape& shape : inputs) input_tensors.push_back(shape_only_tensor(shape));
  for (const OperandShape& shape : outputs) output_tensors.push_back(shape_only_tensor(shape));
  const LaunchOperands operands = LaunchOperands::of_tensors(input_tensors, output_tensors);
  const Launch launch{path, interned(name), /*device=*/0, /*stream=*/nullptr, operands};
  // As cost_of(), with the given platform's model instead of the runtime's.
  LaunchCost result;
  result.part_count = describe(launch, result.parts);
  if (!eager_launch) {
    for (int i = 0; i < result.part_count; ++i) result.parts[i].eager_launch = false;
  }
  const neuron_rt::CostModel& model = cost_model_for(platform, logical_nc_config);
  for (int i = 0; i < result.part_count; ++i) {
    add_cost(result.cost, model.cost(result.parts[i]));
  }
  return result;
}

}  // namespace torch_neuron
