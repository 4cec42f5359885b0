#include "program.h"

#include <cstdint>
#include <cstring>

#include "error.h"

namespace neuron_rt {

namespace {

constexpr char kMagic[] = "NEURONSIMPROG";
constexpr size_t kMagicLength = sizeof(kMagic) - 1;
constexpr size_t kMaxDims = 64;

// c10::ScalarType codes -> element bytes; 0 for codes a program may not hold: unknown ones
// and the quantized ones (QInt8 12, QUInt8 13, QInt32 14, QUInt4x2 16, QUInt2x4 17).
size_t element_size(int64_t dtype) {
  static const uint8_t sizes[] = {
      1, 1, 2, 4, 8, 2, 4, 8, 4, 8, 16, 1, 0, 0, 0, 2,   // Byte .. BFloat16 (0-15)
      0, 0, 1, 1, 1, 1, 2, 1, 1, 1, 1, 2, 4, 8,         // QUInt4x2 .. UInt64 (16-29)
      1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};  // UInt1-7, Int1-7, Float8_e8m0fnu, Float4 (30-45)
  return dtype >= 0 && uint64_t(dtype) < sizeof(sizes) ? sizes[dtype] : 0;
}

// Tensors larger than this (elements, or elements spanned) are refused: sizes, strides and
// offsets then fit int64 arithmetic everywhere, in bytes too.
constexpr unsigned __int128 kMaxElements = (unsigned __int128)1 << 62;
constexpr uint64_t kArenaAlignment = 16;  // the largest element (complex128)

[[noreturn]] void corrupt(const std::string& what) {
  throw Error(ErrorCode::kCorruptProgram, "corrupt program: " + what);
}

class Writer {
 public:
  void u8(uint8_t v) { out_.push_back(char(v)); }
  void u32(uint32_t v) { raw(&v, sizeof(v)); }
  void u64(uint64_t v) { raw(&v, sizeof(v)); }
  void i64(int64_t v) { raw(&v, sizeof(v)); }
  void f64(double v) { raw(&v, sizeof(v)); }
  void text(const std::string& s) {
    u64(s.size());
    out_.append(s);
  }
  void i64s(const std::vector<int64_t>& v) {
    u64(v.size());
    if (!v.empty()) raw(v.data(), v.size() * sizeof(int64_t));
  }
  void i32s(const std::vector<int32_t>& v) {
    u64(v.size());
    if (!v.empty()) raw(v.data(), v.size() * sizeof(int32_t));
  }
  void f64s(const std::vector<double>& v) {
    u64(v.size());
    if (!v.empty()) raw(v.data(), v.size() * sizeof(double));
  }
  std::string take() { return std::move(out_); }

 private:
  void raw(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  std::string out_;
};

class Reader {
 public:
  Reader(const std::string& in, size_t begin, size_t end) : in_(in), pos_(begin), end_(end) {}
  uint8_t u8() {
    need(1, "a byte");
    return uint8_t(in_[pos_++]);
  }
  uint32_t u32() { return raw<uint32_t>("a 32-bit field"); }
  uint64_t u64() { return raw<uint64_t>("a 64-bit field"); }
  int64_t i64() { return raw<int64_t>("an integer"); }
  double f64() { return raw<double>("a number"); }
  std::string text(const char* what) {
    const uint64_t n = u64();
    need(n, what);
    std::string s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  template <typename T>
  std::vector<T> array(const char* what) {
    const uint64_t n = u64();
    if (n > (end_ - pos_) / sizeof(T)) corrupt(std::string(what) + " runs past the end");
    std::vector<T> v(n);
    if (n) std::memcpy(v.data(), in_.data() + pos_, n * sizeof(T));
    pos_ += n * sizeof(T);
    return v;
  }
  // A count of items each at least `item_bytes` long: bounded by what is left.
  uint64_t count(const char* what, size_t item_bytes) {
    const uint64_t n = u64();
    if (n > (end_ - pos_) / item_bytes) corrupt(std::string("the count of ") + what + " is larger than the file");
    return n;
  }
  bool done() const { return pos_ == end_; }
  size_t position() const { return pos_; }

 private:
  void need(uint64_t n, const char* what) {
    if (n > end_ - pos_) corrupt(std::string("truncated while reading ") + what);
  }
  template <typename T>
  T raw(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  const std::string& in_;
  size_t pos_;
  const size_t end_;
};

void write_spec(Writer& w, const TensorSpec& spec) {
  w.u32(uint32_t(spec.dtype));
  w.i64s(spec.sizes);
  w.i64s(spec.strides);
  w.i64(spec.offset);
}

TensorSpec read_spec(Reader& r) {
  TensorSpec spec;
  spec.dtype = int32_t(r.u32());
  spec.sizes = r.array<int64_t>("sizes");
  spec.strides = r.array<int64_t>("strides");
  spec.offset = r.i64();
  return spec;  // check_program checks it
}

// Bytes of memory a tensor laid out by `spec` reaches (from its storage's start), saturated.
uint64_t spec_bytes(const TensorSpec& spec) {
  unsigned __int128 last = uint64_t(spec.offset < 0 ? 0 : spec.offset);
  for (size_t d = 0; d < spec.sizes.size() && d < spec.strides.size(); ++d) {
    if (spec.sizes[d] <= 0) return 0;
    last += (unsigned __int128)(spec.sizes[d] - 1) * uint64_t(spec.strides[d] < 0 ? 0 : spec.strides[d]);
    if (last > kMaxElements) return UINT64_MAX;
  }
  const unsigned __int128 bytes = (last + 1) * element_size(spec.dtype);
  return bytes > UINT64_MAX ? UINT64_MAX : uint64_t(bytes);
}

// Byte of the storage where a tensor laid out by `spec` starts.
uint64_t spec_start(const TensorSpec& spec) { return uint64_t(spec.offset) * element_size(spec.dtype); }

void write_arg(Writer& w, const ProgramArg& arg) {
  w.u8(uint8_t(arg.kind));
  w.i64(arg.integer);
  w.f64(arg.real);
  w.i64s(arg.list);
  w.f64s(arg.reals);
  w.text(arg.text);
}

ProgramArg read_arg(Reader& r) {
  ProgramArg arg;
  const uint8_t kind = r.u8();
  if (kind > uint8_t(ProgramArg::Kind::kMemoryFormat)) corrupt("unknown argument kind " + std::to_string(kind));
  arg.kind = ProgramArg::Kind(kind);
  arg.integer = r.i64();
  arg.real = r.f64();
  arg.list = r.array<int64_t>("an integer list");
  arg.reals = r.array<double>("a number list");
  arg.text = r.text("a string argument");
  return arg;
}

}  // namespace

std::string encode_program(const ProgramDesc& program) {
  Writer w;
  w.text(program.name);
  w.u64(program.values.size());
  for (const ProgramValue& value : program.values) {
    w.u8(uint8_t(value.kind));
    w.i64(value.index);
    w.u64(value.bytes);
    w.u8(value.on_host ? 1 : 0);
    write_spec(w, value.spec);
  }
  w.i32s(program.inputs);
  w.u64(program.constants.size());
  for (const std::string& constant : program.constants) w.text(constant);
  w.u64(program.nodes.size());
  for (const ProgramNode& node : program.nodes) {
    w.text(node.op);
    w.u64(node.args.size());
    for (const ProgramArg& arg : node.args) write_arg(w, arg);
    w.i32s(node.outputs);
  }
  w.i32s(program.outputs);
  w.u64(program.arena_bytes);
  w.u64(program.metadata.size());
  for (const auto& [k, v] : program.metadata) {
    w.text(k);
    w.text(v);
  }
  return w.take();
}

ProgramDesc parse_program_unchecked(const std::string& payload) {
  Reader r(payload, 0, payload.size());
  ProgramDesc program;
  program.name = r.text("the program's name");
  const uint64_t value_count = r.count("values", 1 + 8 + 8 + 1 + 4 + 8 + 8 + 8);
  program.values.resize(value_count);
  for (uint64_t i = 0; i < value_count; ++i) {
    ProgramValue& value = program.values[i];
    const uint8_t kind = r.u8();
    if (kind > uint8_t(ProgramValue::Kind::kDynamic)) corrupt("unknown value kind " + std::to_string(kind));
    value.kind = ProgramValue::Kind(kind);
    value.index = r.i64();
    value.bytes = r.u64();
    const uint8_t on_host = r.u8();
    if (on_host > 1) corrupt("a bad placement flag");
    value.on_host = on_host == 1;
    value.spec = read_spec(r);
  }
  program.inputs = r.array<int32_t>("the inputs");
  const uint64_t constant_count = r.count("constants", 8);
  program.constants.resize(constant_count);
  for (uint64_t i = 0; i < constant_count; ++i) program.constants[i] = r.text("a constant");
  const uint64_t node_count = r.count("nodes", 8 + 8 + 8);
  program.nodes.resize(node_count);
  for (uint64_t i = 0; i < node_count; ++i) {
    ProgramNode& node = program.nodes[i];
    node.op = r.text("an op name");
    const uint64_t arg_count = r.count("arguments", 1 + 8 + 8 + 8 + 8 + 8);
    node.args.resize(arg_count);
    for (uint64_t a = 0; a < arg_count; ++a) node.args[a] = read_arg(r);
    node.outputs = r.array<int32_t>("a node's outputs");
  }
  program.outputs = r.array<int32_t>("the outputs");
  program.arena_bytes = r.u64();
  const uint64_t metadata_count = r.count("metadata entries", 16);
  for (uint64_t i = 0; i < metadata_count; ++i) {
    std::string key = r.text("a metadata key");
    program.metadata[key] = r.text("a metadata value");
  }
  if (!r.done()) corrupt("bytes after the end of the program");
  return program;
}

ProgramDesc decode_program(const std::string& payload) {
  ProgramDesc program = parse_program_unchecked(payload);
  check_program(program);
  return program;
}

namespace {

std::string value_name(int64_t id) { return "value " + std::to_string(id); }

void check_spec(const TensorSpec& spec, const std::string& where) {
  if (element_size(spec.dtype) == 0) {
    corrupt(where + " has dtype code " + std::to_string(spec.dtype) + ", not one a program may hold");
  }
  if (spec.sizes.size() != spec.strides.size() || spec.sizes.size() > kMaxDims) {
    corrupt(where + " has " + std::to_string(spec.sizes.size()) + " sizes and " + std::to_string(spec.strides.size()) +
            " strides (at most " + std::to_string(kMaxDims) + " dims)");
  }
  if (spec.offset < 0) corrupt(where + " has a negative storage offset");
  unsigned __int128 elements = 1, last = uint64_t(spec.offset);
  for (size_t d = 0; d < spec.sizes.size(); ++d) {
    if (spec.sizes[d] < 0) corrupt(where + " has a negative size");
    if (spec.strides[d] < 0) corrupt(where + " has a negative stride");
    elements *= uint64_t(spec.sizes[d] > 0 ? spec.sizes[d] : 1);
    if (spec.sizes[d] > 0) last += (unsigned __int128)(spec.sizes[d] - 1) * uint64_t(spec.strides[d]);
    if (elements >= kMaxElements || last >= kMaxElements) corrupt(where + " has 2^62 elements or more, or spans as many");
  }
}

// The rules of one argument that do not depend on its op.
void check_arg(const ProgramArg& arg, const std::string& where) {
  switch (arg.kind) {
    case ProgramArg::Kind::kBool:
      if (arg.integer != 0 && arg.integer != 1) corrupt(where + " is a boolean of value " + std::to_string(arg.integer));
      break;
    case ProgramArg::Kind::kBoolList:
      for (int64_t v : arg.list) {
        if (v != 0 && v != 1) corrupt(where + " is a boolean list holding " + std::to_string(v));
      }
      break;
    case ProgramArg::Kind::kScalarType:
      if (element_size(arg.integer) == 0) {
        corrupt(where + " is dtype code " + std::to_string(arg.integer) + ", not one a program may use");
      }
      break;
    case ProgramArg::Kind::kLayout:
      if (arg.integer != 0) corrupt(where + " is layout " + std::to_string(arg.integer) + "; programs use strided tensors only");
      break;
    case ProgramArg::Kind::kMemoryFormat:
      if (arg.integer < 0 || arg.integer > 3) corrupt(where + " is memory format " + std::to_string(arg.integer));
      break;
    default:
      break;
  }
}

bool valid_op_name(const std::string& op) {
  const size_t colons = op.find("::");
  if (colons == std::string::npos || colons == 0 || colons + 2 >= op.size()) return false;
  for (size_t i = 0; i < op.size(); ++i) {
    const char c = op[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
                    (c == ':' && (i == colons || i == colons + 1));
    if (!ok) return false;
  }
  return op.find('.', colons) == op.rfind('.') && op.back() != '.';
}

}  // namespace

void check_program(const ProgramDesc& program) {
  const int64_t count = int64_t(program.values.size());
  const auto& values = program.values;
  auto check_value = [&](int64_t id, const std::string& where) {
    if (id < 0 || id >= count) corrupt(where + " names value " + std::to_string(id) + " of " + std::to_string(count));
  };
  // Roots and the memory each fixed root has (0 for per-call memory); every tensor must fit
  // the memory it is laid over.
  std::vector<int64_t> root(size_t(count), 0);
  std::vector<uint64_t> memory(size_t(count), 0);
  for (int64_t i = 0; i < count; ++i) {
    const ProgramValue& value = values[i];
    const std::string where = value_name(i);
    check_spec(value.spec, where);
    const uint64_t needed = spec_bytes(value.spec);
    root[i] = i;
    switch (value.kind) {
      case ProgramValue::Kind::kInput:
        if (value.index < 0 || value.index >= int64_t(program.inputs.size()) || program.inputs[value.index] != i) {
          corrupt(where + " is input " + std::to_string(value.index) + ", which the program's input list does not give it");
        }
        break;
      case ProgramValue::Kind::kConstant:
        if (value.index < 0 || value.index >= int64_t(program.constants.size())) {
          corrupt(where + " is constant " + std::to_string(value.index) + " of " + std::to_string(program.constants.size()));
        }
        memory[i] = program.constants[value.index].size();
        if (value.bytes > memory[i] || needed > memory[i]) {
          corrupt(where + " needs " + std::to_string(needed) + " bytes of constant " + std::to_string(value.index) +
                  ", which has " + std::to_string(memory[i]));
        }
        break;
      case ProgramValue::Kind::kArena:
        if (value.index < 0 || uint64_t(value.index) > program.arena_bytes ||
            value.bytes > program.arena_bytes - uint64_t(value.index)) {
          corrupt(where + ": an arena slot outside the arena (offset " + std::to_string(value.index) + ", " +
                  std::to_string(value.bytes) + " bytes, arena " + std::to_string(program.arena_bytes) + ")");
        }
        if (uint64_t(value.index) % kArenaAlignment != 0) {
          corrupt(where + ": arena offset " + std::to_string(value.index) + " is not a multiple of " +
                  std::to_string(kArenaAlignment));
        }
        memory[i] = value.bytes;
        if (needed > memory[i]) {
          corrupt(where + ": an arena tensor of " + std::to_string(needed) + " bytes in a slot of " + std::to_string(value.bytes));
        }
        break;
      case ProgramValue::Kind::kOutput:
      case ProgramValue::Kind::kDynamic:
        break;
      case ProgramValue::Kind::kView: {
        if (value.index < 0 || value.index >= i) corrupt(where + " is a view of value " + std::to_string(value.index) + ", not defined before it");
        root[i] = root[value.index];
        const ProgramValue& base = values[root[i]];
        switch (base.kind) {
          case ProgramValue::Kind::kArena:
          case ProgramValue::Kind::kConstant:
            memory[i] = memory[root[i]];
            if (needed > memory[i]) {
              corrupt(where + ": a view reaching byte " + std::to_string(needed) + " of its base's " +
                      std::to_string(memory[i]) + " (" + value_name(root[i]) + ")");
            }
            break;
          case ProgramValue::Kind::kInput:
          case ProgramValue::Kind::kOutput: {
            // Per-call memory: the view must lie inside its root's own elements, the only
            // memory a call is known to have (rebase_view checks the call's storage again).
            if (needed == 0) break;
            const uint64_t root_end = spec_bytes(base.spec);
            if (root_end == 0 || spec_start(value.spec) < spec_start(base.spec) || needed > root_end) {
              corrupt(where + ": a view reaching bytes [" + std::to_string(spec_start(value.spec)) + ", " +
                      std::to_string(needed) + ") outside its root's [" + std::to_string(spec_start(base.spec)) + ", " +
                      std::to_string(root_end) + ") (" + value_name(root[i]) + ")");
            }
            break;
          }
          default:  // a view of memory a kernel allocates: only ever a node's result (below)
            break;
        }
        break;
      }
      default:
        corrupt(where + " has unknown kind " + std::to_string(int(value.kind)));
    }
  }
  for (size_t k = 0; k < program.inputs.size(); ++k) {
    const int32_t id = program.inputs[k];
    check_value(id, "input " + std::to_string(k));
    if (values[id].kind != ProgramValue::Kind::kInput || values[id].index != int64_t(k)) {
      corrupt("input " + std::to_string(k) + " names " + value_name(id) + ", which is not input " + std::to_string(k));
    }
  }
  for (size_t k = 0; k < program.outputs.size(); ++k) {
    const int32_t id = program.outputs[k];
    check_value(id, "output " + std::to_string(k));
    const auto kind = values[root[id]].kind;
    if (kind != ProgramValue::Kind::kInput && kind != ProgramValue::Kind::kOutput) {
      corrupt("output " + std::to_string(k) + " is " + value_name(id) + ", which is not an output or an input (or a view of one)");
    }
  }
  // A call keeps an output's memory alive by returning it: an output nobody returns would be
  // freed before its kernel writes it.
  std::vector<bool> returned(size_t(count), false);
  for (int32_t id : program.outputs) returned[root[id]] = true;
  for (int64_t i = 0; i < count; ++i) {
    if (values[i].kind == ProgramValue::Kind::kOutput && !returned[i]) {
      corrupt(value_name(i) + " is an output the program does not return");
    }
  }
  // Values whose memory a kernel allocates exist once a node made them.
  std::vector<bool> made(size_t(count), false);
  auto check_read = [&](int64_t id, const std::string& where) {
    check_value(id, where);
    if (values[root[id]].kind == ProgramValue::Kind::kDynamic && !made[id]) {
      corrupt(where + " reads " + value_name(id) + " before a node made it");
    }
  };
  for (size_t n = 0; n < program.nodes.size(); ++n) {
    const ProgramNode& node = program.nodes[n];
    const std::string where = "node " + std::to_string(n) + " (" + node.op + ")";
    if (!valid_op_name(node.op)) corrupt("node " + std::to_string(n) + " has op name '" + node.op + "', not namespace::name[.overload]");
    if (node.op == "aten::from_file") corrupt(where + ": programs may not read or map files");
    for (size_t a = 0; a < node.args.size(); ++a) {
      const ProgramArg& arg = node.args[a];
      const std::string arg_where = where + " argument " + std::to_string(a);
      check_arg(arg, arg_where);
      if (arg.kind == ProgramArg::Kind::kValue) check_read(arg.integer, arg_where);
      if (arg.kind == ProgramArg::Kind::kValueList) {
        for (int64_t id : arg.list) {
          if (id != -1) check_read(id, arg_where);
        }
      }
    }
    if (node.op == "neuron::pointwise") {
      if (node.args.size() != 3 || node.args[0].kind != ProgramArg::Kind::kValueList ||
          node.args[1].kind != ProgramArg::Kind::kIntList || node.args[2].kind != ProgramArg::Kind::kDoubleList ||
          node.outputs.size() != 1 || node.outputs[0] < 0) {
        corrupt(where + " is not (values, code, scalars) -> one value");
      }
      for (int64_t id : node.args[0].list) {
        if (id < 0) corrupt(where + " has a None input");
      }
      check_pointwise_code(int64_t(node.args[0].list.size()), node.args[1].list, node.args[2].reals);
    }
    for (int32_t id : node.outputs) {
      if (id == -1) continue;
      check_value(id, where + " output");
      made[id] = true;
    }
  }
}

void check_pointwise_code(int64_t inputs, const std::vector<int64_t>& code, const std::vector<double>& scalars) {
  const size_t count = code.size() / kPointwiseFields;
  if (count == 0 || code.size() % kPointwiseFields != 0 || scalars.size() != count) {
    corrupt("a neuron::pointwise node has malformed code (" + std::to_string(code.size()) + " integers, " +
            std::to_string(scalars.size()) + " scalars)");
  }
  if (inputs < 0 || inputs + int64_t(count) > kPointwiseMaxRegisters) {
    corrupt("a neuron::pointwise node uses " + std::to_string(inputs + int64_t(count)) + " registers, at most " +
            std::to_string(kPointwiseMaxRegisters));
  }
  for (size_t k = 0; k < count; ++k) {
    const int64_t* f = &code[k * kPointwiseFields];
    const std::string where = "neuron::pointwise instruction " + std::to_string(k);
    if (f[0] < 0 || f[0] > int64_t(PointwiseOpcode::kWhere)) corrupt(where + " has unknown opcode " + std::to_string(f[0]));
    for (int o = 1; o <= 3; ++o) {
      if (f[o] < -1 || f[o] >= inputs + int64_t(k)) corrupt(where + " reads register " + std::to_string(f[o]) + ", not yet defined");
    }
    const auto opcode = PointwiseOpcode(f[0]);
    const bool reads_a = opcode != PointwiseOpcode::kAdd && opcode != PointwiseOpcode::kSub && opcode != PointwiseOpcode::kMul;
    if (reads_a && f[1] < 0) corrupt(where + " needs a register as its first operand, not a scalar");
    if (f[4] != 6 && f[4] != 15) corrupt(where + " has result dtype code " + std::to_string(f[4]) + " (float32 or bfloat16 only)");
  }
}

size_t program_element_size(int32_t dtype) { return element_size(dtype); }

uint64_t tensor_extent_bytes(const TensorSpec& spec) { return spec_bytes(spec); }

TensorSpec rebase_view(const TensorSpec& view, const TensorSpec& root, int64_t root_offset, uint64_t storage_bytes) {
  const size_t view_element = element_size(view.dtype), root_element = element_size(root.dtype);
  const __int128 start =
      (__int128)view.offset * view_element + ((__int128)root_offset - root.offset) * (__int128)root_element;
  if (view_element == 0 || root_element == 0 || start < 0 || start % __int128(view_element) != 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "a view of a compiled graph's input or output would start at byte " + std::to_string(int64_t(start)) +
                    " of its storage, not on an element boundary; the graph was compiled for its root at element " +
                    std::to_string(root.offset) + ", now at " + std::to_string(root_offset));
  }
  TensorSpec spec = view;
  spec.offset = int64_t(start / __int128(view_element));
  const uint64_t needed = spec_bytes(spec);
  if (needed > storage_bytes) {
    throw Error(ErrorCode::kInvalidArgument,
                "a view of a compiled graph's input or output would reach byte " + std::to_string(needed) +
                    " of a storage of " + std::to_string(storage_bytes) + " bytes (its root was compiled at element " +
                    std::to_string(root.offset) + ", now at " + std::to_string(root_offset) + ")");
  }
  return spec;
}

uint64_t crc64(const std::string& bytes, size_t length) {
  static const auto table = [] {
    std::vector<uint64_t> t(256);
    for (uint64_t i = 0; i < 256; ++i) {
      uint64_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xC96C5795D7870F42ull ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint64_t crc = ~0ull;
  for (size_t i = 0; i < length; ++i) crc = table[(crc ^ uint8_t(bytes[i])) & 0xff] ^ (crc >> 8);
  return ~crc;
}

std::string seal_program(const std::string& key, const std::string& payload) {
  std::string out(kMagic, kMagicLength);
  Writer body;
  body.u32(kProgramFormatVersion);
  body.text(key);
  body.text(payload);
  out += body.take();
  const uint64_t crc = crc64(out, out.size());
  out.append(reinterpret_cast<const char*>(&crc), sizeof(crc));
  return out;
}

std::string unseal_program(const std::string& file, const std::string& expected_key) {
  if (file.size() < kMagicLength + 4 + 8 + 8 + 8 || file.compare(0, kMagicLength, kMagic) != 0) {
    if (file.size() >= kMagicLength && file.compare(0, kMagicLength, kMagic) != 0) corrupt("not a program file (bad magic)");
    corrupt("truncated (" + std::to_string(file.size()) + " bytes)");
  }
  uint64_t stored;
  std::memcpy(&stored, file.data() + file.size() - 8, 8);
  Reader r(file, kMagicLength, file.size() - 8);
  const uint32_t version = r.u32();
  if (version != kProgramFormatVersion) {
    corrupt("format version " + std::to_string(version) + ", this build reads version " +
            std::to_string(kProgramFormatVersion));
  }
  std::string key = r.text("the key");
  std::string payload = r.text("the payload");
  if (!r.done()) corrupt("bytes after the payload");
  if (crc64(file, file.size() - 8) != stored) corrupt("checksum mismatch");
  if (key != expected_key) corrupt("a foreign entry (key " + key + ", expected " + expected_key + ")");
  return payload;
}

}  // namespace neuron_rt
