// Collectives between the processes of one host: collectives.h.
#include "runtime/collectives.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <random>
#include <cstdlib>
#include <thread>
#include <vector>

#include "runtime/error.h"
#include "runtime/spin.h"

namespace neuron_rt {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kMagic = 0x6e6575726f6e7368ull;  // "neuronsh"
constexpr const char* kNamePrefix = "neuron-sim-";
constexpr size_t kMessageBytes = 480;

// Futex on a word of the shared segment (not FUTEX_PRIVATE: other processes map it).
void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::milliseconds timeout) {
  timespec limit{static_cast<time_t>(timeout.count() / 1000), static_cast<long>((timeout.count() % 1000) * 1000000)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &limit, nullptr, 0);
}
void futex_wake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

std::string read_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string link_of(const char* path) {
  char target[256];
  const ssize_t n = readlink(path, target, sizeof(target) - 1);
  return n > 0 ? std::string(target, static_cast<size_t>(n)) : std::string();
}

// Gone, or a zombie (killed, its parent not yet told: a test harness reading another
// process's output first).
bool process_exited(pid_t pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0) return errno == ESRCH;
  const std::string stat = read_line(("/proc/" + std::to_string(pid) + "/stat").c_str());
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return false;
  const char state = stat[close + 2];
  return state == 'Z' || state == 'X';
}

// Segments whose creator died before unlinking them (its pid is in the name).
void remove_stale_segments() {
  DIR* dir = opendir("/dev/shm");
  if (!dir) return;
  while (dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.rfind(kNamePrefix, 0) != 0) continue;
    const pid_t pid = static_cast<pid_t>(std::atol(name.c_str() + std::strlen(kNamePrefix)));
    if (process_exited(pid)) shm_unlink(("/" + name).c_str());
  }
  closedir(dir);
}

// memcpy that takes empty messages (whose pointers may be null).
inline void copy_bytes(void* to, const void* from, size_t bytes) {
  if (bytes) std::memcpy(to, from, bytes);
}

// ---- element types and reductions --------------------------------------------------------

float bf16_to_float(uint16_t bits) {
  const uint32_t word = static_cast<uint32_t>(bits) << 16;
  float value;
  copy_bytes(&value, &word, sizeof(value));
  return value;
}
uint16_t float_to_bf16(float value) {  // round to nearest even, NaN kept a NaN
  uint32_t word;
  copy_bytes(&word, &value, sizeof(word));
  if ((word & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((word >> 16) | 0x40);
  word += 0x7fffu + ((word >> 16) & 1u);
  return static_cast<uint16_t>(word >> 16);
}
float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t word;
  if (exponent == 0) {
    if (mantissa == 0) {
      word = sign;
    } else {  // subnormal: normalise
      exponent = 127 - 15 + 1;
      while (!(mantissa & 0x400u)) {
        mantissa <<= 1;
        --exponent;
      }
      word = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
    }
  } else if (exponent == 0x1f) {
    word = sign | 0x7f800000u | (mantissa << 13);
  } else {
    word = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  float value;
  copy_bytes(&value, &word, sizeof(value));
  return value;
}
uint16_t float_to_half(float value) {  // round to nearest even
  uint32_t word;
  copy_bytes(&word, &value, sizeof(word));
  const uint16_t sign = static_cast<uint16_t>((word >> 16) & 0x8000u);
  const uint32_t magnitude = word & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return sign | 0x7e00u;                 // NaN
  if (magnitude >= 0x477ff000u) return sign | 0x7c00u;                // overflows to inf
  if (magnitude < 0x38800000u) {                                       // subnormal or zero
    if (magnitude < 0x33000000u) return sign;
    const uint32_t shift = 113 - (magnitude >> 23) + 13;
    const uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
    return sign | static_cast<uint16_t>(half);
  }
  uint32_t half = ((magnitude >> 23) - 127 + 15) << 10 | ((magnitude >> 13) & 0x3ffu);
  const uint32_t rest = magnitude & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
  return sign | static_cast<uint16_t>(half);
}

// How an element type is loaded into an accumulator, combined and stored back.
template <typename T>
struct Plain {
  using Value = T;
  using Acc = T;
  static Acc load(T v) { return v; }
  static T store(Acc a) { return a; }
};
struct BF16 {
  using Value = uint16_t;
  using Acc = float;
  static Acc load(uint16_t v) { return bf16_to_float(v); }
  static uint16_t store(Acc a) { return float_to_bf16(a); }
};
struct F16 {
  using Value = uint16_t;
  using Acc = float;
  static Acc load(uint16_t v) { return half_to_float(v); }
  static uint16_t store(Acc a) { return float_to_half(a); }
};
template <typename T, typename Wide>  // signed integers in their unsigned type (wrap-around)
struct Integer {
  using Value = T;
  using Acc = Wide;
  static Acc load(T v) { return static_cast<Acc>(v); }
  static T store(Acc a) { return static_cast<T>(a); }
};
struct Bool {
  using Value = uint8_t;
  using Acc = uint32_t;
  static Acc load(uint8_t v) { return v != 0; }
  static uint8_t store(Acc a) { return a != 0; }
};

template <typename Acc, bool kFloat>
Acc combine(ReduceKind op, Acc a, Acc b) {
  switch (op) {
    case ReduceKind::kSum: return a + b;
    case ReduceKind::kProduct: return a * b;
    case ReduceKind::kMin: return b < a ? b : a;
    case ReduceKind::kMax: return a < b ? b : a;
    default:
      if constexpr (!kFloat) {
        if (op == ReduceKind::kBitAnd) return a & b;
        if (op == ReduceKind::kBitOr) return a | b;
        return a ^ b;
      }
      return a;
  }
}

// outs[o][i] = op over k of sources[k][i], for `count` elements, in blocks (one accumulator
// block in L1; the loops vectorise). An output may be one of the sources (a block is read
// whole before it is written).
template <typename Kind>
void reduce_block(const unsigned char* const* sources, int n, unsigned char* const* outs, int n_outs, size_t count,
                  ReduceKind op) {
  using Value = typename Kind::Value;
  using Acc = typename Kind::Acc;
  constexpr bool kFloat = std::is_floating_point<Acc>::value;
  constexpr size_t kBlock = 1024;
  Acc acc[kBlock];
  for (size_t begin = 0; begin < count; begin += kBlock) {
    const size_t len = std::min(kBlock, count - begin);
    const Value* first = reinterpret_cast<const Value*>(sources[0]) + begin;
    for (size_t i = 0; i < len; ++i) acc[i] = Kind::load(first[i]);
    for (int k = 1; k < n; ++k) {
      const Value* source = reinterpret_cast<const Value*>(sources[k]) + begin;
      switch (op) {  // the switch outside the loop, so each loop vectorises
        case ReduceKind::kSum:
          for (size_t i = 0; i < len; ++i) acc[i] = acc[i] + Kind::load(source[i]);
          break;
        default:
          for (size_t i = 0; i < len; ++i) acc[i] = combine<Acc, kFloat>(op, acc[i], Kind::load(source[i]));
          break;
      }
    }
    for (int o = 0; o < n_outs; ++o) {
      Value* target = reinterpret_cast<Value*>(outs[o]) + begin;
      for (size_t i = 0; i < len; ++i) target[i] = Kind::store(acc[i]);
    }
  }
}

// Signed integers: sum and product wrap around (computed unsigned: no overflow), min and max
// compare signed values.
template <typename T, typename Unsigned>
void reduce_integers(const unsigned char* const* sources, int n, unsigned char* const* out, int m, size_t count,
                     ReduceKind op) {
  if (op == ReduceKind::kSum || op == ReduceKind::kProduct) {
    return reduce_block<Integer<T, Unsigned>>(sources, n, out, m, count, op);
  }
  return reduce_block<Plain<T>>(sources, n, out, m, count, op);
}

void reduce(ElementType type, const unsigned char* const* sources, int n, unsigned char* const* out, int m,
            size_t count, ReduceKind op) {
  switch (type) {
    case ElementType::kFloat32: return reduce_block<Plain<float>>(sources, n, out, m, count, op);
    case ElementType::kFloat64: return reduce_block<Plain<double>>(sources, n, out, m, count, op);
    case ElementType::kBFloat16: return reduce_block<BF16>(sources, n, out, m, count, op);
    case ElementType::kFloat16: return reduce_block<F16>(sources, n, out, m, count, op);
    case ElementType::kInt8: return reduce_integers<int8_t, uint8_t>(sources, n, out, m, count, op);
    case ElementType::kUInt8: return reduce_block<Plain<uint8_t>>(sources, n, out, m, count, op);
    case ElementType::kInt32: return reduce_integers<int32_t, uint32_t>(sources, n, out, m, count, op);
    case ElementType::kInt64: return reduce_integers<int64_t, uint64_t>(sources, n, out, m, count, op);
    case ElementType::kBool: return reduce_block<Bool>(sources, n, out, m, count, op);
  }
}

const char* name_of(ReduceKind op) {
  switch (op) {
    case ReduceKind::kSum: return "sum";
    case ReduceKind::kProduct: return "product";
    case ReduceKind::kMin: return "min";
    case ReduceKind::kMax: return "max";
    case ReduceKind::kBitAnd: return "bitwise and";
    case ReduceKind::kBitOr: return "bitwise or";
    case ReduceKind::kBitXor: return "bitwise xor";
  }
  return "?";
}

}  // namespace

size_t element_size(ElementType type) {
  switch (type) {
    case ElementType::kFloat64: case ElementType::kInt64: return 8;
    case ElementType::kFloat32: case ElementType::kInt32: return 4;
    case ElementType::kFloat16: case ElementType::kBFloat16: return 2;
    default: return 1;
  }
}

bool reduction_supported(ElementType type, ReduceKind op) {
  const bool bitwise = op == ReduceKind::kBitAnd || op == ReduceKind::kBitOr || op == ReduceKind::kBitXor;
  const bool floating = type == ElementType::kFloat32 || type == ElementType::kFloat64 ||
                        type == ElementType::kFloat16 || type == ElementType::kBFloat16;
  return !(bitwise && floating);
}

std::string host_key() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return std::string(host) + "/" + read_line("/proc/sys/kernel/random/boot_id") + "/" + link_of("/proc/self/ns/net") +
         "/" + link_of("/proc/self/ns/mnt") + "/" + link_of("/proc/self/ns/pid") + "/" + link_of("/proc/self/ns/ipc");
}

// ---- the segment --------------------------------------------------------------------------

struct alignas(64) RankLine {
  std::atomic<uint32_t> progress;  // steps this rank has reached
  std::atomic<int32_t> pid;
  int32_t memory_fd;               // its shared device memory (zero-copy), or -1
  uint32_t flag;                   // mapped every peer (creation); tensors in shared memory (per call)
  uint64_t memory_base;            // where that memory is mapped in its process
  uint64_t memory_length;
  uint64_t a, b;                   // a collective's pointers, in its process
};
static_assert(sizeof(RankLine) == 64, "one cache line per rank");

struct ShmGroup::Header {
  uint64_t magic;
  uint32_t size;
  uint64_t slot_bytes;
  alignas(64) std::atomic<uint32_t> mapped;   // ranks that have mapped the segment
  std::atomic<uint32_t> failed;               // 0, or 1 + the rank that failed the group
  char message[kMessageBytes];                // why (written before `failed`)
  RankLine ranks[1];                          // `size` of them

  static size_t bytes(int size) {
    const size_t raw = offsetof(Header, ranks) + sizeof(RankLine) * static_cast<size_t>(size);
    return (raw + 4095) & ~size_t(4095);
  }
};

ShmGroup::ShmGroup(int rank, int size, const Options& options) : rank_(rank), size_(size), options_(options) {
  if (options_.spin.count() < 0) {
    const char* local = std::getenv("LOCAL_WORLD_SIZE");
    options_.spin = spin_default(local && std::atoi(local) > 0 ? std::atoi(local) : size);
  }
}

std::chrono::microseconds ShmGroup::spin_default(int local_ranks) {
  if (const char* setting = std::getenv("NEURON_SIM_COLLECTIVE_SPIN_US")) {
    char* end = nullptr;
    const long value = std::strtol(setting, &end, 10);
    if (end == setting || *end != '\0' || value < 0) {
      throw Error(ErrorCode::kInvalidArgument, std::string("NEURON_SIM_COLLECTIVE_SPIN_US='") + setting +
                                                   "': give a number of microseconds, 0 or more");
    }
    return std::chrono::microseconds(value);
  }
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return unsigned(std::max(1, local_ranks)) <= cores ? kSpinWithCores : std::chrono::microseconds(0);
}

std::unique_ptr<ShmGroup> ShmGroup::create(Rendezvous& rendezvous, const std::string& prefix, int rank, int size,
                                           const Options& options) {
  if (size <= 1) return nullptr;
  if (options.slot_bytes < 4096 || options.slot_bytes % 64 != 0) {
    throw Error(ErrorCode::kInvalidArgument, "NEURON_SIM_SHM_SLOT_BYTES=" + std::to_string(options.slot_bytes) +
                                                 ": give a multiple of 64 of at least 4096 bytes");
  }
  if (!options.same_host) {
    const std::string here = host_key();
    rendezvous.set(prefix + "host/" + std::to_string(rank), here);
    for (int other = 0; other < size; ++other) {
      if (rendezvous.get(prefix + "host/" + std::to_string(other), options.timeout) != here) return nullptr;
    }
  }

  std::unique_ptr<ShmGroup> group(new ShmGroup(rank, size, options));
  group->length_ = Header::bytes(size) + static_cast<size_t>(size) * 2 * options.slot_bytes;
  int fd = -1;
  if (rank == 0) {
    remove_stale_segments();
    std::random_device random;
    group->name_ = "/" + std::string(kNamePrefix) + std::to_string(getpid()) + "-" +
                   std::to_string(Clock::now().time_since_epoch().count()) + "-" + std::to_string(random());
    fd = shm_open(group->name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) throw Error(ErrorCode::kInvalidArgument, "cannot create shared memory " + group->name_ + ": " + std::strerror(errno));
    if (ftruncate(fd, static_cast<off_t>(group->length_)) != 0) {
      const int error = errno;
      close(fd);
      shm_unlink(group->name_.c_str());
      throw Error(ErrorCode::kOutOfMemory, "cannot size shared memory " + group->name_ + " to " +
                                               format_bytes(group->length_) + ": " + std::strerror(error));
    }
  } else {
    group->name_ = rendezvous.get(prefix + "segment", options.timeout);
    fd = shm_open(group->name_.c_str(), O_RDWR, 0600);
    if (fd < 0) {
      throw Error(ErrorCode::kInvalidArgument, "rank " + std::to_string(rank) + " cannot open shared memory " +
                                                   group->name_ + " made by rank 0: " + std::strerror(errno));
    }
    struct stat info;
    if (fstat(fd, &info) != 0 || static_cast<size_t>(info.st_size) != group->length_) {
      close(fd);
      throw Error(ErrorCode::kInvalidArgument, "shared memory " + group->name_ + " has the wrong size: the ranks "
                                                   "disagree on the group size or NEURON_SIM_SHM_SLOT_BYTES");
    }
  }
  group->base_ = mmap(nullptr, group->length_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (group->base_ == MAP_FAILED) {
    group->base_ = nullptr;
    if (rank == 0) shm_unlink(group->name_.c_str());
    throw Error(ErrorCode::kOutOfMemory, "cannot map shared memory " + group->name_ + ": " + std::strerror(errno));
  }
  Header* header = group->header_ = static_cast<Header*>(group->base_);
  if (rank == 0) {
    header->magic = kMagic;
    header->size = static_cast<uint32_t>(size);
    header->slot_bytes = options.slot_bytes;
    header->ranks[0].pid.store(getpid(), std::memory_order_relaxed);
    header->mapped.store(1, std::memory_order_release);
    rendezvous.set(prefix + "segment", group->name_);
    // Unlinked as soon as every rank has mapped it (Note in collectives.h).
    const Clock::time_point deadline = Clock::now() + options.timeout;
    while (header->mapped.load(std::memory_order_acquire) < static_cast<uint32_t>(size)) {
      if (Clock::now() > deadline) {
        shm_unlink(group->name_.c_str());
        throw Error(ErrorCode::kTimeout, "shared memory for the group: only " + std::to_string(header->mapped.load()) +
                                             " of " + std::to_string(size) + " ranks mapped it within " +
                                             std::to_string(options.timeout.count()) + " ms");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    shm_unlink(group->name_.c_str());
  } else {
    if (header->magic != kMagic || header->size != static_cast<uint32_t>(size) ||
        header->slot_bytes != options.slot_bytes) {
      throw Error(ErrorCode::kInvalidArgument, "shared memory " + group->name_ + " is not this group's");
    }
    header->ranks[rank].pid.store(getpid(), std::memory_order_relaxed);
    header->mapped.fetch_add(1, std::memory_order_acq_rel);
  }
  group->map_peers();
  return group;
}

ShmGroup::~ShmGroup() {
  for (int k = 0; k < static_cast<int>(peer_maps_.size()); ++k) {
    if (k != rank_ && peer_maps_[k].first) munmap(peer_maps_[k].first, peer_maps_[k].second);
  }
  if (base_) munmap(base_, length_);
}

// Zero-copy (collectives.h): every rank maps its peers' shared device memory; all must
// succeed on every rank, or no call goes zero-copy.
void ShmGroup::map_peers() {
  RankLine& mine = header_->ranks[rank_];
  mine.memory_fd = options_.memory_fd;
  mine.memory_base = reinterpret_cast<uint64_t>(options_.memory_base);
  mine.memory_length = options_.memory_fd >= 0 ? options_.memory_length : 0;
  step("creation");
  peer_maps_.assign(static_cast<size_t>(size_), {nullptr, 0});
  bool mapped = mine.memory_length > 0;
  for (int k = 0; k < size_ && mapped; ++k) {
    const RankLine& line = header_->ranks[k];
    if (k == rank_) {
      peer_maps_[k] = {reinterpret_cast<unsigned char*>(line.memory_base), line.memory_length};
      continue;
    }
    if (line.memory_length == 0) {
      mapped = false;
      break;
    }
    const std::string path = "/proc/" + std::to_string(line.pid.load()) + "/fd/" + std::to_string(line.memory_fd);
    const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      mapped = false;
      break;
    }
    void* view = mmap(nullptr, line.memory_length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    close(fd);
    if (view == MAP_FAILED) {
      mapped = false;
      break;
    }
    peer_maps_[k] = {static_cast<unsigned char*>(view), line.memory_length};
  }
  mine.flag = mapped ? 1 : 0;
  step("creation");
  zero_copy_ = true;
  for (int k = 0; k < size_; ++k) zero_copy_ = zero_copy_ && header_->ranks[k].flag == 1;
}

unsigned char* ShmGroup::peer_address(int k, uint64_t ptr) const {
  const RankLine& line = header_->ranks[k];
  return peer_maps_[k].first + (ptr - line.memory_base);
}

bool ShmGroup::agree_direct(const void* a, const void* b, const char* collective) {
  if (!zero_copy_) return false;  // known to every rank since creation: no step needed
  RankLine& mine = header_->ranks[rank_];
  auto inside = [&](const void* p) {
    const auto address = reinterpret_cast<uint64_t>(p);
    return address >= mine.memory_base && address < mine.memory_base + mine.memory_length;
  };
  mine.a = reinterpret_cast<uint64_t>(a);
  mine.b = reinterpret_cast<uint64_t>(b);
  mine.flag = inside(a) && (b == nullptr || inside(b)) ? 1 : 0;
  step(collective);
  for (int k = 0; k < size_; ++k) {
    if (header_->ranks[k].flag != 1) return false;
  }
  ++zero_copy_calls_;
  return true;
}

unsigned char* ShmGroup::slot(int rank, uint64_t buffer) const {
  return static_cast<unsigned char*>(base_) + Header::bytes(size_) +
         (static_cast<size_t>(rank) * 2 + (buffer & 1)) * options_.slot_bytes;
}

void ShmGroup::fail(const std::string& message) {
  uint32_t expected = 0;
  // The first failure's message is kept: write it, then publish.
  if (header_->failed.load(std::memory_order_acquire) == 0) {
    std::snprintf(header_->message, kMessageBytes, "%s", message.c_str());
    header_->failed.compare_exchange_strong(expected, static_cast<uint32_t>(rank_) + 1, std::memory_order_acq_rel);
  }
  for (int r = 0; r < size_; ++r) futex_wake(&header_->ranks[r].progress);
}

void ShmGroup::abort(const std::string& why) noexcept {
  try {
    fail("rank " + std::to_string(rank_) + " aborted the group: " + why);
  } catch (...) {
  }
}

// Throws the group's failure, if any.
void ShmGroup::check_failed() const {
  if (const uint32_t failed = header_->failed.load(std::memory_order_acquire)) {
    const std::string message(header_->message, strnlen(header_->message, kMessageBytes));
    throw Error(ErrorCode::kAborted, static_cast<int>(failed - 1) == rank_
                                         ? message
                                         : "the group failed on rank " + std::to_string(failed - 1) + ": " + message);
  }
}

void ShmGroup::step(const char* collective) {
  // A failed group never advances a rank's counter (a late peer would pass its steps and
  // act on the pointers of another call), and a step that completes in a failed group
  // still throws: no rank touches a peer's memory after the peer has given up.
  check_failed();
  const uint32_t target = ++steps_;
  RankLine* lines = header_->ranks;
  lines[rank_].progress.store(target, std::memory_order_release);
  futex_wake(&lines[rank_].progress);
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + options_.timeout;
  const Clock::time_point spin_until = start + options_.spin;
  for (int other = 0; other < size_; ++other) {
    if (other == rank_) continue;
    int spins = 0;
    Clock::time_point next_check = start + std::chrono::milliseconds(50);
    for (;;) {
      const uint32_t seen = lines[other].progress.load(std::memory_order_acquire);
      if (static_cast<int32_t>(seen - target) >= 0) break;
      check_failed();
      if (spins < 256) {
        ++spins;
        cpu_relax();
        continue;
      }
      if (spins == 256 && Clock::now() < spin_until) {  // a core of its own: spin on, clock read per 64 pauses
        for (int i = 0; i < 64; ++i) cpu_relax();
        continue;
      }
      if (spins < 272) {
        ++spins;
        sched_yield();
        continue;
      }
      const Clock::time_point now = Clock::now();
      const pid_t pid = lines[other].pid.load(std::memory_order_relaxed);
      if (now >= next_check) {
        next_check = now + std::chrono::milliseconds(50);
        if (process_exited(pid)) {
          const std::string message = "rank " + std::to_string(other) + " (pid " + std::to_string(pid) +
                                      ") exited before reaching step " + std::to_string(target) + " (" + collective +
                                      "); rank " + std::to_string(rank_) + " waited for it";
          fail(message);
          throw Error(ErrorCode::kAborted, message);
        }
      }
      if (now >= deadline) {
        std::string waiting;
        for (int r = 0; r < size_; ++r) {
          if (r != rank_ && static_cast<int32_t>(lines[r].progress.load() - target) < 0) {
            waiting += (waiting.empty() ? "" : ", ") + std::to_string(r) + " (pid " +
                       std::to_string(lines[r].pid.load()) + ")";
          }
        }
        const std::string message = std::string(collective) + " timed out: rank " + std::to_string(rank_) + " waited " +
                                    std::to_string(options_.timeout.count()) + " ms for rank(s) " + waiting +
                                    " to reach step " + std::to_string(target) + "; they did not call it or are stuck";
        fail(message);
        throw Error(ErrorCode::kTimeout, message);
      }
      futex_wait(&lines[other].progress, seen, std::chrono::milliseconds(10));
    }
  }
  check_failed();
}

void ShmGroup::barrier() { step("barrier"); }

void ShmGroup::all_reduce(void* data, size_t count, ElementType type, ReduceKind op) {
  if (!reduction_supported(type, op)) {
    throw Error(ErrorCode::kInvalidArgument, std::string("all_reduce: ") + name_of(op) + " is not defined for floating-point elements");
  }
  const size_t width = element_size(type);
  std::vector<const unsigned char*> sources(static_cast<size_t>(size_));
  if (agree_direct(data, nullptr, "all_reduce")) {  // rank r: part r of every tensor, into all of them
    const size_t part = (count + size_ - 1) / size_;
    const size_t begin = std::min(count, part * rank_), end = std::min(count, begin + part);
    std::vector<unsigned char*> targets(static_cast<size_t>(size_));
    for (int k = 0; k < size_; ++k) {
      targets[k] = peer_address(k, header_->ranks[k].a) + begin * width;
      sources[k] = targets[k];
    }
    if (end > begin) reduce(type, sources.data(), size_, targets.data(), size_, end - begin, op);
    step("all_reduce");
    return;
  }
  const size_t chunk = options_.slot_bytes / width;
  auto* bytes = static_cast<unsigned char*>(data);
  for (size_t offset = 0; offset < count || (count == 0 && offset == 0); offset += chunk) {
    const size_t m = std::min(chunk, count - offset);
    const uint64_t buffer = buffers_++;
    copy_bytes(slot(rank_, buffer), bytes + offset * width, m * width);
    step("all_reduce");
    const size_t part = (m + size_ - 1) / size_;
    const size_t begin = std::min(m, part * rank_), end = std::min(m, begin + part);
    for (int k = 0; k < size_; ++k) sources[k] = slot(k, buffer) + begin * width;
    unsigned char* target = slot(rank_, buffer) + begin * width;
    if (end > begin) reduce(type, sources.data(), size_, &target, 1, end - begin, op);
    step("all_reduce");
    for (int k = 0; k < size_; ++k) {
      const size_t b = std::min(m, part * k), e = std::min(m, b + part);
      if (e > b) copy_bytes(bytes + (offset + b) * width, slot(k, buffer) + b * width, (e - b) * width);
    }
    if (count == 0) break;
  }
}

void ShmGroup::all_gather(const void* input, void* output, size_t bytes) {
  const auto* in = static_cast<const unsigned char*>(input);
  auto* out = static_cast<unsigned char*>(output);
  if (agree_direct(input, output, "all_gather")) {  // this rank's input straight into every output
    for (int k = 0; k < size_; ++k) {
      unsigned char* target = peer_address(k, header_->ranks[k].b) + rank_ * bytes;
      if (target != in) copy_bytes(target, in, bytes);
    }
    step("all_gather");
    return;
  }
  for (size_t offset = 0; offset < bytes || (bytes == 0 && offset == 0); offset += options_.slot_bytes) {
    const size_t m = std::min(options_.slot_bytes, bytes - offset);
    const uint64_t buffer = buffers_++;
    copy_bytes(slot(rank_, buffer), in + offset, m);
    step("all_gather");
    for (int k = 0; k < size_; ++k) copy_bytes(out + k * bytes + offset, slot(k, buffer), m);
    if (bytes == 0) break;
  }
}

void ShmGroup::broadcast(void* data, size_t bytes, int root) {
  if (root < 0 || root >= size_) {
    throw Error(ErrorCode::kInvalidArgument, "broadcast from rank " + std::to_string(root) + " in a group of " +
                                                 std::to_string(size_));
  }
  auto* out = static_cast<unsigned char*>(data);
  if (agree_direct(data, nullptr, "broadcast")) {
    if (rank_ != root) copy_bytes(out, peer_address(root, header_->ranks[root].a), bytes);
    step("broadcast");
    return;
  }
  for (size_t offset = 0; offset < bytes || (bytes == 0 && offset == 0); offset += options_.slot_bytes) {
    const size_t m = std::min(options_.slot_bytes, bytes - offset);
    const uint64_t buffer = buffers_++;
    if (rank_ == root) copy_bytes(slot(root, buffer), out + offset, m);
    step("broadcast");
    if (rank_ != root) copy_bytes(out + offset, slot(root, buffer), m);
    if (bytes == 0) break;
  }
}

void ShmGroup::reduce_scatter(const void* input, void* output, size_t count, ElementType type, ReduceKind op) {
  if (!reduction_supported(type, op)) {
    throw Error(ErrorCode::kInvalidArgument, std::string("reduce_scatter: ") + name_of(op) + " is not defined for floating-point elements");
  }
  const size_t width = element_size(type);
  const size_t chunk = options_.slot_bytes / (width * static_cast<size_t>(size_));
  const auto* in = static_cast<const unsigned char*>(input);
  auto* out = static_cast<unsigned char*>(output);
  std::vector<const unsigned char*> sources(static_cast<size_t>(size_));
  if (agree_direct(input, nullptr, "reduce_scatter")) {  // block r of every input, into this output
    for (int k = 0; k < size_; ++k) sources[k] = peer_address(k, header_->ranks[k].a) + rank_ * count * width;
    if (count) reduce(type, sources.data(), size_, &out, 1, count, op);
    step("reduce_scatter");
    return;
  }
  for (size_t offset = 0; offset < count || (count == 0 && offset == 0); offset += chunk) {
    const size_t m = std::min(chunk, count - offset);
    const uint64_t buffer = buffers_++;
    for (int j = 0; j < size_; ++j) {
      copy_bytes(slot(rank_, buffer) + j * m * width, in + (j * count + offset) * width, m * width);
    }
    step("reduce_scatter");
    for (int k = 0; k < size_; ++k) sources[k] = slot(k, buffer) + rank_ * m * width;
    unsigned char* target = out + offset * width;
    if (m) reduce(type, sources.data(), size_, &target, 1, m, op);
    if (count == 0) break;
  }
}

}  // namespace neuron_rt
