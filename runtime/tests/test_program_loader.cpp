// Note [Program loader checks]: each rule refuses a well-sealed program that breaks it, with
// a message naming the value or node; rebase_view() and check_pointwise_code() on their own.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "runtime/program.h"
#include "runtime/tests/program_fuzzing.h"

using namespace neuron_rt;
using fuzzing::seed_programs;

namespace {

// The reason a sealed program is refused ("accepted" when it is not).
std::string refusal(const ProgramDesc& program) {
  try {
    decode_program(unseal_program(seal_program("key", encode_program(program)), "key"));
    return "accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kCorruptProgram) << error.what();
    return error.what();
  }
}

ProgramDesc seed(const std::string& name) {
  for (const ProgramDesc& p : seed_programs()) {
    if (p.name == name) return p;
  }
  ADD_FAILURE() << "no seed " << name;
  return {};
}

struct Case {
  const char* rule;
  const char* seed;
  std::function<void(ProgramDesc&)> breaks;
  const char* message;  // a part of the refusal
};

}  // namespace

TEST(ProgramLoader, EveryRuleRefusesAProgramThatBreaksIt) {
  using K = ProgramValue::Kind;
  using A = ProgramArg::Kind;
  const std::vector<Case> cases = {
      {"input value not in the input list", "add_sum", [](ProgramDesc& p) { p.values.push_back(fuzzing::make_value(K::kInput, 0, 4, TensorSpec{6, {1}, {1}, 0})); },
       "input list does not give it"},
      {"input list names another kind", "add_sum", [](ProgramDesc& p) { p.inputs = {2}; }, "input list does not give it"},
      {"an input listed twice", "views", [](ProgramDesc& p) { p.inputs = {0, 0}; }, "which is not input 1"},
      {"view of an input past its elements", "views", [](ProgramDesc& p) { p.values[1].spec.offset = 5; }, "outside its root's"},
      {"view of an input before its elements", "views",
       [](ProgramDesc& p) {
         p.values[0].spec.offset = 4;
         p.values[1].spec.offset = 0;
       },
       "outside its root's"},
      {"other-dtype view of an input past its bytes", "views", [](ProgramDesc& p) { p.values[2].spec.sizes = {65}; }, "outside its root's"},
      {"view of an output past its elements", "views", [](ProgramDesc& p) { p.values[4].spec.sizes = {4, 4}; }, "outside its root's"},
      {"view of an empty root reaching memory", "views",
       [](ProgramDesc& p) { p.values[3].spec.sizes = {0, 4}; }, "outside its root's"},
      {"misaligned arena slot", "add_sum", [](ProgramDesc& p) { p.values[2].index = 40; }, "not a multiple of 16"},
      {"arena slot past the arena", "add_sum", [](ProgramDesc& p) { p.values[2].index = 112; }, "outside the arena"},
      {"arena slot wrapping around", "add_sum", [](ProgramDesc& p) { p.values[2].bytes = ~uint64_t(0) - 8; }, "outside the arena"},
      {"arena tensor larger than its slot", "add_sum", [](ProgramDesc& p) { p.values[2].spec.sizes = {5, 4}; p.values[2].spec.strides = {4, 1}; }, "in a slot of"},
      {"view of an arena slot past it", "add_sum", [](ProgramDesc& p) { p.values[3].spec.strides = {1, 40}; }, "a view reaching byte"},
      {"constant tensor past its bytes", "add_sum", [](ProgramDesc& p) { p.values[1].spec.offset = 1; }, "of constant 0"},
      {"constant that does not exist", "add_sum", [](ProgramDesc& p) { p.values[1].index = 1; }, "is constant 1 of 1"},
      {"quantized dtype", "add_sum", [](ProgramDesc& p) { p.values[2].spec.dtype = 12; }, "not one a program may hold"},
      {"unknown dtype", "add_sum", [](ProgramDesc& p) { p.values[2].spec.dtype = 46; }, "not one a program may hold"},
      {"2^62 elements", "host", [](ProgramDesc& p) { p.values[1].spec.sizes = {int64_t(1) << 31, int64_t(1) << 31}; p.values[1].spec.strides = {0, 0}; }, "2^62"},
      {"a stride spanning 2^62", "host", [](ProgramDesc& p) { p.values[1].spec.strides = {int64_t(1) << 61}; }, "2^62"},
      {"negative size", "add_sum", [](ProgramDesc& p) { p.values[4].spec.sizes = {-1}; }, "negative size"},
      {"negative stride", "add_sum", [](ProgramDesc& p) { p.values[4].spec.strides = {-1}; }, "negative stride"},
      {"negative offset", "add_sum", [](ProgramDesc& p) { p.values[4].spec.offset = -2; }, "negative storage offset"},
      {"sizes and strides disagree", "add_sum", [](ProgramDesc& p) { p.values[4].spec.strides = {1, 1}; }, "sizes and 2 strides"},
      {"view of a later value", "add_sum", [](ProgramDesc& p) { p.values[3].index = 4; }, "not defined before it"},
      {"unknown value kind", "add_sum", [](ProgramDesc& p) { p.values[4].kind = ProgramValue::Kind(9); }, "unknown value kind"},
      {"program output in the arena", "add_sum", [](ProgramDesc& p) { p.outputs = {2}; }, "not an output or an input"},
      {"an output nobody returns", "several", [](ProgramDesc& p) { p.outputs = {3}; }, "does not return"},
      {"program output a kernel allocates", "host", [](ProgramDesc& p) { p.outputs = {1}; }, "not an output or an input"},
      {"host value read before it is made", "host", [](ProgramDesc& p) { std::swap(p.nodes[0], p.nodes[1]); }, "before a node made it"},
      {"view of a host value read before it is made", "host", [](ProgramDesc& p) { p.nodes[1].outputs = {-1}; }, "before a node made it"},
      {"argument naming no value", "add_sum", [](ProgramDesc& p) { p.nodes[0].args[0].integer = 99; }, "names value 99 of 5"},
      {"list argument naming no value", "several", [](ProgramDesc& p) { p.nodes[1].args[0].list = {1, -7}; }, "names value -7"},
      {"node output naming no value", "add_sum", [](ProgramDesc& p) { p.nodes[0].outputs = {5}; }, "names value 5"},
      {"boolean of value 2", "add_sum", [](ProgramDesc& p) { p.nodes[1].args[2].integer = 2; }, "boolean of value 2"},
      {"boolean list holding 5", "add_sum", [](ProgramDesc& p) { p.nodes[1].args[1] = fuzzing::list_arg(A::kBoolList, {1, 5}); }, "holding 5"},
      {"quantized dtype argument", "several", [](ProgramDesc& p) { p.nodes[2].args[1].integer = 13; }, "dtype code 13"},
      {"dtype argument out of range", "several", [](ProgramDesc& p) { p.nodes[2].args[1].integer = 1 << 20; }, "dtype code 1048576"},
      {"sparse layout argument", "several", [](ProgramDesc& p) { p.nodes[2].args[2].integer = 1; }, "strided tensors only"},
      {"unknown memory format", "several", [](ProgramDesc& p) { p.nodes[2].args[6].integer = 4; }, "memory format 4"},
      {"op name with a path", "add_sum", [](ProgramDesc& p) { p.nodes[0].op = "aten::add/../x"; }, "not namespace::name"},
      {"op name without namespace", "add_sum", [](ProgramDesc& p) { p.nodes[0].op = "add"; }, "not namespace::name"},
      {"op name with two overloads", "add_sum", [](ProgramDesc& p) { p.nodes[0].op = "aten::add.Tensor.out"; }, "not namespace::name"},
      {"empty op name", "add_sum", [](ProgramDesc& p) { p.nodes[0].op = ""; }, "not namespace::name"},
      {"pointwise negation of a scalar", "pointwise", [](ProgramDesc& p) { p.nodes[0].args[1].list[11] = -1; }, "needs a register"},
      {"pointwise where on a scalar condition", "pointwise", [](ProgramDesc& p) { p.nodes[0].args[1].list[16] = -1; }, "needs a register"},
      {"pointwise register not yet written", "pointwise", [](ProgramDesc& p) { p.nodes[0].args[1].list[1] = 3; }, "not yet defined"},
      {"pointwise float64 result", "pointwise", [](ProgramDesc& p) { p.nodes[0].args[1].list[4] = 7; }, "float32 or bfloat16"},
      {"pointwise opcode 8", "pointwise", [](ProgramDesc& p) { p.nodes[0].args[1].list[0] = 8; }, "unknown opcode 8"},
      {"pointwise code and scalars disagree", "pointwise", [](ProgramDesc& p) { p.nodes[0].args[2].reals.pop_back(); }, "malformed code"},
      {"pointwise with two results", "pointwise", [](ProgramDesc& p) { p.nodes[0].outputs = {3, 3}; }, "one value"},
      {"pointwise with a None input", "pointwise", [](ProgramDesc& p) { p.nodes[0].args[0].list[1] = -1; }, "None input"},
      {"pointwise with 65 registers", "pointwise",
       [](ProgramDesc& p) {
         auto& code = p.nodes[0].args[1].list;
         auto& scalars = p.nodes[0].args[2].reals;
         for (int k = 0; k < 58; ++k) {
           code.insert(code.begin(), {0, 0, 0, -1, 6});
           scalars.push_back(0);
         }
       },
       "65 registers"},
  };
  for (const ProgramDesc& p : seed_programs()) EXPECT_EQ(refusal(p), "accepted") << p.name;
  for (const Case& c : cases) {
    ProgramDesc p = seed(c.seed);
    c.breaks(p);
    const std::string why = refusal(p);
    EXPECT_NE(why.find(c.message), std::string::npos) << c.rule << ": " << why;
  }
}

TEST(ProgramLoader, RebaseViewMovesByBytesAndStaysInsideTheStorage) {
  const TensorSpec root{6, {4, 4}, {4, 1}, 4};  // float32 rows 1..4 of a storage
  const TensorSpec row{6, {4}, {1}, 8};         // its second row
  // The root now starts at element 0 of a 64-byte storage: the row moves 4 elements back.
  TensorSpec moved = rebase_view(row, root, 0, 64);
  EXPECT_EQ(moved.offset, 4);
  // A uint8 view of a float32 root: offsets move by bytes, not elements.
  const TensorSpec bytes{0, {16}, {1}, 16};
  EXPECT_EQ(rebase_view(bytes, root, 5, 128).offset, 20);
  // Past the storage: refused, naming the byte and the storage.
  try {
    rebase_view(row, root, 12, 64);
    ADD_FAILURE() << "a view past its storage was rebased";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(error.what()).find("storage of 64 bytes"), std::string::npos) << error.what();
  }
  // A float32 view of a uint8 root moved by 1 byte: not on an element boundary.
  const TensorSpec byte_root{0, {16}, {1}, 0};
  const TensorSpec floats{6, {4}, {1}, 0};
  EXPECT_THROW(rebase_view(floats, byte_root, 1, 64), Error);
  EXPECT_EQ(rebase_view(floats, byte_root, 4, 64).offset, 1);
  // Before the storage's start.
  EXPECT_THROW(rebase_view(TensorSpec{6, {1}, {1}, 0}, TensorSpec{6, {1}, {1}, 3}, 0, 64), Error);
}

TEST(ProgramLoader, PointwiseCodeIsCheckedOnItsOwn) {
  EXPECT_NO_THROW(check_pointwise_code(2, {0, 0, 1, -1, 6}, {0}));
  EXPECT_NO_THROW(check_pointwise_code(1, {2, -1, 0, -1, 15}, {2.0}));  // 2 * x: a scalar first operand
  EXPECT_THROW(check_pointwise_code(1, {}, {}), Error);
  EXPECT_THROW(check_pointwise_code(1, {3, -1, -1, -1, 6}, {0}), Error);  // -scalar: the kernel reads a register
  EXPECT_THROW(check_pointwise_code(1, {5, -1, -1, -1, 6}, {0}), Error);
  EXPECT_THROW(check_pointwise_code(-1, {0, -1, -1, -1, 6}, {0}), Error);
  EXPECT_THROW(check_pointwise_code(64, {0, 0, 0, -1, 6}, {0}), Error);
}
