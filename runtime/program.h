// Note [Programs]
// A program is what torch.compile(backend="neuron") makes of one graph: the simulator's
// NEFF. It is a serialisable description of the graph (ops and their arguments, the
// values they read and write, constants) with a static memory plan: every intermediate
// value that is not a view lives at a fixed offset of one arena, and values whose
// lifetimes do not overlap share bytes. The bridge (csrc/compile/) turns a program into an
// executable plan and runs it without Python; the runtime owns the format, its checks and
// the cache.
//
// File format (seal / unseal): magic "NEURONSIMPROG", format version, the cache key, the
// payload (encode_program), and a CRC-64 of everything before it. unseal() detects a
// truncated file, another format, another key (a foreign entry) and a corrupt payload,
// and throws Error(kCorruptProgram) saying which; decode_program() also checks every index
// it reads, so a damaged payload is an error, never undefined behaviour.
//
// Cache (ProgramCache), as TorchNeuron keeps its NEFFs: in memory (bounded, least recently
// used first out), and on disk under a directory as <dir>/<key[0:2]>/<key[2:4]>/<key>.neff
// with atomic writes (a unique temporary file, then rename), safe across processes. A
// corrupt disk entry is reported, deleted and treated as a miss (so it is recompiled).
// Counters go to Metrics ("CompilationCache.InMemoryHits", ...).
//
// Thread safety: encode/decode/seal/unseal are pure; ProgramCache may be used from any
// thread at once.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
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
// Throws Error(kCorruptProgram) for a payload that is not a well-formed program.
ProgramDesc decode_program(const std::string& payload);

constexpr uint32_t kProgramFormatVersion = 1;
std::string seal_program(const std::string& key, const std::string& payload);
// The payload of a sealed file; throws Error(kCorruptProgram) naming what is wrong.
std::string unseal_program(const std::string& file, const std::string& expected_key);
uint64_t crc64(const std::string& bytes, size_t length);

class ProgramCache {
 public:
  // `directory` empty: memory only. Reporting of corrupt disk entries goes to `report`.
  ProgramCache(std::string directory, size_t max_entries,
               std::function<void(const std::string&)> report = nullptr);
  // The payload under `key`: memory first, then disk. `from_disk` tells which answered.
  std::optional<std::string> get(const std::string& key, bool* from_disk = nullptr);
  // Stores `payload` under `key` in memory and, when a directory is set, on disk.
  // Disk failures are reported, not thrown (the program still runs from memory).
  void put(const std::string& key, const std::string& payload);
  void clear_memory();
  const std::string& directory() const { return directory_; }
  // <directory>/<key[0:2]>/<key[2:4]>/<key>.neff
  static std::string path_for(const std::string& directory, const std::string& key);

 private:
  void insert_locked(const std::string& key, const std::string& payload);
  const std::string directory_;
  const size_t max_entries_;
  std::function<void(const std::string&)> report_;
  std::mutex mutex_;
  std::list<std::pair<std::string, std::string>> entries_;  // most recent first
  std::unordered_map<std::string, std::list<std::pair<std::string, std::string>>::iterator> index_;
};

}  // namespace neuron_rt
