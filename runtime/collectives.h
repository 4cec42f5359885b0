// Collectives between the processes of one host, through shared memory.
//
// Equivalent to: NCCL's shared-memory (SHM) transport between GPUs of one node; Gloo's
// algorithms on CPU, without its sockets. The c10d backend (csrc/distributed) uses it for
// ranks that share a host and keeps Gloo for the others (Note [ProcessGroupNeuron]).
//
// Segment. One POSIX shared-memory segment per group, made by rank 0: a name no other job
// can guess (pid, time, random bits), mode 0600, created exclusively; rank 0 publishes its
// name through the job's rendezvous (the c10d Store torchrun provides), every rank maps it,
// and rank 0 unlinks it as soon as all have: nothing is left in /dev/shm once the group
// exists, whatever happens to its processes later. A segment left by a rank 0 that died
// before that point is removed by the next group made on the host (its creator's pid is in
// the name). Layout: a header with one cache line per rank (its progress counter and pid),
// then per rank two slots (double buffering) of `slot_bytes` each.
//
// Zero-copy. When every rank's tensors live in a shared-memory file (the device's HBM with
// MemoryBacking::kSharedFile, Options::memory_*), each rank maps its peers' files once
// (/proc/<pid>/fd/<fd>) and a collective moves the bytes once, between the tensors
// themselves: in all_reduce rank r reduces part r of every rank's tensor and writes the
// result into all of them; all_gather writes each rank's input straight into every output.
// The ranks first agree (one step) that all their tensors are in those files; when one is
// not (a staging copy in host memory), that call goes through the slots instead.
//
// Algorithms through the slots (the bytes of a message cross the segment once each way):
//  - all_reduce: every rank copies a chunk into its slot; rank r reduces part r of the
//    chunk across all slots, in place in its own slot (one rank computes each element, so
//    every rank gets bit-identical results; 16-bit floats accumulate in float32); every
//    rank copies the reduced parts out. Two steps per chunk.
//  - all_gather, broadcast: copy in, then copy every slot (or the root's) out. One step.
//  - reduce_scatter: every rank copies in the parts of its input, rank r reduces part r
//    straight into its output. One step.
// A step ends when every rank's progress counter has reached it: ranks wait on each
// other's counters (a short spin, then a futex wait on the shared word).
//
// Faults. Every wait has the group's deadline; a rank that has not arrived by then is named
// ("rank 1 (pid 4242) did not reach step 7 of all_reduce within 30000 ms"). A rank whose
// process has exited is noticed within ~50 ms and named. abort() (or any failed call) marks
// the segment failed: the other ranks' calls fail at once, naming the rank that failed, and
// every later call fails too (a group is not reusable after a fault, as with NCCL).
//
// Thread safety: the calls of one group must come from one thread at a time, in the same
// order on every rank (as c10d requires of collectives); abort() may come from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace neuron_rt {

// A key-value store every rank of the job reaches (the c10d Store in the bridge).
class Rendezvous {
 public:
  virtual ~Rendezvous() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  // Blocks until `key` is set, or throws neuron_rt::Error(kTimeout) after `timeout`.
  virtual std::string get(const std::string& key, std::chrono::milliseconds timeout) = 0;
};

enum class ElementType { kFloat32, kFloat64, kFloat16, kBFloat16, kInt8, kUInt8, kInt32, kInt64, kBool };
enum class ReduceKind { kSum, kProduct, kMin, kMax, kBitAnd, kBitOr, kBitXor };

size_t element_size(ElementType type);
// Whether `op` is defined for `type` (bitwise ops: integers and bool only).
bool reduction_supported(ElementType type, ReduceKind op);

// A key naming this host for locality: hostname, boot id and network namespace (two network
// namespaces on one machine count as two hosts, as in the multi-host tests).
std::string host_key();

class ShmGroup {
 public:
  struct Options {
    size_t slot_bytes = 2u << 20;  // per rank and buffer (NEURON_SIM_SHM_SLOT_BYTES)
    std::chrono::milliseconds timeout{std::chrono::minutes(30)};
    // This rank's shared-memory file of device memory (fd -1: none), mapped at `memory_base`
    // in this process: peers map it for zero-copy collectives.
    int memory_fd = -1;
    const void* memory_base = nullptr;
    size_t memory_length = 0;
    // The caller already knows every rank is on this host (the process group exchanged
    // host_key() through the store): no second exchange.
    bool same_host = false;
    // How long a rank waiting for its peers at a step spins (a pause per check) before it
    // sleeps on the futex (NEURON_SIM_COLLECTIVE_SPIN_US). A sleeping rank costs a futex wake
    // when its peer arrives, tens of microseconds on a VM, at every step of every collective;
    // spinning costs a core. -1: spin_default(), long when every local rank has a core.
    std::chrono::microseconds spin{-1};
  };
  // The default spin: kSpinWithCores when this host's ranks (torchrun's LOCAL_WORLD_SIZE, else
  // the group) have a core each, none otherwise (a spinning rank would take its peer's core).
  static std::chrono::microseconds spin_default(int local_ranks);
  static constexpr std::chrono::microseconds kSpinWithCores{1000};  // as Stream::kIdlePoll

  // Collective over the group's ranks. Returns null (and every rank agrees) when the ranks
  // are not all on this host (host_key(); not checked with Options::same_host), or when
  // `size` is 1. `prefix` makes the
  // rendezvous keys unique to this group.
  static std::unique_ptr<ShmGroup> create(Rendezvous& rendezvous, const std::string& prefix, int rank, int size,
                                          const Options& options);
  ~ShmGroup();
  ShmGroup(const ShmGroup&) = delete;
  ShmGroup& operator=(const ShmGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  void set_timeout(std::chrono::milliseconds timeout) { options_.timeout = timeout; }

  // In place: `data` holds `count` elements of `type`.
  void all_reduce(void* data, size_t count, ElementType type, ReduceKind op);
  // `output` receives `size` blocks of `bytes`, rank order; `input` may alias block `rank`.
  void all_gather(const void* input, void* output, size_t bytes);
  void broadcast(void* data, size_t bytes, int root);
  // `input` holds `size` blocks of `count` elements; `output` receives the reduction of
  // block `rank` (`count` elements).
  void reduce_scatter(const void* input, void* output, size_t count, ElementType type, ReduceKind op);
  void barrier();

  // Fails this group here and on every rank (their waits end at once).
  void abort(const std::string& why) noexcept;
  // The segment's name while it is linked (tests check it is gone).
  const std::string& segment_name() const { return name_; }
  // Whether every rank mapped every peer's device memory (zero-copy possible).
  bool zero_copy() const { return zero_copy_; }
  // Collectives that went zero-copy so far on this rank (tests check the path taken).
  uint64_t zero_copy_calls() const { return zero_copy_calls_.load(std::memory_order_relaxed); }

 private:
  struct Header;
  ShmGroup(int rank, int size, const Options& options);
  // Marks this rank's arrival at its next step and waits for every rank to reach it.
  void step(const char* collective);
  unsigned char* slot(int rank, uint64_t buffer) const;
  void fail(const std::string& message);
  void check_failed() const;
  void map_peers();
  // Zero-copy agreement (one step): true when every rank's `a` (and `b`, unless null) lie in
  // its shared device memory.
  bool agree_direct(const void* a, const void* b, const char* collective);
  // `ptr` (an address in rank `k`'s process) in this process's mapping of its memory.
  unsigned char* peer_address(int k, uint64_t ptr) const;

  int rank_;
  int size_;
  Options options_;
  std::string name_;
  void* base_ = nullptr;
  size_t length_ = 0;
  Header* header_ = nullptr;
  uint32_t steps_ = 0;     // steps this rank has taken (its progress counter)
  uint64_t buffers_ = 0;   // which of the two buffers the next chunk uses
  bool zero_copy_ = false;
  std::atomic<uint64_t> zero_copy_calls_{0};
  std::vector<std::pair<unsigned char*, size_t>> peer_maps_;  // per rank; own: not mapped again
};

}  // namespace neuron_rt
