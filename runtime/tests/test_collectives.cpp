#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/collectives.h"
#include "runtime/error.h"

using namespace neuron_rt;
using Milliseconds = std::chrono::milliseconds;

namespace {

// The ranks of a test are threads of this process sharing this store.
class MemoryRendezvous : public Rendezvous {
 public:
  void set(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> lock(mutex_);
    values_[key] = rewrite ? rewrite(key, value) : value;
    changed_.notify_all();
  }
  std::string get(const std::string& key, Milliseconds timeout) override {
    if (before_get) before_get(key);
    std::unique_lock<std::mutex> lock(mutex_);
    if (!changed_.wait_for(lock, timeout, [&] { return values_.count(key) > 0; })) {
      throw Error(ErrorCode::kTimeout, "no " + key);
    }
    return values_[key];
  }
  std::function<std::string(const std::string&, const std::string&)> rewrite;
  std::function<void(const std::string&)> before_get;

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
};

// A store in a directory: ranks in other processes.
class FileRendezvous : public Rendezvous {
 public:
  explicit FileRendezvous(std::string dir) : dir_(std::move(dir)) {}
  void set(const std::string& key, const std::string& value) override {
    const std::string path = file(key);
    { std::ofstream(path + ".tmp") << value; }
    std::rename((path + ".tmp").c_str(), path.c_str());
  }
  std::string get(const std::string& key, Milliseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      std::ifstream in(file(key));
      if (in) return std::string(std::istreambuf_iterator<char>(in), {});
      if (std::chrono::steady_clock::now() > deadline) throw Error(ErrorCode::kTimeout, "no " + key);
      std::this_thread::sleep_for(Milliseconds(1));
    }
  }

 private:
  std::string file(std::string key) const {
    for (char& c : key) {
      if (c == '/') c = '_';
    }
    return dir_ + "/" + key;
  }
  std::string dir_;
};

ShmGroup::Options small_slots(Milliseconds timeout = Milliseconds(20000)) {
  ShmGroup::Options options;
  options.slot_bytes = 4096;  // every message of more than 4 KiB goes in several chunks
  options.timeout = timeout;
  return options;
}

// Runs body(rank, group) on `size` threads, each with its own group over one segment.
void run_ranks(int size, const std::function<void(int, ShmGroup&)>& body, ShmGroup::Options options = small_slots(),
               MemoryRendezvous* rendezvous = nullptr) {
  MemoryRendezvous own;
  MemoryRendezvous& store = rendezvous ? *rendezvous : own;
  std::vector<std::thread> threads;
  std::vector<std::string> failures(static_cast<size_t>(size));
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        auto group = ShmGroup::create(store, "t/", rank, size, options);
        ASSERT_NE(group, nullptr);
        body(rank, *group);
      } catch (const std::exception& e) {
        failures[rank] = e.what();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int rank = 0; rank < size; ++rank) EXPECT_EQ(failures[rank], "") << "rank " << rank;
}

float input_value(int rank, size_t i) { return static_cast<float>((static_cast<int>(i) * 7 + rank * 3) % 11) - 5.0f + 0.25f * rank; }

}  // namespace

TEST(ShmCollectives, AllReduceOfFloatsEqualsTheSerialReductionForEveryOpAcrossChunks) {
  for (int size : {2, 3, 4}) {
    for (ReduceKind op : {ReduceKind::kSum, ReduceKind::kProduct, ReduceKind::kMin, ReduceKind::kMax}) {
      for (size_t count : {size_t(0), size_t(1), size_t(3), size_t(1025), size_t(5000)}) {  // 5000 floats: 5 chunks
        run_ranks(size, [&](int rank, ShmGroup& group) {
          std::vector<float> data(count);
          for (size_t i = 0; i < count; ++i) data[i] = input_value(rank, i);
          group.all_reduce(data.data(), count, ElementType::kFloat32, op);
          for (size_t i = 0; i < count; ++i) {
            float expected = input_value(0, i);
            for (int r = 1; r < size; ++r) {
              const float v = input_value(r, i);
              expected = op == ReduceKind::kSum ? expected + v : op == ReduceKind::kProduct ? expected * v
                       : op == ReduceKind::kMin ? std::min(expected, v) : std::max(expected, v);
            }
            ASSERT_EQ(data[i], expected) << "size " << size << " op " << int(op) << " element " << i;
          }
        });
      }
    }
  }
}

TEST(ShmCollectives, IntegersWrapAroundAndCompareSigned) {
  run_ranks(3, [](int rank, ShmGroup& group) {
    std::vector<int8_t> bytes{100, -100, int8_t(rank - 1)};
    group.all_reduce(bytes.data(), bytes.size(), ElementType::kInt8, ReduceKind::kSum);
    EXPECT_EQ(bytes, (std::vector<int8_t>{int8_t(300 - 256), int8_t(-300 + 256), 0}));
    std::vector<int8_t> low{int8_t(-rank), 5};
    group.all_reduce(low.data(), low.size(), ElementType::kInt8, ReduceKind::kMin);
    EXPECT_EQ(low, (std::vector<int8_t>{-2, 5}));
    std::vector<int64_t> big{INT64_MAX, int64_t(rank) << 40};
    group.all_reduce(big.data(), big.size(), ElementType::kInt64, ReduceKind::kSum);
    EXPECT_EQ(big[0], int64_t(uint64_t(INT64_MAX) * 3));
    EXPECT_EQ(big[1], int64_t(3) << 40);
    std::vector<int32_t> bits{1 << rank, -1};
    group.all_reduce(bits.data(), bits.size(), ElementType::kInt32, ReduceKind::kBitOr);
    EXPECT_EQ(bits, (std::vector<int32_t>{7, -1}));
    std::vector<uint8_t> flags{uint8_t(rank == 1), 1, 0};  // bool: sum and max are or, min and product and
    std::vector<uint8_t> both = flags;
    group.all_reduce(flags.data(), flags.size(), ElementType::kBool, ReduceKind::kSum);
    group.all_reduce(both.data(), both.size(), ElementType::kBool, ReduceKind::kProduct);
    EXPECT_EQ(flags, (std::vector<uint8_t>{1, 1, 0}));
    EXPECT_EQ(both, (std::vector<uint8_t>{0, 1, 0}));
  });
}

TEST(ShmCollectives, SixteenBitFloatsAccumulateInFloat32AndRoundOnce) {
  // bfloat16 1.0 + 2^-8 + 2^-8: summed one step at a time, each 2^-8 is half an ulp of 1.0
  // and rounds away (ties to even); accumulated in float32 the total is 1 + 2^-7 (0x3f81).
  run_ranks(3, [](int rank, ShmGroup& group) {
    std::vector<uint16_t> bf16{uint16_t(rank == 0 ? 0x3f80 : 0x3b80)};
    group.all_reduce(bf16.data(), 1, ElementType::kBFloat16, ReduceKind::kSum);
    EXPECT_EQ(bf16[0], 0x3f81);
    // float16: 1.0 (0x3c00) + 2 x 2^-11 (0x1000, half an ulp each): 1 + 2^-10, not 1.0
    std::vector<uint16_t> f16{uint16_t(rank == 0 ? 0x3c00 : 0x1000), 0x7c00, 0x0001};  // 1, inf, smallest subnormal
    group.all_reduce(f16.data(), f16.size(), ElementType::kFloat16, ReduceKind::kSum);
    EXPECT_EQ(f16[0], 0x3c01);  // 1 + 2 x 2^-11 = 1 + 2^-10 exactly
    EXPECT_EQ(f16[1], 0x7c00);
    EXPECT_EQ(f16[2], 0x0003);
  });
}

TEST(ShmCollectives, AllGatherBroadcastAndReduceScatterAcrossChunks) {
  for (int size : {2, 4}) {
    for (size_t count : {size_t(0), size_t(5), size_t(3000)}) {
      run_ranks(size, [&](int rank, ShmGroup& group) {
        std::vector<float> mine(count);
        for (size_t i = 0; i < count; ++i) mine[i] = input_value(rank, i);
        std::vector<float> gathered(count * size, -1.0f);
        group.all_gather(mine.data(), gathered.data(), count * sizeof(float));
        for (int r = 0; r < size; ++r) {
          for (size_t i = 0; i < count; ++i) ASSERT_EQ(gathered[r * count + i], input_value(r, i));
        }
        std::vector<float> shared = mine;
        group.broadcast(shared.data(), count * sizeof(float), size - 1);
        for (size_t i = 0; i < count; ++i) ASSERT_EQ(shared[i], input_value(size - 1, i));
        std::vector<float> blocks(count * size);  // block j of rank r: input_value(r * 10 + j, i)
        for (int j = 0; j < size; ++j) {
          for (size_t i = 0; i < count; ++i) blocks[j * count + i] = input_value(rank * 10 + j, i);
        }
        std::vector<float> reduced(count, -1.0f);
        group.reduce_scatter(blocks.data(), reduced.data(), count, ElementType::kFloat32, ReduceKind::kSum);
        for (size_t i = 0; i < count; ++i) {
          float expected = input_value(rank, i);
          for (int r = 1; r < size; ++r) expected += input_value(r * 10 + rank, i);
          ASSERT_EQ(reduced[i], expected) << "rank " << rank << " element " << i;
        }
        group.barrier();
      });
    }
  }
}

TEST(ShmCollectives, TheSegmentIsPrivateAndUnlinkedOnceEveryRankMappedIt) {
  MemoryRendezvous store;
  std::string name;
  mode_t mode = 0;
  bool existed = false;
  store.before_get = [&](const std::string& key) {  // rank 1, before it maps the segment
    if (key != "t/segment") return;
    std::this_thread::sleep_for(Milliseconds(50));
    for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
      if (entry.path().filename().string().rfind("neuron-sim-" + std::to_string(getpid()), 0) == 0) {
        struct stat info;
        if (stat(entry.path().c_str(), &info) == 0) {
          existed = true;
          mode = info.st_mode & 0777;
          name = "/" + entry.path().filename().string();
        }
      }
    }
  };
  std::vector<std::string> names(2);
  run_ranks(2, [&](int rank, ShmGroup& group) {
    names[rank] = group.segment_name();
    group.barrier();
  }, small_slots(), &store);
  ASSERT_TRUE(existed);
  EXPECT_EQ(mode, 0600u);
  EXPECT_EQ(names[0], name);
  EXPECT_FALSE(std::filesystem::exists("/dev/shm" + name)) << name << " left behind";
}

TEST(ShmCollectives, ATimeoutNamesTheRanksItWaitedFor) {
  std::vector<std::string> errors(3);
  run_ranks(3, [&](int rank, ShmGroup& group) {
    if (rank == 2) return;  // never calls the all_reduce
    float value = 1.0f;
    try {
      group.all_reduce(&value, 1, ElementType::kFloat32, ReduceKind::kSum);
    } catch (const Error& e) {
      errors[rank] = e.what();
    }
  }, small_slots(Milliseconds(300)));
  for (int rank : {0, 1}) {
    EXPECT_NE(errors[rank].find("rank(s) 2 (pid"), std::string::npos) << errors[rank];
    EXPECT_NE(errors[rank].find("all_reduce"), std::string::npos) << errors[rank];
  }
}

TEST(ShmCollectives, AbortFailsTheOtherRanksAtOnceAndEveryLaterCall) {
  std::string error, later;
  std::chrono::steady_clock::duration waited{};
  run_ranks(2, [&](int rank, ShmGroup& group) {
    if (rank == 1) {
      std::this_thread::sleep_for(Milliseconds(100));
      group.abort("a test gave up");
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    try {
      group.barrier();
    } catch (const Error& e) {
      error = e.what();
    }
    waited = std::chrono::steady_clock::now() - start;
    try {
      group.barrier();
    } catch (const Error& e) {
      later = e.what();
    }
  }, small_slots(Milliseconds(20000)));
  EXPECT_NE(error.find("the group failed on rank 1: rank 1 aborted the group: a test gave up"), std::string::npos) << error;
  EXPECT_LT(waited, std::chrono::seconds(5));
  EXPECT_EQ(later, error);
}

TEST(ShmCollectives, ARankWhoseProcessExitedIsNamedWithinMilliseconds) {
  char dir[] = "/tmp/shm-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // rank 1: joins the group, then exits without calling the barrier
    FileRendezvous store(dir);
    try {
      auto group = ShmGroup::create(store, "t/", 1, 2, small_slots());
    } catch (...) {
      _exit(3);
    }
    _exit(0);
  }
  FileRendezvous store(dir);
  auto group = ShmGroup::create(store, "t/", 0, 2, small_slots(Milliseconds(20000)));
  ASSERT_NE(group, nullptr);
  // Not reaped yet while rank 0 waits: a zombie counts as exited (a harness that reads one
  // rank's output before reaping the other leaves it so).
  const auto start = std::chrono::steady_clock::now();
  std::string error;
  try {
    group->barrier();
  } catch (const Error& e) {
    error = e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_EQ(WEXITSTATUS(status), 0);
  EXPECT_NE(error.find("rank 1 (pid " + std::to_string(child) + ") exited"), std::string::npos) << error;
  std::filesystem::remove_all(dir);
}

TEST(ShmCollectives, RanksOnOtherHostsGetNoGroupAndAStaleSegmentIsRemoved) {
  MemoryRendezvous store;
  store.rewrite = [](const std::string& key, const std::string& value) {
    return key == "t/host/1" ? value + "-elsewhere" : value;
  };
  bool made[2] = {true, true};  // not vector<bool>: its bits share a word between the threads
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] { made[rank] = ShmGroup::create(store, "t/", rank, 2, small_slots()) != nullptr; });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_FALSE(made[0]);
  EXPECT_FALSE(made[1]);

  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);  // a pid no process has now
  const std::string stale = "/dev/shm/neuron-sim-" + std::to_string(child) + "-0-0";
  { std::ofstream(stale) << "left by a rank 0 that died"; }
  run_ranks(2, [](int, ShmGroup& group) { group.barrier(); });
  EXPECT_FALSE(std::filesystem::exists(stale));
}

TEST(ShmCollectives, ACallerThatKnowsTheHostsSkipsTheHostKeyExchange) {
  // The process group exchanged host keys already (distributed.py): with Options::same_host
  // no key goes through the store, even one that would say "elsewhere".
  MemoryRendezvous store;
  std::atomic<int> host_keys{0};
  store.rewrite = [&](const std::string& key, const std::string& value) {
    if (key.rfind("t/host/", 0) == 0) ++host_keys;
    return key == "t/host/1" ? value + "-elsewhere" : value;
  };
  ShmGroup::Options options = small_slots();
  options.same_host = true;
  run_ranks(2, [](int, ShmGroup& group) { group.barrier(); }, options, &store);
  EXPECT_EQ(host_keys.load(), 0);
}

TEST(ShmCollectives, BadSlotSizeIsRefusedWithTheSetting) {
  MemoryRendezvous store;
  ShmGroup::Options options;
  options.slot_bytes = 1000;
  try {
    ShmGroup::create(store, "t/", 0, 2, options);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("NEURON_SIM_SHM_SLOT_BYTES=1000"), std::string::npos) << e.what();
  }
}

namespace {

// A rank's "device memory": a shared-memory file mapped in this process.
struct SharedArena {
  explicit SharedArena(size_t bytes) : length(bytes) {
    fd = memfd_create("test-hbm", MFD_CLOEXEC);
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
    base = static_cast<unsigned char*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  }
  ~SharedArena() {
    munmap(base, length);
    close(fd);
  }
  ShmGroup::Options options() const {
    ShmGroup::Options o = small_slots();
    o.memory_fd = fd;
    o.memory_base = base;
    o.memory_length = length;
    return o;
  }
  int fd;
  size_t length;
  unsigned char* base;
};

}  // namespace

TEST(ShmCollectives, ZeroCopyBetweenTensorsInSharedDeviceMemoryAndSlotsWhenOneIsNot) {
  const int size = 3;
  const size_t count = 5000;
  std::vector<std::unique_ptr<SharedArena>> arenas;
  for (int r = 0; r < size; ++r) arenas.push_back(std::make_unique<SharedArena>(1 << 20));
  MemoryRendezvous store;
  std::vector<std::thread> threads;
  std::vector<std::string> failures(size);
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        auto group = ShmGroup::create(store, "t/", rank, size, arenas[rank]->options());
        ASSERT_TRUE(group->zero_copy());
        float* data = reinterpret_cast<float*>(arenas[rank]->base);
        for (size_t i = 0; i < count; ++i) data[i] = input_value(rank, i);
        group->all_reduce(data, count, ElementType::kFloat32, ReduceKind::kSum);
        for (size_t i = 0; i < count; ++i) {
          float expected = input_value(0, i);
          for (int r = 1; r < size; ++r) expected += input_value(r, i);
          ASSERT_EQ(data[i], expected) << "rank " << rank << " element " << i;
        }
        EXPECT_EQ(group->zero_copy_calls(), 1u);
        float* gathered = data + count;  // all_gather, input aliasing its block of the output
        for (size_t i = 0; i < count; ++i) gathered[rank * count + i] = input_value(rank, i);
        group->all_gather(gathered + rank * count, gathered, count * sizeof(float));
        for (int r = 0; r < size; ++r) {
          for (size_t i = 0; i < count; ++i) ASSERT_EQ(gathered[r * count + i], input_value(r, i));
        }
        float* blocks = gathered + size * count;  // reduce_scatter into memory outside the file
        for (int j = 0; j < size; ++j) {
          for (size_t i = 0; i < count; ++i) blocks[j * count + i] = input_value(rank * 10 + j, i);
        }
        std::vector<float> reduced(count);
        group->reduce_scatter(blocks, reduced.data(), count, ElementType::kFloat32, ReduceKind::kMax);
        for (size_t i = 0; i < count; ++i) {
          float expected = input_value(rank, i);
          for (int r = 1; r < size; ++r) expected = std::max(expected, input_value(r * 10 + rank, i));
          ASSERT_EQ(reduced[i], expected);
        }
        group->broadcast(data, count * sizeof(float), 1);
        EXPECT_EQ(group->zero_copy_calls(), 4u);
        // One rank's tensor in ordinary memory: every rank takes the slots for that call.
        std::vector<float> local(count);
        float* mine = rank == 2 ? local.data() : data;
        for (size_t i = 0; i < count; ++i) mine[i] = input_value(rank, i);
        group->all_reduce(mine, count, ElementType::kFloat32, ReduceKind::kSum);
        for (size_t i = 0; i < count; ++i) {
          float expected = input_value(0, i);
          for (int r = 1; r < size; ++r) expected += input_value(r, i);
          ASSERT_EQ(mine[i], expected);
        }
        EXPECT_EQ(group->zero_copy_calls(), 4u);
      } catch (const std::exception& e) {
        failures[rank] = e.what();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int rank = 0; rank < size; ++rank) EXPECT_EQ(failures[rank], "") << "rank " << rank;
}

TEST(ShmCollectives, ARankSpinsBeforeItSleepsOnlyWhenEveryLocalRankHasACore) {
  unsetenv("NEURON_SIM_COLLECTIVE_SPIN_US");
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  EXPECT_EQ(ShmGroup::spin_default(cores), ShmGroup::kSpinWithCores);
  EXPECT_EQ(ShmGroup::spin_default(1), ShmGroup::kSpinWithCores);
  EXPECT_EQ(ShmGroup::spin_default(cores + 1), std::chrono::microseconds(0));  // a spinning rank would take a core
  setenv("NEURON_SIM_COLLECTIVE_SPIN_US", "35", 1);
  EXPECT_EQ(ShmGroup::spin_default(cores + 1), std::chrono::microseconds(35));
  for (const char* bad : {"-1", "fast", "10us", ""}) {
    setenv("NEURON_SIM_COLLECTIVE_SPIN_US", bad, 1);
    try {
      ShmGroup::spin_default(1);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("NEURON_SIM_COLLECTIVE_SPIN_US"), std::string::npos) << e.what();
    }
  }
  unsetenv("NEURON_SIM_COLLECTIVE_SPIN_US");
  // Spinning or not, the ranks agree: a long spin with ranks that arrive late still completes.
  for (auto spin : {std::chrono::microseconds(0), std::chrono::microseconds(5000)}) {
    ShmGroup::Options options = small_slots();
    options.spin = spin;
    run_ranks(2, [&](int rank, ShmGroup& group) {
      for (int i = 0; i < 20; ++i) {
        if ((i + rank) % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
        float value = static_cast<float>(rank + i);
        group.all_reduce(&value, 1, ElementType::kFloat32, ReduceKind::kSum);
        EXPECT_EQ(value, static_cast<float>(1 + 2 * i));
      }
    }, options);
  }
}
