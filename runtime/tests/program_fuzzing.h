// Structure-aware fuzzing of the program loader (Note [Program loader checks]), shared by the
// deterministic mutation test (test_program_mutations.cpp, in `make test`) and the libFuzzer
// target (runtime/fuzz/program_fuzzer.cpp, `make fuzz`):
//  - seed_programs(): well-formed programs of every shape the compiler makes (views of
//    inputs, outputs and arena slots, other-dtype views, constants, host values made by
//    kernels, fused pointwise nodes, several results, no result);
//  - mutate_program(): one structural change (a value's kind, index, bytes, sizes, strides,
//    offset, dtype; a node's op, arguments, outputs; the input and output lists; constants;
//    the arena), so that the sealed result passes the checksum and reaches every check;
//  - first_breach(): a model of what the executor (csrc/compile/Executor.cpp) does with an
//    accepted program's memory: the arena and constants as buffers of exactly their size,
//    every input as a storage of the smallest size its spec allows at several offsets,
//    every output as empty_strided would make it, views rebased with rebase_view(), and the
//    fused pointwise interpreter's register reads. It returns what would be read or written
//    outside its memory ("" when nothing), and touches the first and last byte of every
//    tensor (every byte of small ones), so that AddressSanitizer sees any miss too.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "runtime/program.h"

namespace neuron_rt {
namespace fuzzing {

inline ProgramArg value_arg(int64_t id) {
  ProgramArg arg;
  arg.kind = ProgramArg::Kind::kValue;
  arg.integer = id;
  return arg;
}
inline ProgramArg int_arg(ProgramArg::Kind kind, int64_t v) {
  ProgramArg arg;
  arg.kind = kind;
  arg.integer = v;
  return arg;
}
inline ProgramArg list_arg(ProgramArg::Kind kind, std::vector<int64_t> list) {
  ProgramArg arg;
  arg.kind = kind;
  arg.list = std::move(list);
  return arg;
}
inline ProgramArg double_arg(double v) {
  ProgramArg arg;
  arg.kind = ProgramArg::Kind::kDouble;
  arg.real = v;
  return arg;
}
inline ProgramValue make_value(ProgramValue::Kind kind, int64_t index, uint64_t bytes, TensorSpec spec,
                               bool on_host = false) {
  ProgramValue value;
  value.kind = kind;
  value.index = index;
  value.bytes = bytes;
  value.spec = std::move(spec);
  value.on_host = on_host;
  return value;
}
inline ProgramNode make_node(std::string op, std::vector<ProgramArg> args, std::vector<int32_t> outputs) {
  ProgramNode node;
  node.op = std::move(op);
  node.args = std::move(args);
  node.outputs = std::move(outputs);
  return node;
}

constexpr int32_t kFloat = 6, kBFloat16 = 15, kUInt8 = 0, kInt64 = 4, kBool = 11;

// Well-formed programs, one per shape the compiler makes.
inline std::vector<ProgramDesc> seed_programs() {
  using K = ProgramValue::Kind;
  using A = ProgramArg::Kind;
  std::vector<ProgramDesc> seeds;
  {  // input + constant -> arena, a transposed view of it, summed into an output
    ProgramDesc p;
    p.name = "add_sum";
    const TensorSpec spec{kFloat, {2, 3}, {3, 1}, 0};
    p.values = {make_value(K::kInput, 0, 24, spec), make_value(K::kConstant, 0, 24, spec),
                make_value(K::kArena, 64, 64, spec), make_value(K::kView, 2, 0, TensorSpec{kFloat, {3, 2}, {1, 3}, 0}),
                make_value(K::kOutput, 0, 12, TensorSpec{kFloat, {2}, {1}, 0})};
    p.inputs = {0};
    p.constants = {std::string(24, '\x01')};
    p.nodes = {make_node("aten::add.Tensor", {value_arg(0), value_arg(1), double_arg(1.0)}, {2}),
               make_node("aten::sum.dim_IntList",
                         {value_arg(3), list_arg(A::kIntList, {0}), int_arg(A::kBool, 0), ProgramArg()}, {4})};
    p.outputs = {4};
    p.arena_bytes = 128;
    p.metadata["model_name"] = "seed";
    seeds.push_back(p);
  }
  {  // views of an input (a row slice, another dtype) and of an output (a transpose), returned
    ProgramDesc p;
    p.name = "views";
    p.values = {make_value(K::kInput, 0, 64, TensorSpec{kFloat, {4, 4}, {4, 1}, 0}),
                make_value(K::kView, 0, 0, TensorSpec{kFloat, {3, 4}, {4, 1}, 4}),
                make_value(K::kView, 0, 0, TensorSpec{kUInt8, {64}, {1}, 0}),
                make_value(K::kOutput, 0, 48, TensorSpec{kFloat, {3, 4}, {4, 1}, 0}),
                make_value(K::kView, 3, 0, TensorSpec{kFloat, {4, 3}, {1, 4}, 0}),
                make_value(K::kView, 1, 0, TensorSpec{kFloat, {4}, {1}, 8})};
    p.inputs = {0};
    p.nodes = {make_node("aten::neg", {value_arg(1)}, {3}),
               make_node("aten::bitwise_not", {value_arg(2)}, {-1})};
    p.outputs = {4, 5, 0};
    seeds.push_back(p);
  }
  {  // a host value a kernel makes (kDynamic), a node's view of it, a copy back to the device
    ProgramDesc p;
    p.name = "host";
    p.values = {make_value(K::kInput, 0, 32, TensorSpec{kInt64, {4}, {1}, 0}),
                make_value(K::kDynamic, 0, 32, TensorSpec{kInt64, {4}, {1}, 0}, true),
                make_value(K::kView, 1, 0, TensorSpec{kInt64, {2, 2}, {2, 1}, 0}, true),
                make_value(K::kOutput, 0, 32, TensorSpec{kInt64, {2, 2}, {2, 1}, 0})};
    p.inputs = {0};
    p.nodes = {make_node("aten::_to_copy", {value_arg(0), ProgramArg(), ProgramArg(), int_arg(A::kDevice, 0),
                                            ProgramArg(), int_arg(A::kBool, 0), ProgramArg()}, {1}),
               make_node("aten::view", {value_arg(1), list_arg(A::kIntList, {2, 2})}, {2}),
               make_node("aten::clone", {value_arg(2), ProgramArg()}, {3})};
    p.outputs = {3};
    seeds.push_back(p);
  }
  {  // a fused pointwise group: where(c, a * b + 1, -a) in bfloat16, and an assert (no result)
    ProgramDesc p;
    p.name = "pointwise";
    const TensorSpec spec{kBFloat16, {8}, {1}, 0};
    p.values = {make_value(K::kInput, 0, 16, spec), make_value(K::kInput, 1, 16, spec),
                make_value(K::kInput, 2, 8, TensorSpec{kBool, {8}, {1}, 0}), make_value(K::kOutput, 0, 16, spec),
                make_value(K::kArena, 0, 64, TensorSpec{kBool, {}, {}, 0})};
    p.inputs = {0, 1, 2};
    ProgramArg code = list_arg(A::kIntList, {2, 0, 1, -1, kBFloat16,   // r3 = a * b
                                             0, 3, -1, -1, kBFloat16,  // r4 = r3 + 1
                                             3, 0, -1, -1, kBFloat16,  // r5 = -a
                                             7, 2, 4, 5, kBFloat16});  // r6 = c ? r4 : r5
    ProgramArg scalars;
    scalars.kind = A::kDoubleList;
    scalars.reals = {0, 1, 0, 0};
    p.nodes = {make_node("neuron::pointwise", {list_arg(A::kValueList, {0, 1, 2}), code, scalars}, {3}),
               make_node("aten::any", {value_arg(2)}, {4}),
               make_node("aten::_assert_async.msg", {value_arg(4), [] {
                                                      ProgramArg text;
                                                      text.kind = A::kString;
                                                      text.text = "no true element";
                                                      return text;
                                                    }()},
                         {})};
    p.outputs = {3};
    p.arena_bytes = 64;
    seeds.push_back(p);
  }
  {  // several results (max.dim), a list argument (cat), dtype and layout arguments
    ProgramDesc p;
    p.name = "several";
    p.values = {make_value(K::kInput, 0, 48, TensorSpec{kFloat, {3, 4}, {4, 1}, 0}),
                make_value(K::kArena, 0, 16, TensorSpec{kFloat, {3}, {1}, 0}),
                make_value(K::kArena, 16, 32, TensorSpec{kInt64, {3}, {1}, 0}),
                make_value(K::kOutput, 0, 24, TensorSpec{kFloat, {6}, {1}, 0}),
                make_value(K::kOutput, 0, 24, TensorSpec{kFloat, {3}, {1}, 0})};
    p.inputs = {0};
    p.nodes = {make_node("aten::max.dim", {value_arg(0), int_arg(A::kInt, 1), int_arg(A::kBool, 0)}, {1, 2}),
               make_node("aten::cat", {list_arg(A::kValueList, {1, 1}), int_arg(A::kInt, 0)}, {3}),
               make_node("aten::_to_copy", {value_arg(2), int_arg(A::kScalarType, kFloat), int_arg(A::kLayout, 0),
                                            int_arg(A::kDevice, 0), ProgramArg(), int_arg(A::kBool, 0),
                                            int_arg(A::kMemoryFormat, 1)}, {4})};
    p.outputs = {3, 4};
    p.arena_bytes = 48;
    seeds.push_back(p);
  }
  return seeds;
}

// ---- mutations ------------------------------------------------------------------------------

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : random_(seed) {}

  // One structural change (a few in a row, sometimes).
  void mutate(ProgramDesc& p) {
    const int changes = 1 + int(below(8) == 0 ? below(4) : 0);
    for (int c = 0; c < changes; ++c) mutate_once(p);
  }

  uint64_t below(uint64_t n) { return n ? random_() % n : 0; }

 private:
  // An integer near the edges of what `limit` allows: -1, 0, limit-1, limit, limit+1, huge, random.
  // (Arithmetic wraps, as the file's bytes would.)
  int64_t edge(int64_t current, int64_t limit) {
    const uint64_t c = uint64_t(current), l = uint64_t(limit);
    switch (below(10)) {
      case 0: return -1;
      case 1: return 0;
      case 2: return int64_t(l - 1);
      case 3: return limit;
      case 4: return int64_t(l + 1);
      case 5: return int64_t(c + 1);
      case 6: return int64_t(c - 1);
      case 7: return int64_t(1) << below(63);
      case 8: return int64_t(c * 2 + 1);
      default: return int64_t(below(uint64_t(std::max<int64_t>(limit, 1)) + 2));
    }
  }

  void mutate_spec(TensorSpec& spec) {
    switch (below(8)) {
      case 0: spec.dtype = int32_t(below(4) == 0 ? edge(spec.dtype, 46) : int64_t(below(46))); break;
      case 1:
        if (!spec.sizes.empty()) {
          auto& s = spec.sizes[below(spec.sizes.size())];
          s = edge(s, s + 1);
        }
        break;
      case 2:
        if (!spec.strides.empty()) {
          auto& s = spec.strides[below(spec.strides.size())];
          s = below(3) == 0 ? 0 : edge(s, s + 1);
        }
        break;
      case 3: spec.offset = edge(spec.offset, spec.offset + 4); break;
      case 4:  // one dim more (size and stride), or one less
        if (below(2) && !spec.sizes.empty() && !spec.strides.empty()) {
          spec.sizes.pop_back();
          spec.strides.pop_back();
        } else {
          spec.sizes.push_back(int64_t(1 + below(4)));
          spec.strides.push_back(int64_t(below(64)));
        }
        break;
      case 5:  // sizes and strides disagree in count
        if (below(2)) spec.sizes.push_back(2); else spec.strides.push_back(1);
        break;
      case 6:  // contiguous strides for new sizes
        for (auto& s : spec.sizes) s = int64_t(below(5));
        spec.strides.resize(spec.sizes.size());
        {
          int64_t stride = 1;
          for (size_t d = spec.sizes.size(); d-- > 0;) {
            spec.strides[d] = stride;
            stride *= std::max<int64_t>(spec.sizes[d], 1);
          }
        }
        break;
      default:  // every stride zero (a broadcast), or a huge one
        for (auto& s : spec.strides) s = below(2) ? 0 : (int64_t(1) << (40 + below(20)));
        break;
    }
  }

  void mutate_value(ProgramDesc& p) {
    if (p.values.empty()) return;
    const int64_t count = int64_t(p.values.size());
    ProgramValue& value = p.values[below(p.values.size())];
    switch (below(6)) {
      case 0: value.kind = ProgramValue::Kind(below(7)); break;  // 6: not a kind
      case 1: {
        int64_t limit = count;
        if (value.kind == ProgramValue::Kind::kInput) limit = int64_t(p.inputs.size());
        if (value.kind == ProgramValue::Kind::kConstant) limit = int64_t(p.constants.size());
        if (value.kind == ProgramValue::Kind::kArena) limit = int64_t(p.arena_bytes);
        value.index = edge(value.index, limit);
        break;
      }
      case 2: value.bytes = uint64_t(edge(int64_t(value.bytes), int64_t(p.arena_bytes))); break;
      case 3: value.on_host = !value.on_host; break;
      default: mutate_spec(value.spec); break;
    }
  }

  void add_value(ProgramDesc& p) {
    ProgramValue value;
    const int64_t count = int64_t(p.values.size());
    value.kind = below(3) ? ProgramValue::Kind::kView : ProgramValue::Kind(below(6));
    value.index = count ? int64_t(below(uint64_t(count))) : 0;
    value.spec = count ? p.values[below(uint64_t(count))].spec : TensorSpec{kFloat, {4}, {1}, 0};
    mutate_spec(value.spec);
    value.bytes = tensor_extent_bytes(value.spec);
    p.values.push_back(value);
    if (!p.nodes.empty() && below(2)) p.nodes[below(p.nodes.size())].outputs.push_back(int32_t(count));
    if (below(3) == 0) p.outputs.push_back(int32_t(count));
  }

  void mutate_arg(ProgramDesc& p, ProgramArg& arg) {
    const int64_t count = int64_t(p.values.size());
    switch (below(6)) {
      case 0: arg.kind = ProgramArg::Kind(below(14)); break;
      case 1: arg.integer = edge(arg.integer, count); break;
      case 2:
        if (!arg.list.empty()) {
          auto& v = arg.list[below(arg.list.size())];
          v = edge(v, count);
        } else {
          arg.list.push_back(edge(0, count));
        }
        break;
      case 3: arg.list.clear(); break;
      case 4: arg.kind = ProgramArg::Kind::kValue; arg.integer = int64_t(below(uint64_t(count) + 1)); break;
      default: arg.integer = int64_t(below(3)) - 1; break;
    }
  }

  void mutate_node(ProgramDesc& p) {
    static const char* const kOps[] = {"aten::add.Tensor", "aten::mm", "neuron::pointwise", "aten::_to_copy",
                                       "aten::view", "aten::_assert_async.msg", "aten::max.dim", "aten::cat",
                                       "aten::", "::view", "aten::add.", "aten::a.b.c", "aten::view/../x", "",
                                       "prims::convert_element_type"};
    if (p.nodes.empty()) {
      p.nodes.push_back(make_node(kOps[below(sizeof(kOps) / sizeof(kOps[0]))], {value_arg(0)}, {}));
      return;
    }
    ProgramNode& node = p.nodes[below(p.nodes.size())];
    const int64_t count = int64_t(p.values.size());
    switch (below(8)) {
      case 0: node.op = kOps[below(sizeof(kOps) / sizeof(kOps[0]))]; break;
      case 1:
        if (!node.args.empty()) mutate_arg(p, node.args[below(node.args.size())]);
        break;
      case 2:
        if (!node.outputs.empty()) {
          auto& o = node.outputs[below(node.outputs.size())];
          o = int32_t(edge(o, count));
        } else {
          node.outputs.push_back(int32_t(below(uint64_t(count) + 1)));
        }
        break;
      case 3:
        if (!node.outputs.empty() && below(2)) node.outputs.pop_back(); else node.outputs.push_back(-1);
        break;
      case 4:  // the pointwise code
        if (node.args.size() > 1 && !node.args[1].list.empty()) {
          auto& field = node.args[1].list[below(node.args[1].list.size())];
          field = below(2) ? int64_t(below(10)) - 1 : edge(field, 64);
        }
        break;
      case 5: std::swap(p.nodes[below(p.nodes.size())], p.nodes[below(p.nodes.size())]); break;
      case 6: p.nodes.erase(p.nodes.begin() + below(p.nodes.size())); break;
      default:
        if (below(2)) node.args.push_back(value_arg(int64_t(below(uint64_t(count) + 1))));
        else if (!node.args.empty()) node.args.pop_back();
        break;
    }
  }

  void mutate_once(ProgramDesc& p) {
    const int64_t count = int64_t(p.values.size());
    switch (below(12)) {
      case 0: case 1: case 2: mutate_value(p); break;
      case 3: add_value(p); break;
      case 4: case 5: mutate_node(p); break;
      case 6:  // the input list
        if (!p.inputs.empty() && below(2)) {
          auto& id = p.inputs[below(p.inputs.size())];
          id = int32_t(edge(id, count));
        } else if (below(2)) {
          p.inputs.push_back(int32_t(below(uint64_t(count) + 1)));
        } else if (p.inputs.size() > 1) {
          std::swap(p.inputs[0], p.inputs[p.inputs.size() - 1]);
        }
        break;
      case 7:  // the output list
        if (!p.outputs.empty() && below(2)) {
          auto& id = p.outputs[below(p.outputs.size())];
          id = int32_t(edge(id, count));
        } else {
          p.outputs.push_back(int32_t(below(uint64_t(count) + 1)));
        }
        break;
      case 8:  // constants
        if (!p.constants.empty() && below(2)) {
          auto& c = p.constants[below(p.constants.size())];
          c.resize(below(2) ? c.size() / 2 : c.size() + 1 + below(64), '\x02');
        } else if (below(2)) {
          p.constants.emplace_back(size_t(below(64)), '\x03');
        } else if (!p.constants.empty()) {
          p.constants.pop_back();
        }
        break;
      case 9: p.arena_bytes = uint64_t(edge(int64_t(p.arena_bytes), int64_t(p.arena_bytes))); break;
      case 10:
        if (!p.values.empty()) p.values.pop_back();
        break;
      default:  // a value changes places with another (ids no longer match their uses)
        if (count > 1) std::swap(p.values[below(uint64_t(count))], p.values[below(uint64_t(count))]);
        break;
    }
  }

  std::mt19937_64 random_;
};

// ---- the executor's memory, modelled -------------------------------------------------------------

// Bytes of `spec`'s elements relative to the start of its storage: [first, end).
struct Span {
  uint64_t first = 0, end = 0;
  bool empty = true;
};
inline Span span_of(const TensorSpec& spec) {
  Span span;
  const uint64_t end = tensor_extent_bytes(spec);
  if (end == 0) return span;
  span.empty = false;
  span.first = uint64_t(spec.offset) * program_element_size(spec.dtype);
  span.end = end;
  return span;
}

// Touches the bytes of `spec` over `storage` (every element's first and last byte when there
// are at most `budget` elements, else the two extreme elements): AddressSanitizer reports a
// byte outside the allocation.
inline void touch(const unsigned char* storage, const TensorSpec& spec, size_t budget = 4096) {
  const size_t element = program_element_size(spec.dtype);
  volatile unsigned char sink = 0;
  const Span span = span_of(spec);
  if (span.empty) return;
  sink = sink + storage[span.first] + storage[span.end - 1];
  uint64_t elements = 1;
  for (int64_t s : spec.sizes) elements *= uint64_t(s);
  if (elements > budget) return;
  std::vector<int64_t> index(spec.sizes.size(), 0);
  for (uint64_t e = 0; e < elements; ++e) {
    uint64_t at = uint64_t(spec.offset);
    for (size_t d = 0; d < index.size(); ++d) at += uint64_t(index[d]) * uint64_t(spec.strides[d]);
    sink = sink + storage[at * element] + storage[at * element + element - 1];
    for (size_t d = index.size(); d-- > 0;) {
      if (++index[d] < spec.sizes[d]) break;
      index[d] = 0;
    }
  }
  (void)sink;
}

// What the executor would reach outside a program's memory ("" when nothing). `program` was
// accepted by decode_program. Memory is allocated only up to `max_bytes` per buffer; larger
// buffers are checked by arithmetic alone.
inline std::string first_breach(const ProgramDesc& program, uint64_t max_bytes = uint64_t(1) << 20) {
  using K = ProgramValue::Kind;
  const size_t count = program.values.size();
  auto fits = [](const Span& span, uint64_t bytes) { return span.empty || span.end <= bytes; };
  auto id_ok = [&](int64_t id) { return id >= 0 && size_t(id) < count; };
  // Indices the executor follows without checking.
  for (size_t k = 0; k < program.inputs.size(); ++k) {
    if (!id_ok(program.inputs[k])) return "input " + std::to_string(k) + " names no value";
  }
  for (int32_t id : program.outputs) {
    if (!id_ok(id)) return "an output names no value";
  }
  std::vector<int64_t> root(count);
  for (size_t i = 0; i < count; ++i) {
    const ProgramValue& value = program.values[i];
    root[i] = int64_t(i);
    if (value.kind == K::kView) {
      if (value.index < 0 || size_t(value.index) >= i) return "value " + std::to_string(i) + ": a view of a later value";
      root[i] = root[value.index];
    }
    if (value.kind == K::kInput && (value.index < 0 || size_t(value.index) >= program.inputs.size())) {
      return "value " + std::to_string(i) + " is an input the call does not have";
    }
    if (value.kind == K::kConstant && (value.index < 0 || size_t(value.index) >= program.constants.size())) {
      return "value " + std::to_string(i) + " is a constant the program does not have";
    }
    if (program_element_size(value.spec.dtype) == 0) return "value " + std::to_string(i) + " has no element size";
  }
  // Fixed memory: the arena and constants, each an allocation of exactly its size.
  std::unique_ptr<unsigned char[]> arena;
  if (program.arena_bytes <= max_bytes) arena.reset(new unsigned char[std::max<uint64_t>(program.arena_bytes, 1)]());
  for (size_t i = 0; i < count; ++i) {
    const ProgramValue& value = program.values[i];
    const ProgramValue& base = program.values[root[i]];
    const Span span = span_of(value.spec);
    if (base.kind == K::kArena) {
      if (base.index < 0 || uint64_t(base.index) + base.bytes > program.arena_bytes ||
          uint64_t(base.index) + base.bytes < base.bytes) {
        return "value " + std::to_string(root[i]) + ": its slot is outside the arena";
      }
      if (!fits(span, base.bytes)) return "value " + std::to_string(i) + " reaches past its arena slot";
      if (arena && base.bytes <= max_bytes) {
        std::unique_ptr<unsigned char[]> slot(new unsigned char[std::max<uint64_t>(base.bytes, 1)]());
        touch(slot.get(), value.spec);  // the slot alone: a tensor may not reach its neighbours either
        touch(arena.get() + base.index, value.spec);
      }
    } else if (base.kind == K::kConstant) {
      const std::string& bytes = program.constants[base.index];
      if (!fits(span, bytes.size())) return "value " + std::to_string(i) + " reaches past its constant";
      if (bytes.size() <= max_bytes) {
        std::unique_ptr<unsigned char[]> copy(new unsigned char[std::max<size_t>(bytes.size(), 1)]());
        touch(copy.get(), value.spec);
      }
    }
  }
  // Per-call memory: inputs at a few storage offsets, outputs as empty_strided makes them,
  // views rebased as the executor rebases them.
  for (int placement = 0; placement < 4; ++placement) {
    for (size_t i = 0; i < count; ++i) {
      const ProgramValue& value = program.values[i];
      const ProgramValue& base = program.values[root[i]];
      if (base.kind != K::kInput && base.kind != K::kOutput) continue;
      // An input may start anywhere in a storage that holds its elements; an output starts at 0.
      TensorSpec root_now = base.spec;
      const int64_t input_offsets[] = {0, base.spec.offset, base.spec.offset + 1, base.spec.offset + 7};
      root_now.offset = base.kind == K::kOutput ? 0 : input_offsets[placement];
      const uint64_t storage = tensor_extent_bytes(root_now);
      TensorSpec spec = value.spec;
      if (value.kind == K::kView) {
        try {
          spec = rebase_view(value.spec, base.spec, root_now.offset, storage);
        } catch (const Error&) {
          continue;  // the executor raises: nothing is reached
        }
      } else {
        spec = root_now;
      }
      if (!fits(span_of(spec), storage)) return "value " + std::to_string(i) + " reaches past its call's storage";
      if (storage <= max_bytes) {
        std::unique_ptr<unsigned char[]> memory(new unsigned char[std::max<uint64_t>(storage, 1)]());
        touch(memory.get(), spec);
      }
    }
  }
  // A per-call output lives as long as the caller holds it: only returned ones do.
  std::vector<bool> returned(count, false);
  for (int32_t id : program.outputs) returned[root[id]] = true;
  for (size_t i = 0; i < count; ++i) {
    if (program.values[i].kind == K::kOutput && !returned[i]) {
      return "value " + std::to_string(i) + " is an output buffer nobody returns: freed before its kernel writes it";
    }
  }
  // Nodes: every value they name exists; memory a kernel allocates is read after it is made;
  // the pointwise interpreter reads only registers it has.
  std::vector<bool> made(count, false);
  for (size_t n = 0; n < program.nodes.size(); ++n) {
    const ProgramNode& node = program.nodes[n];
    auto read = [&](int64_t id) -> std::string {
      if (!id_ok(id)) return "node " + std::to_string(n) + " reads no value (" + std::to_string(id) + ")";
      if (program.values[root[id]].kind == K::kDynamic && !made[id]) {
        return "node " + std::to_string(n) + " reads value " + std::to_string(id) + " before it exists";
      }
      return "";
    };
    for (const ProgramArg& arg : node.args) {
      if (arg.kind == ProgramArg::Kind::kValue) {
        const std::string why = read(arg.integer);
        if (!why.empty()) return why;
      }
      if (arg.kind == ProgramArg::Kind::kValueList) {
        for (int64_t id : arg.list) {
          if (id == -1) continue;
          const std::string why = read(id);
          if (!why.empty()) return why;
        }
      }
    }
    if (node.op == "neuron::pointwise") {
      if (node.args.size() != 3 || node.outputs.size() != 1 || !id_ok(node.outputs[0])) return "a malformed pointwise node";
      const auto& code = node.args[1].list;
      const int64_t inputs = int64_t(node.args[0].list.size());
      if (code.empty() || code.size() % kPointwiseFields != 0 || node.args[2].reals.size() != code.size() / kPointwiseFields) {
        return "pointwise code and scalars disagree";
      }
      float registers[kPointwiseMaxRegisters] = {};
      const size_t instructions = code.size() / kPointwiseFields;
      if (inputs + int64_t(instructions) > kPointwiseMaxRegisters) return "pointwise code needs more registers than there are";
      for (size_t k = 0; k < instructions; ++k) {
        const int64_t* f = &code[k * kPointwiseFields];
        const float* operand[3] = {};
        for (int o = 0; o < 3; ++o) {
          if (f[o + 1] >= inputs + int64_t(k)) return "pointwise code reads a register not yet written";
          operand[o] = f[o + 1] >= 0 ? &registers[f[o + 1]] : nullptr;
        }
        const auto opcode = PointwiseOpcode(f[0]);
        const bool unary_or_where = opcode == PointwiseOpcode::kNeg || opcode == PointwiseOpcode::kRsqrt ||
                                    opcode == PointwiseOpcode::kSquare || opcode == PointwiseOpcode::kConvert ||
                                    opcode == PointwiseOpcode::kWhere;
        if (f[0] < 0 || f[0] > int64_t(PointwiseOpcode::kWhere)) return "pointwise code has an opcode the kernel does not know";
        if (unary_or_where && operand[0] == nullptr) return "pointwise code makes the kernel read a null operand";
        registers[inputs + int64_t(k)] = operand[0] ? *operand[0] : 0.f;
      }
    }
    for (int32_t id : node.outputs) {
      if (id == -1) continue;
      if (!id_ok(id)) return "node " + std::to_string(n) + " writes no value (" + std::to_string(id) + ")";
      made[id] = true;
    }
  }
  return "";
}

}  // namespace fuzzing
}  // namespace neuron_rt
