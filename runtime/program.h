// Note [Programs]
// A program is what torch.compile(backend="neuron") makes of one graph: the simulator's
// NEFF. It is a serialisable description of the graph (ops and their arguments, the
// values they read and write, constants) with a static memory plan: every intermediate
// value that is not a view lives at a fixed offset of one arena, and values whose
// lifetimes do not overlap share bytes. The bridge (csrc/compile/) turns a program into an
// executable plan and runs it without Python; the runtime owns the format, its checks and
// the cache (program_cache.h).
//
// File format (seal / unseal): magic "NEURONSIMPROG", format version, the cache key, the
// payload (encode_program), and a CRC-64 of everything before it. unseal() detects a
// truncated file, another format, another key (a foreign entry) and a corrupt payload,
// and throws Error(kCorruptProgram) saying which. A checksum proves only that the writer's
// bytes arrived: anyone can seal a program (seal_program is public).
//
// Note [Program loader checks]
// decode_program() therefore treats every payload as hostile and accepts it only when the
// program cannot reach memory other than its own, so that the executor may build tensors
// from it without further bounds checks. A program it accepts satisfies (check_program):
//  - every index names something that exists: values, inputs, constants, view bases (defined
//    earlier), node arguments and outputs, program outputs;
//  - inputs: program.inputs[i] is the kInput value with index i, and each input appears once;
//  - every tensor spec has a known, non-quantized dtype, at most kMaxDims dims, sizes,
//    strides and offset >= 0, fewer than 2^62 elements and an extent below 2^62 elements;
//  - every tensor lies inside its memory: an arena value inside its slot (16-byte aligned,
//    inside the arena), a constant inside its bytes, a view inside its root's memory (for an
//    arena slot or a constant) or inside its root's own extent (for an input or an output,
//    whose memory is known per call: rebase_view() checks it again against the storage);
//  - a kDynamic value (memory its kernel allocates per call) is read only after a node made
//    it, and a view of one is only ever a node's result;
//  - program outputs are outputs or inputs (or views of them), and every output is returned
//    (a call keeps an output's memory alive only by returning it);
//  - arguments are well formed: booleans 0/1, dtypes a value may have, the strided layout
//    (no sparse or opaque tensors), known memory formats;
//  - op names are "namespace::name[.overload]", and not aten::from_file (the one ATen op
//    that reads and maps files); a neuron::pointwise node has valid code
//    (check_pointwise_code).
// What the loader cannot know is an op's schema: csrc/compile/Executor.cpp checks every
// argument's kind against it, and every result a kernel returns against its storage.
//
// Thread safety: encode/decode/seal/unseal/check are pure.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace neuron_rt {

// An argument of a node.
struct ProgramArg {
  enum class Kind : uint8_t {
    kNone = 0,
    kValue = 1,       // `index` is a value id
    kInt = 2,         // `integer`
    kDouble = 3,      // `real`
    kBool = 4,        // `integer` (0 / 1)
    kIntList = 5,     // `list`
    kDoubleList = 6,  // `reals`
    kBoolList = 7,    // `list` (0 / 1)
    kValueList = 8,   // `list` of value ids; -1 for None in an optional list
    kString = 9,      // `text`
    kDevice = 10,     // the program's device
    kScalarType = 11, // `integer` (a c10::ScalarType code)
    kLayout = 12,     // `integer`
    kMemoryFormat = 13,  // `integer`
  };
  Kind kind = Kind::kNone;
  int64_t integer = 0;
  double real = 0;
  std::vector<int64_t> list;
  std::vector<double> reals;
  std::string text;
};

// A tensor's metadata: a c10::ScalarType code, sizes, strides, offset (in elements).
struct TensorSpec {
  int32_t dtype = 0;
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
};

struct ProgramValue {
  enum class Kind : uint8_t {
    kInput = 0,     // the `index`-th input of a call
    kConstant = 1,  // the `index`-th constant
    kArena = 2,     // bytes at `index` (an offset) of the arena
    kOutput = 3,    // a fresh buffer per call (returned to the caller)
    kView = 4,      // a view of value `index`: `spec` gives sizes, strides and offset
    kDynamic = 5,   // allocated by the kernel that makes it (sizes known, storage not planned)
  };
  Kind kind = Kind::kArena;
  int64_t index = 0;
  uint64_t bytes = 0;  // storage bytes (kArena, kOutput, kConstant)
  TensorSpec spec;
  bool on_host = false;  // a host (CPU) tensor in the graph (e.g. a .cpu() inside it); else the device's
};

struct ProgramNode {
  std::string op;                // "aten::mm", "aten::add.Tensor", or a fused kernel "neuron::rms_norm"
  std::vector<ProgramArg> args;  // in the schema's order
  std::vector<int32_t> outputs;  // value ids of the returns (-1: a return that is not used)
};

struct ProgramDesc {
  std::string name;                      // the graph's name
  std::vector<ProgramValue> values;
  std::vector<int32_t> inputs;           // value id of each input, in call order
  std::vector<std::string> constants;    // raw bytes
  std::vector<ProgramNode> nodes;
  std::vector<int32_t> outputs;          // value id of each output, in return order
  uint64_t arena_bytes = 0;
  std::map<std::string, std::string> metadata;  // free-form (model name, node count, ...)
};

std::string encode_program(const ProgramDesc& program);
// Throws Error(kCorruptProgram) for a payload that is not a well-formed program or that
// breaks a rule of Note [Program loader checks].
ProgramDesc decode_program(const std::string& payload);
// The structure of a payload only, without the checks of Note [Program loader checks]
// (throws Error(kCorruptProgram) when it is not a program at all): for tools that treat
// programs as data, such as the fuzzer's mutator. Never run what it returns.
ProgramDesc parse_program_unchecked(const std::string& payload);
// The checks of Note [Program loader checks] on a program already in memory (decode_program
// runs them); throws Error(kCorruptProgram) naming the rule and the value or node.
void check_program(const ProgramDesc& program);

constexpr uint32_t kProgramFormatVersion = 1;
std::string seal_program(const std::string& key, const std::string& payload);
// The payload of a sealed file; throws Error(kCorruptProgram) naming what is wrong.
std::string unseal_program(const std::string& file, const std::string& expected_key);
uint64_t crc64(const std::string& bytes, size_t length);

// Bytes of an element of dtype code `dtype`; 0 for a code a program may not hold (unknown,
// or quantized: a quantized tensor needs a quantizer a program cannot describe).
size_t program_element_size(int32_t dtype);
// Bytes a tensor laid out by `spec` reaches from the start of its storage (offset
// included): 0 when it has no elements, saturated at UINT64_MAX.
uint64_t tensor_extent_bytes(const TensorSpec& spec);

// A view of a root whose memory is known only per call (an input, an output): `view` and
// `root` are their specs as compiled, the root now starts at element `root_offset` of a
// storage of `storage_bytes`. Returns the view's spec over that storage (its offset moved
// by as many bytes as the root's), or throws Error(kInvalidArgument) when the view would
// not lie inside the storage or not on an element boundary.
TensorSpec rebase_view(const TensorSpec& view, const TensorSpec& root, int64_t root_offset, uint64_t storage_bytes);

// Note [Fused pointwise kernels] (csrc/compile/Pointwise.h) has the semantics; the format:
// 5 integers per instruction (opcode, operands a, b, c, result dtype code), one scalar per
// instruction; registers 0..inputs-1 are the inputs, inputs+k instruction k's result;
// operand -1 is the instruction's scalar.
enum class PointwiseOpcode : int64_t {
  kAdd = 0,      // a + b
  kSub = 1,      // a - b
  kMul = 2,      // a * b
  kNeg = 3,      // -a            (a: a register)
  kRsqrt = 4,    // 1 / sqrt(a)   (a: a register)
  kSquare = 5,   // a * a         (a: a register)
  kConvert = 6,  // a, rounded to the result dtype only (a: a register)
  kWhere = 7,    // a ? b : c     (a: a register)
};
constexpr size_t kPointwiseFields = 5;
constexpr int64_t kPointwiseMaxRegisters = 64;
// Throws Error(kCorruptProgram) unless the code is well formed: at least one instruction,
// known opcodes, operands defined before use, a register wherever the opcode reads one,
// float32 or bfloat16 results, at most kPointwiseMaxRegisters registers.
void check_pointwise_code(int64_t inputs, const std::vector<int64_t>& code, const std::vector<double>& scalars);

}  // namespace neuron_rt
