#include "Executor.h"
#include "DirectSteps.h"
#include "Step.h"
#include "Pointwise.h"
#include "ProgramValues.h"
#include "../kernels/DirectKernels.h"
#include "../kernels/SmallMatmul.h"

#include <ATen/CPUFunctions.h>
#include <ATen/EmptyTensor.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/core/List.h>
#include <ATen/ScalarOps.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "../NeuronAllocator.h"
#include "../NeuronCommon.h"
#include "../NeuronGenerator.h"
#include "../kernels/Random.h"
#include "../HostViews.h"
#include "../DeviceClock.h"
#include "../Launch.h"

namespace torch_neuron {

using neuron_rt::ProgramArg;
using neuron_rt::ProgramValue;


namespace {

bool contiguous(const neuron_rt::TensorSpec& spec) {
  int64_t expected = 1;
  for (int64_t d = int64_t(spec.sizes.size()) - 1; d >= 0; --d) {
    if (spec.sizes[d] != 1 && spec.strides[d] != expected) return false;
    expected *= spec.sizes[d];
  }
  return spec.offset == 0;
}

}  // namespace


ProgramExecutor::ProgramExecutor(neuron_rt::ProgramDesc program, c10::DeviceIndex device)
    : program_(std::move(program)), device_(device) {
  NEURON_RT_CALL(runtime().check_device(device_));
  build();
}

ProgramExecutor::~ProgramExecutor() = default;

size_t ProgramExecutor::direct_nodes() const {
  size_t n = 0;
  for (const auto& step : steps_) n += step->direct ? 1 : 0;
  return n;
}

size_t ProgramExecutor::dispatched_nodes() const { return steps_.size() - direct_nodes(); }

std::unique_ptr<ProgramExecutor::Step> ProgramExecutor::pointwise_step(const neuron_rt::ProgramNode& node,
                                                                       std::unique_ptr<Step> step) {
  const auto& values = program_.values;
  TORCH_CHECK(node.args.size() == 3 && node.args[0].kind == ProgramArg::Kind::kValueList &&
                  node.args[1].kind == ProgramArg::Kind::kIntList && node.args[2].kind == ProgramArg::Kind::kDoubleList &&
                  node.outputs.size() == 1 && node.outputs[0] >= 0 && size_t(node.outputs[0]) < values.size(),
              "program ", program_.name, ": malformed neuron::pointwise node");
  PointwiseCode code;
  code.inputs = int(node.args[0].list.size());
  code.code = node.args[1].list;
  code.scalars = node.args[2].reals;
  check_pointwise_code(code, program_.name);
  std::vector<int> inputs;
  for (size_t e = 0; e < node.args[0].list.size(); ++e) {
    const int64_t id = node.args[0].list[e];
    TORCH_CHECK(id >= 0 && size_t(id) < values.size() && !values[id].on_host, "program ", program_.name,
                ": neuron::pointwise reads value ", id, ", which is not a device value");
    inputs.push_back(int(id));
    step->tensors.push_back({0, int(e), int(id)});
  }
  TORCH_CHECK(!values[node.outputs[0]].on_host, "program ", program_.name, ": neuron::pointwise writes a host value");
  const int out = node.outputs[0];
  step->direct = [code = std::move(code), inputs = std::move(inputs), out](const Step&, const Get& v) {
    std::vector<at::Tensor> operands;
    operands.reserve(inputs.size());
    for (int id : inputs) operands.push_back(v(id));
    run_pointwise(v(out), operands, code);
  };
  return step;
}

void ProgramExecutor::build() {
  const auto& values = program_.values;
  for (int32_t id : program_.outputs) {
    if (id >= 0 && size_t(id) < values.size() && values[id].on_host) runs_inline_ = true;
  }
  const size_t count = values.size();
  fixed_.assign(count, at::Tensor());
  per_call_.assign(count, false);
  root_.resize(count);
  auto& memory = NEURON_RT_CALL(runtime().memory(device_));
  arena_ = neuron_rt::BufferRef::adopt(NEURON_RT_CALL(memory.allocate(program_.arena_bytes)));
  for (const std::string& bytes : program_.constants) {
    auto buffer = neuron_rt::BufferRef::adopt(NEURON_RT_CALL(memory.allocate(bytes.size())));
    if (!bytes.empty()) {
      neuron_rt::GuardScope scope;
      scope.add(buffer.get());
      std::memcpy(buffer->data(), bytes.data(), bytes.size());
    }
    constants_.push_back(std::move(buffer));
  }
  for (size_t i = 0; i < count; ++i) {
    const ProgramValue& value = values[i];
    root_[i] = int(i);
    switch (value.kind) {
      case ProgramValue::Kind::kInput:
      case ProgramValue::Kind::kOutput:
      case ProgramValue::Kind::kDynamic:
        per_call_[i] = true;
        break;
      case ProgramValue::Kind::kConstant: {
        auto& buffer = constants_[value.index];
        fixed_[i] = host_tensor(buffer->data(), buffer->size(), value.spec);
        break;
      }
      case ProgramValue::Kind::kArena: {
        char* base = static_cast<char*>(arena_->data()) + value.index;
        neuron_rt::TensorSpec spec = value.spec;
        fixed_[i] = host_tensor(base, value.bytes, spec);
        break;
      }
      case ProgramValue::Kind::kView: {
        root_[i] = root_[value.index];
        per_call_[i] = per_call_[value.index];
        if (!per_call_[i]) fixed_[i] = view_of(fixed_[value.index], value.spec);
        break;
      }
    }
  }
  for (const auto& node : program_.nodes) {
    auto step = std::make_unique<Step>();
    step->name = node.op;
    step->outputs = node.outputs;
    if (node.op == "neuron::pointwise") {  // Note [Fused pointwise kernels]
      steps_.push_back(pointwise_step(node, std::move(step)));
      continue;
    }
    const size_t dot = node.op.find('.');
    const std::string name = node.op.substr(0, dot);
    const std::string overload = dot == std::string::npos ? "" : node.op.substr(dot + 1);
    auto op = c10::Dispatcher::singleton().findSchema({name, overload});
    TORCH_CHECK(op.has_value(), "program ", program_.name, ": no operator ", node.op,
                " in this PyTorch (the program was made by another version; it is recompiled)");
    step->op = op;
    // Note [Random ops replayed in compiled graphs]: it reads the device's generator
    step->reads_generator = node.op == "neuron::rng_state";
    const auto& schema = op->schema();
    TORCH_CHECK(node.args.size() == schema.arguments().size(), "program ", program_.name, ": ", node.op, " has ",
                node.args.size(), " arguments, its schema ", schema.arguments().size());
    for (size_t a = 0; a < node.args.size(); ++a) {
      const ProgramArg& arg = node.args[a];
      const std::string mismatch = argument_mismatch(schema.arguments()[a], arg);
      TORCH_CHECK(mismatch.empty(), "program ", program_.name, ": ", node.op, " argument ", a, " (",
                  schema.arguments()[a].name(), "): ", mismatch);
      step->arguments.push_back(argument_value(arg));
      auto type = schema.arguments()[a].real_type();
      if (auto optional = type->cast<c10::OptionalType>()) type = optional->getElementType();
      const bool number = arg.kind == ProgramArg::Kind::kInt || arg.kind == ProgramArg::Kind::kDouble ||
                          arg.kind == ProgramArg::Kind::kBool;
      if (number && type->kind() == c10::TypeKind::TensorType) {
        // a Python number where the schema wants a tensor (x + 1): a wrapped number, as eager makes it
        at::Tensor wrapped = at::scalar_to_tensor(step->arguments.back().toScalar());
        wrapped.unsafeGetTensorImpl()->set_wrapped_number(true);
        step->arguments.back() = wrapped;
      }
      if (type->kind() == c10::TypeKind::GeneratorType) step->generators.push_back(a);
      if (arg.kind == ProgramArg::Kind::kValue) {
        step->tensors.push_back({a, -1, int(arg.integer)});
      } else if (arg.kind == ProgramArg::Kind::kValueList) {
        step->tensor_lists.push_back(a);
        for (size_t e = 0; e < arg.list.size(); ++e) step->tensors.push_back({a, int(e), int(arg.list[e])});
      }
    }
    const bool slot_output = node.outputs.size() == 1 && node.outputs[0] >= 0 &&
                             (values[node.outputs[0]].kind == ProgramValue::Kind::kArena ||
                              values[node.outputs[0]].kind == ProgramValue::Kind::kOutput) &&
                             !values[node.outputs[0]].on_host;
    step->lend = slot_output && contiguous(values[node.outputs[0]].spec);
    bool all_device = true;
    for (const auto& slot : step->tensors) {
      if (slot.value >= 0 && values[slot.value].on_host) all_device = false;
    }
    if (!step->generators.empty() || name.rfind("aten::", 0) != 0) runs_inline_ = true;  // random / non-ATen
    if (name.rfind("_c10d_functional::", 0) == 0) {  // Note [Collectives in programs]
      TORCH_CHECK(node.outputs.empty() || std::all_of(node.outputs.begin(), node.outputs.end(), [](int id) { return id < 0; }),
                  "program ", program_.name, ": collective step ", node.op, " makes a value; a program runs a "
                  "collective in place on memory another step defines");
      for (const auto& slot : step->tensors) {
        TORCH_CHECK(slot.value >= 0 && !values[slot.value].on_host &&
                        values[root_[slot.value]].kind != ProgramValue::Kind::kConstant &&
                        values[root_[slot.value]].kind != ProgramValue::Kind::kDynamic,
                    "program ", program_.name, ": collective step ", node.op, " is given value ", slot.value,
                    ", which is not device memory of the program's inputs, outputs or arena");
        const auto& alias = schema.arguments()[slot.position].alias_info();
        if (alias && alias->isWrite()) step->collective_writes = slot.value;
      }
      TORCH_CHECK(step->collective_writes >= 0 || name == "_c10d_functional::wait_tensor", "program ", program_.name,
                  ": collective step ", node.op, " writes no value; a program runs a collective in place");
      step->collective = true;
      has_collectives_ = true;
    }
    const bool in_place = node.op == "aten::copy_" || node.op == "aten::index_copy_";
    const bool cat_list = node.op == "aten::cat" && step->tensor_lists == std::vector<size_t>{0};
    if ((slot_output || in_place) && all_device && (step->tensor_lists.empty() || cat_list)) {
      step->direct = direct_kernel(node.op, *step);
      if (node.op == "aten::mm" && step->direct) {  // Note [Small bfloat16 matmuls]
        const int a = value_at(*step, 0), b = value_at(*step, 1), out = node.outputs[0];
        const auto& sa = values[a].spec.sizes;
        const auto& sb = values[b].spec.sizes;
        if (scalar_type(values[out].spec.dtype) == at::kBFloat16 && sa.size() == 2 && sb.size() == 2 &&
            small_matmul_applies(sa[0], sa[1], sb[1])) {  // probed now, for this thread's count
          // small_matmul decides again per call (a cached lookup): the verdict is per intra-op
          // thread count, and a program may run on a stream's worker with another count
          // (Note [Kernel threads]), or with oneDNN turned off meanwhile.
          step->direct = [=](const auto&, const Get& v) { direct::mm_out(const_cast<at::Tensor&>(v(out)), v(a), v(b), /*small=*/true); };
          // as the profile shows it: the kernel's form on this CPU (brgemm's transposed or direct
          // form, or the AVX2 dot form), README "Supported CPUs"
          step->name = "aten::mm (" + small_matmul_form() + ")";
        }
      }
    }
    for (int id : node.outputs) {
      if (id >= 0 && !per_call_[id]) step->fixed_writes.push_back(id);
    }
    // ATen's schemas mark every argument an op writes (a!); an op of another library may not
    // say: each fixed value it is given is checked.
    const bool annotated = name.rfind("aten::", 0) == 0;
    for (const auto& slot : step->tensors) {
      const auto& alias = schema.arguments()[slot.position].alias_info();
      if (slot.value >= 0 && !per_call_[slot.value] && (!annotated || (alias && alias->isWrite()))) {
        step->fixed_writes.push_back(slot.value);
      }
    }
    steps_.push_back(std::move(step));
  }
  pristine_.resize(count);
  for (size_t i = 0; i < count; ++i) {
    if (fixed_[i].defined()) pristine_[i] = same_view(fixed_[i]);
  }
  if (device_clock_on()) describe_cost();
}

// Note [Fixed values keep their metadata]
// The host views of fixed values (the arena's values, constants and views of them) are built
// once and handed to every call's kernels. A step may write a fixed value's bytes, never its
// storage or metadata: a step that replaced them (set_, as_strided_, resize_, an out= kernel
// resizing its output) would carry a pointer into one call's input into the next call, after
// that input was freed. After each step that may change a fixed value in place (its outputs and
// the arguments its schema marks as written), the value's storage, offset, sizes and strides are
// compared with the ones it was built with (a few integers per such value; an op outside ATen,
// whose schema may not mark what it writes, has every fixed value it is given checked); a
// change restores the value and fails the call with what the step did, before any later step
// can use it.
void ProgramExecutor::check_fixed(const Step& step) {
  for (int id : step.fixed_writes) {
    const at::Tensor& now = fixed_[id];
    const at::Tensor& built = pristine_[id];
    const bool same = now.unsafeGetTensorImpl()->storage().unsafeGetStorageImpl() ==
                          built.unsafeGetTensorImpl()->storage().unsafeGetStorageImpl() &&
                      now.storage_offset() == built.storage_offset() && now.sizes() == built.sizes() &&
                      now.strides() == built.strides() && now.scalar_type() == built.scalar_type();
    if (same) continue;
    const std::string was = c10::str(built.sizes(), " strides ", built.strides(), " offset ", built.storage_offset());
    const bool moved = now.unsafeGetTensorImpl()->storage().unsafeGetStorageImpl() !=
                       built.unsafeGetTensorImpl()->storage().unsafeGetStorageImpl();
    const std::string became = c10::str(now.sizes(), " strides ", now.strides(), " offset ", now.storage_offset(),
                                        moved ? ", in another storage" : "");
    fixed_[id] = same_view(built);
    TORCH_CHECK(false, "program ", program_.name, ": step ", step.name, " replaced the storage or metadata of value ",
                id, " (", was, " -> ", became, "), which lives in the program's own memory: a program may write ",
                "a value's bytes, not change what it points at (the value is restored; the call is refused)");
  }
}

void ProgramExecutor::bind_call(RunState& state, const std::vector<at::Tensor>& inputs, std::vector<at::Tensor>& outputs) {
  const auto& values = program_.values;
  state.values.assign(values.size(), at::Tensor());
  std::vector<at::Tensor> output_by_value(values.size());
  if (has_collectives_) {
    state.device_values.assign(values.size(), at::Tensor());
    state.device_roots.assign(values.size(), at::Tensor());
  }
  for (size_t i = 0; i < values.size(); ++i) {
    const ProgramValue& value = values[i];
    if (value.kind == ProgramValue::Kind::kInput) {
      state.values[i] = value.on_host ? inputs[value.index] : host_view(inputs[value.index]);
      if (has_collectives_ && !value.on_host) state.device_roots[i] = inputs[value.index];
    } else if (value.kind == ProgramValue::Kind::kOutput) {
      if (value.on_host) {
        output_by_value[i] = at::empty_strided(value.spec.sizes, value.spec.strides,
                                               at::TensorOptions().dtype(scalar_type(value.spec.dtype)));
        state.values[i] = output_by_value[i];
      } else {
        output_by_value[i] = at::empty_strided(
            value.spec.sizes, value.spec.strides,
            at::TensorOptions().dtype(scalar_type(value.spec.dtype)).device(kNeuron, device_));
        state.values[i] = host_view(output_by_value[i]);
        if (has_collectives_) state.device_roots[i] = output_by_value[i];
      }
    } else if (value.kind == ProgramValue::Kind::kView && per_call_[i] &&
               values[root_[i]].kind != ProgramValue::Kind::kDynamic) {  // those are their node's results
      // Rebased on the call's own offset: an input may be a slice of a larger storage whose
      // offset differs from the one it had when the graph was compiled.
      const at::Tensor& base = state.values[value.index];
      state.values[i] = view_of(base, rebased(value.spec, values[value.index].spec, base));
    }
  }
  // Each output as the caller sees it: a neuron tensor (a view of an input or of a fresh output).
  for (int32_t id : program_.outputs) {
    const ProgramValue& value = values[id];
    const int root = root_[id];
    const ProgramValue& base = values[root];
    at::Tensor device_base;
    if (base.kind == ProgramValue::Kind::kInput) {
      device_base = inputs[base.index];
    } else if (base.kind == ProgramValue::Kind::kOutput) {
      device_base = output_by_value[root];
    } else {
      TORCH_CHECK(false, "program ", program_.name, ": output value ", id, " is not backed by an input or an output");
    }
    outputs.push_back(value.kind == ProgramValue::Kind::kView ? output_view(device_base, value.spec, base.spec)
                                                              : device_base);
  }
}

void ProgramExecutor::execute(RunState& state) {
  // The program's kernels are the device's own work, on host views: a Python dispatch mode
  // active on the calling thread must not see them (as it does not see a CUDA graph's
  // kernels). AOTAutograd runs each compiled function's first call under one
  // (_AnalyzeCustomOpInputOutputMode), which turned the wrapped number an ATen kernel passes
  // to another (bitwise_and.Scalar -> .Tensor) into a Python int (`x & 0xFF` would fail); a user's FlopCounterMode would count host ops.
  c10::impl::ExcludeDispatchKeyGuard no_python(
      c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot}));
  if (has_collectives_) {
    try {
      execute_steps_profiled(state);
    } catch (...) {
      settle_collectives(state);
      throw;
    }
    return;
  }
  execute_steps_profiled(state);
}

void ProgramExecutor::execute_steps(RunState& state, std::vector<std::pair<const std::string*, uint64_t>>* times) {
  const auto& values = program_.values;
  const Get get = [&](int id) -> const at::Tensor& { return per_call_[id] ? state.values[id] : fixed_[id]; };
  for (const auto& step_pointer : steps_) {
    const Step& step = *step_pointer;
    const auto start = times ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
    struct Timed {
      std::vector<std::pair<const std::string*, uint64_t>>* times;
      const std::string* name;
      std::chrono::steady_clock::time_point start;
      ~Timed() {
        if (times) {
          times->emplace_back(name, uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                 std::chrono::steady_clock::now() - start).count()));
        }
      }
    } timed{times, &step.name, start};
    if (step.direct) {
      step.direct(step, get);
      if (!step.fixed_writes.empty()) check_fixed(step);
      continue;
    }
    if (step.collective) {
      run_collective(state, step);
      continue;
    }
    torch::jit::Stack stack = step.arguments;
    for (size_t position : step.tensor_lists) {
      c10::List<std::optional<at::Tensor>> optional_list;
      bool has_none = false;
      std::vector<at::Tensor> list;
      for (const auto& slot : step.tensors) {
        if (slot.position != position) continue;
        if (slot.value < 0) {
          has_none = true;
          list.emplace_back();
        } else {
          list.push_back(get(slot.value));
        }
      }
      if (has_none || step.op->schema().arguments()[position].real_type()->str().find("?") != std::string::npos) {
        for (const auto& t : list) optional_list.push_back(t.defined() ? std::optional<at::Tensor>(t) : std::nullopt);
        stack[position] = c10::IValue(optional_list);
      } else {
        stack[position] = c10::IValue(c10::List<at::Tensor>(list));
      }
    }
    for (const auto& slot : step.tensors) {
      if (slot.list_index < 0) stack[slot.position] = get(slot.value);
    }
    for (size_t position : step.generators) {
      if (stack[position].isNone()) {
        stack[position] = default_generator(device_);
      } else if (stack[position].isTensor()) {  // Note [Random ops replayed in compiled graphs]
        stack[position] = generator_from_state(device_, stack[position].toTensor());
      }
    }
    {
      std::optional<LendOutputs> lend;
      if (step.lend) {
        const at::Tensor& slot = get(step.outputs[0]);
        lend.emplace(std::vector<std::pair<void*, size_t>>{{slot.data_ptr(), size_t(slot.nbytes())}});
      }
      if (step.generators.empty() && !step.reads_generator) {
        step.op->redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &stack);
      } else {
        // A random op: the device's random kernels (kernels/Random.h) on the host views, drawing
        // from the device's generator, which the ops they call reach by its dispatch key.
        HostDrawScope host_draws(device_);
        step.op->redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), &stack);
      }
    }
    if (!step.fixed_writes.empty()) check_fixed(step);
    if (stack.size() == 1 && stack[0].isTensorList()) {  // one Tensor[] return (_foreach_*, split...)
      auto list = stack[0].toTensorList();
      stack.clear();
      for (const at::Tensor& t : list) stack.emplace_back(t);
    }
    for (const c10::IValue& result : stack) {
      if (result.isTensor()) {
        check_result(result.toTensor(), step.name, program_.name);
      } else if (result.isTensorList()) {
        for (const at::Tensor& t : result.toTensorList()) check_result(t, step.name, program_.name);
      }
    }
    for (size_t r = 0; r < step.outputs.size() && r < stack.size(); ++r) {
      const int id = step.outputs[r];
      if (id < 0 || !stack[r].isTensor()) continue;
      const at::Tensor& result = stack[r].toTensor();
      const ProgramValue::Kind kind = values[id].kind;
      if (kind == ProgramValue::Kind::kDynamic || (kind == ProgramValue::Kind::kView && per_call_[id])) {
        state.values[id] = result;
        continue;
      }
      const at::Tensor& slot = get(id);
      const bool in_place = result.const_data_ptr() == slot.const_data_ptr() && result.sizes() == slot.sizes() &&
                            result.strides() == slot.strides();
      if (!in_place) const_cast<at::Tensor&>(slot).copy_(result);
    }
  }
}


std::vector<at::Tensor> ProgramExecutor::run(const std::vector<at::Tensor>& inputs, bool within_graph) {
  TORCH_CHECK(inputs.size() == program_.inputs.size(), "compiled graph ", program_.name, " takes ",
              program_.inputs.size(), " inputs, got ", inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ProgramValue& value = program_.values[program_.inputs[i]];
    check_input(inputs[i], value.spec, i, program_.name, value.on_host ? -1 : device_);
  }
  // The caller released the GIL (Bindings.cpp): a thread waiting here for another call holds
  // nothing a running program may need (a Python kernel takes the GIL itself).
  std::lock_guard<std::mutex> lock(mutex_);
  calls_.fetch_add(1);
  auto& rt = runtime();
  auto& stream = current_stream(device_);
  // The arena is reused call after call: a call on another stream first waits for the
  // previous user of the arena (calls on one stream are ordered by the stream).
  if (arena_stream_ && arena_stream_ != &stream) {
    auto* previous = static_cast<const neuron_rt::Stream*>(arena_stream_);
    if (!previous->reached(arena_marker_)) synchronize_stream(const_cast<neuron_rt::Stream&>(*previous));
  }
  auto state = std::make_shared<RunState>();
  std::vector<at::Tensor> outputs;
  c10::DeviceGuard guard(c10::Device(kNeuron, device_));
  bind_call(*state, inputs, outputs);
  LaunchOperands described;
  described.cost = within_graph && cost_within_graph_ ? cost_within_graph_.get() : cost_.get();
  note_launch(LaunchPath::kProgram, program_.name.c_str(), device_, &stream, described);  // one launch per call
  if (rt.launch_blocking() || runs_inline_ ||
      (rt.shared_cores() && inline_bytes_limit() > 0 && stream.query() && !stream.failure())) {
    // Inline also in asynchronous mode when the program draws random numbers (draws happen in
    // program order with the host's, as eager random ops do), runs a non-ATen kernel (which
    // may need the GIL) or produces host values the caller reads at once; and on an idle
    // stream when the host's cores are shared (Note [Shared cores] in Launch.h) unless
    // NEURON_SIM_INLINE_BYTES=0 queues everything.
    if (!rt.launch_blocking()) synchronize_stream(stream);
    neuron_rt::GuardScope scope;
    scope.add(arena_.get());
    for (auto& constant : constants_) scope.add(constant.get());
    for (const at::Tensor& t : inputs) {
      if (!t.device().is_cpu()) scope.add(buffer_ref_of(t.storage()).get());
    }
    for (const at::Tensor& t : outputs) {
      if (!t.device().is_cpu()) scope.add(buffer_ref_of(t.storage()).get());
    }
    execute(*state);
  } else {
    // One task: it holds every buffer the program touches; its host views are fresh.
    std::vector<neuron_rt::BufferRef> buffers{arena_};
    for (auto& constant : constants_) buffers.push_back(constant);
    for (const at::Tensor& t : inputs) {
      if (!t.device().is_cpu()) buffers.push_back(buffer_ref_of(t.storage()));
    }
    for (const at::Tensor& t : outputs) {
      if (!t.device().is_cpu()) buffers.push_back(buffer_ref_of(t.storage()));
    }
    const c10::DeviceIndex device = device_;
    const int threads = kernel_threads_setting();
    NEURON_RT_CALL(stream.enqueue([self = shared_from_this(), state, buffers = std::move(buffers), device, &stream,
                                   threads]() mutable {
      use_kernel_threads(stream, threads);
      neuron_rt::GuardScope scope;
      for (auto& buffer : buffers) scope.add(buffer.get());
      try {
        self->execute(*state);
      } catch (const c10::Error& error) {
        throw std::runtime_error("compiled graph " + self->program_.name + ": " + error.what_without_backtrace());
      }
      state.reset();  // host views go before the buffers they borrow from
    }));
  }
  arena_stream_ = &stream;
  arena_marker_ = stream.marker();
  return outputs;
}

}  // namespace torch_neuron
