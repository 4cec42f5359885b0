// Note [Program cache] and Note [Trusting the program cache] (program_cache.h).
#include "program_cache.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "error.h"
#include "metrics.h"
#include "program.h"

namespace neuron_rt {

namespace {

// A file descriptor, closed when it goes.
class Descriptor {
 public:
  explicit Descriptor(int fd = -1) : fd_(fd) {}
  Descriptor(Descriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Descriptor& operator=(Descriptor&& other) noexcept {
    reset(std::exchange(other.fd_, -1));
    return *this;
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  ~Descriptor() { reset(); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }

 private:
  int fd_;
};

std::string user_name(uid_t uid) {
  std::vector<char> buffer(16384);
  struct passwd entry {};
  struct passwd* found = nullptr;
  if (::getpwuid_r(uid, &entry, buffer.data(), buffer.size(), &found) == 0 && found && found->pw_name &&
      found->pw_name[0]) {
    return found->pw_name;
  }
  return "";
}

// "alice (uid 1000)", or "uid 1000" for a uid without a name.
std::string who(uid_t uid) {
  const std::string name = user_name(uid);
  return name.empty() ? "uid " + std::to_string(uid) : name + " (uid " + std::to_string(uid) + ")";
}

std::string mode_text(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof(text), "%04o", unsigned(mode & 07777));
  return text;
}

std::string owner_and_mode(const struct stat& info) {
  return "owner " + who(info.st_uid) + ", mode " + mode_text(info.st_mode);
}

const char* const kWhyItMatters =
    "(a program written by someone else would run with your rights, and could compute anything)";

// Why a directory of the cache (the cache's own, or a <k[0:2]>/<k[2:4]> level) may not be
// used; empty when it may.
std::string directory_refusal(const struct stat& info, const std::string& path) {
  const uid_t me = ::geteuid();
  if (!S_ISDIR(info.st_mode)) return "the program cache directory " + path + " is not a directory; it is not used";
  if (info.st_uid != me) {
    const std::string fallback = ProgramCache::default_directory();
    return "the program cache directory " + path + " belongs to " + who(info.st_uid) + ", not to you (" + who(me) +
           "), mode " + mode_text(info.st_mode) + ": its programs are not used " + kWhyItMatters +
           ". Compiled programs stay in memory only. Fix: set TORCH_NEURONX_NEFF_CACHE_DIR to a directory only you "
           "can write" +
           (path.rfind(fallback, 0) == 0 ? " (this is under the per-user default, which someone else made: have it removed)"
                                         : " (or unset it: the default, " + fallback + ", is per user)");
  }
  if (info.st_mode & 022) {
    return "the program cache directory " + path + " (" + owner_and_mode(info) +
           ") can be written by group or others: its programs are not used " + kWhyItMatters +
           ". Compiled programs stay in memory only. Fix: chmod go-w " + path;
  }
  return "";
}

// Why an entry may not be used; empty when it may.
std::string entry_refusal(const struct stat& info, const std::string& path) {
  const uid_t me = ::geteuid();
  const std::string consequence = ": it is not used " + std::string(kWhyItMatters) +
                                  "; the graph is compiled again, and its new entry replaces this one";
  if (!S_ISREG(info.st_mode)) return "the program cache entry " + path + " is not a regular file" + consequence;
  if (info.st_uid != me) {
    return "the program cache entry " + path + " belongs to " + who(info.st_uid) + ", not to you (" + who(me) +
           "), mode " + mode_text(info.st_mode) + consequence + ". Fix: rm " + path;
  }
  if (info.st_mode & 022) {
    return "the program cache entry " + path + " (" + owner_and_mode(info) + ") can be written by group or others" +
           consequence + ". Fix: rm " + path;
  }
  return "";
}

// Why the ancestors of `real_path` (absolute, no symbolic links) make it unsafe; empty when
// none does. An ancestor another user can write could replace the directory, unless it is
// sticky (then only the owner of an entry may rename or remove it).
std::string ancestor_refusal(const std::string& real_path, const std::string& shown_path) {
  const uid_t me = ::geteuid();
  for (size_t end = 0; end < real_path.size(); end = real_path.find('/', end + 1)) {
    const std::string ancestor = end ? real_path.substr(0, end) : "/";
    struct stat info {};
    if (::stat(ancestor.c_str(), &info) != 0) {
      return "the program cache directory " + shown_path + ": cannot check its parent " + ancestor + ": " +
             std::strerror(errno);
    }
    const bool others_write = (info.st_mode & 022) != 0 && (info.st_mode & S_ISVTX) == 0;
    if ((info.st_uid != 0 && info.st_uid != me) || others_write) {
      return "the program cache directory " + shown_path + " is inside " + ancestor + " (" + owner_and_mode(info) +
             "), which " + (others_write ? "group or others can write" : "belongs to someone else") +
             " (they could replace the cache directory): its programs are not used " + kWhyItMatters +
             ". Compiled programs stay in memory only. Fix: set TORCH_NEURONX_NEFF_CACHE_DIR to a directory whose "
             "parents only you or root can write (the per-user default, " + ProgramCache::default_directory() +
             ", is one)";
    }
  }
  return "";
}

bool valid_key(const std::string& key) {
  if (key.empty() || key.size() > 200) return false;
  for (char c : key) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

void check_key(const std::string& key) {
  if (!valid_key(key)) {
    throw Error(ErrorCode::kInvalidArgument, "program cache key '" + key +
                                                 "' is not a file name of letters, digits, '_' and '-' (1 to 200 of them)");
  }
}

// `path` and every missing parent, made 0700. Existing ones are left as they are (checked later).
bool make_directories(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      const std::string part = path.substr(0, i);
      if (::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) return false;
    }
  }
  return true;
}

std::string temporary_name(const std::string& key) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t seed = std::random_device{}() ^ (uint64_t(std::random_device{}()) << 32);
  std::mt19937_64 mix(seed ^ (uint64_t(::getpid()) << 20) ^ counter.fetch_add(1));
  char suffix[20];
  std::snprintf(suffix, sizeof(suffix), "%016llx", static_cast<unsigned long long>(mix()));
  return "." + key + ".tmp." + suffix;
}

}  // namespace

// One disk access: the cache directory and the two levels of `key`, opened and checked.
// A refusal is reported (by the cache) and the access becomes a miss / a skipped write.
class ProgramCache::Disk {
 public:
  enum class State { kOpen, kMissing, kRefused, kFailed };
  Disk(const std::string& directory, const std::string& key, bool create) : directory_(directory), key_(key) {
    state_ = open(create);
  }
  State state() const { return state_; }
  const std::string& message() const { return message_; }
  bool directory_refused() const { return directory_refused_; }
  int folder() const { return levels_[1].get(); }
  std::string folder_path() const { return directory_ + "/" + level_name(0) + "/" + level_name(1); }
  std::string file_name() const { return key_ + ".neff"; }
  std::string entry_path() const { return folder_path() + "/" + file_name(); }

 private:
  std::string level_name(int level) const {
    if (level == 0) return key_.size() >= 2 ? key_.substr(0, 2) : key_;
    return key_.size() >= 4 ? key_.substr(2, 2) : "00";
  }

  State refuse(const std::string& message, bool directory) {
    message_ = message;
    directory_refused_ = directory;
    return State::kRefused;
  }
  State fail(const std::string& message) {
    message_ = message + ": " + std::strerror(errno);
    return State::kFailed;
  }

  State open(bool create) {
    if (create && !make_directories(directory_)) return fail("cannot make the program cache directory " + directory_);
    Descriptor root(::open(directory_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!root.valid()) {
      if (errno == ENOENT) return State::kMissing;
      return fail("cannot open the program cache directory " + directory_);
    }
    struct stat info {};
    if (::fstat(root.get(), &info) != 0) return fail("cannot inspect " + directory_);
    std::string why = directory_refusal(info, directory_);
    if (!why.empty()) return refuse(why, true);
    char real[PATH_MAX];
    if (!::realpath(directory_.c_str(), real)) return fail("cannot resolve " + directory_);
    why = ancestor_refusal(real, directory_);
    if (!why.empty()) return refuse(why, true);
    int parent = root.get();
    std::string path = directory_;
    for (int level = 0; level < 2; ++level) {
      const std::string name = level_name(level);
      path += "/" + name;
      if (create && ::mkdirat(parent, name.c_str(), 0700) != 0 && errno != EEXIST) {
        return fail("cannot make " + path);
      }
      levels_[level].reset(::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!levels_[level].valid()) {
        if (errno == ENOENT) return State::kMissing;
        if (errno == ELOOP || errno == ENOTDIR) {
          return refuse("the program cache directory " + path + " is not a directory (a symbolic link or a file): "
                        "it is not used " + kWhyItMatters + ". Fix: rm " + path, true);
        }
        return fail("cannot open " + path);
      }
      if (::fstat(levels_[level].get(), &info) != 0) return fail("cannot inspect " + path);
      why = directory_refusal(info, path);
      if (!why.empty()) return refuse(why, true);
      parent = levels_[level].get();
    }
    return State::kOpen;
  }

  const std::string& directory_;
  const std::string& key_;
  Descriptor levels_[2];
  State state_ = State::kFailed;
  std::string message_;
  bool directory_refused_ = false;
};

ProgramCache::ProgramCache(std::string directory, size_t max_entries, std::function<void(const std::string&)> report)
    : directory_(std::move(directory)), max_entries_(max_entries ? max_entries : 1), report_(std::move(report)) {}

std::string ProgramCache::path_for(const std::string& directory, const std::string& key) {
  const std::string a = key.size() >= 2 ? key.substr(0, 2) : key;
  const std::string b = key.size() >= 4 ? key.substr(2, 2) : "00";
  return directory + "/" + a + "/" + b + "/" + key + ".neff";
}

std::string ProgramCache::default_directory() {
  const char* tmpdir = std::getenv("TMPDIR");
  std::string base = tmpdir && tmpdir[0] == '/' ? tmpdir : "/tmp";
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  std::string user = user_name(::geteuid());
  if (user.empty()) user = "uid" + std::to_string(::geteuid());
  for (char& c : user) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
                    c == '.';
    if (!ok) c = '_';
  }
  return (base == "/" ? "" : base) + "/neff_cache_" + user;
}

void ProgramCache::report(const std::string& message) {
  if (report_) report_(message);
}

void ProgramCache::report_directory(const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (message == directory_refusal_) return;
    directory_refusal_ = message;
  }
  report(message);
}

void ProgramCache::insert_locked(const std::string& key, const std::string& payload) {
  auto it = index_.find(key);
  if (it != index_.end()) entries_.erase(it->second);
  entries_.emplace_front(key, payload);
  index_[key] = entries_.begin();
  while (entries_.size() > max_entries_) {
    index_.erase(entries_.back().first);
    entries_.pop_back();
    Metrics::get().increment("CompilationCache.Evictions");
  }
}

std::optional<std::string> ProgramCache::get(const std::string& key, bool* from_disk) {
  if (from_disk) *from_disk = false;
  if (!directory_.empty()) check_key(key);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      entries_.splice(entries_.begin(), entries_, it->second);
      Metrics::get().increment("CompilationCache.InMemoryHits");
      return it->second->second;
    }
  }
  Metrics::get().increment("CompilationCache.InMemoryMisses");
  if (directory_.empty()) return std::nullopt;
  auto miss = [] {
    Metrics::get().increment("CompilationCache.PersistentMisses");
    return std::nullopt;
  };
  Disk disk(directory_, key, /*create=*/false);
  if (disk.state() == Disk::State::kRefused) {
    report_directory(disk.message());
    return miss();
  }
  if (disk.state() != Disk::State::kOpen) return miss();  // nothing stored yet (or unreadable: compiled again)
  {
    std::lock_guard<std::mutex> lock(mutex_);
    directory_refusal_.clear();
  }
  const std::string path = disk.entry_path();
  Descriptor file(::openat(disk.folder(), disk.file_name().c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
  if (!file.valid()) {
    if (errno == ELOOP) {
      report("the program cache entry " + path + " is a symbolic link: it is not used " + kWhyItMatters +
             "; the graph is compiled again, and its new entry replaces this one. Fix: rm " + path);
    }
    return miss();
  }
  struct stat info {};
  if (::fstat(file.get(), &info) != 0) return miss();
  const std::string why = entry_refusal(info, path);
  if (!why.empty()) {
    report(why);
    return miss();
  }
  std::string content(size_t(info.st_size), '\0');
  size_t got = 0;
  while (got < content.size()) {
    const ssize_t n = ::read(file.get(), content.data() + got, content.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += size_t(n);
  }
  content.resize(got);
  std::string payload;
  try {
    payload = unseal_program(content, key);
    decode_program(payload);  // the payload itself must be well formed too
  } catch (const Error& error) {
    report("the program cache entry " + path + " is unusable (" + error.what() + "); deleted, recompiling");
    ::unlinkat(disk.folder(), disk.file_name().c_str(), 0);  // ours (checked above)
    return miss();
  }
  Metrics::get().increment("CompilationCache.PersistentHits");
  if (from_disk) *from_disk = true;
  std::lock_guard<std::mutex> lock(mutex_);
  insert_locked(key, payload);
  return payload;
}

void ProgramCache::put(const std::string& key, const std::string& payload) {
  if (!directory_.empty()) check_key(key);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    insert_locked(key, payload);
  }
  if (directory_.empty()) return;
  Disk disk(directory_, key, /*create=*/true);
  if (disk.state() == Disk::State::kRefused) {
    if (disk.directory_refused()) return report_directory(disk.message());
    return report(disk.message());
  }
  const std::string path = disk.entry_path();
  if (disk.state() != Disk::State::kOpen) {
    return report("could not store the program " + path + ": " + disk.message());
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    directory_refusal_.clear();
  }
  auto fail = [&](const std::string& what) { report("could not store the program " + path + ": " + what + ": " + std::strerror(errno)); };
  std::string temporary;
  Descriptor file;
  for (int attempt = 0; attempt < 16 && !file.valid(); ++attempt) {
    temporary = temporary_name(key);
    file.reset(::openat(disk.folder(), temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!file.valid() && errno != EEXIST) break;
  }
  if (!file.valid()) return fail("cannot make a temporary file in " + disk.folder_path());
  const std::string sealed = seal_program(key, payload);
  size_t written = 0;
  while (written < sealed.size()) {
    const ssize_t n = ::write(file.get(), sealed.data() + written, sealed.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      fail("cannot write");
      ::unlinkat(disk.folder(), temporary.c_str(), 0);
      return;
    }
    written += size_t(n);
  }
  file.reset();
  // Atomic: readers see the old entry or the new one. It replaces whatever had the name,
  // also an entry that was refused (the folder is ours, so that is ours to do).
  if (::renameat(disk.folder(), temporary.c_str(), disk.folder(), disk.file_name().c_str()) != 0) {
    fail("cannot rename into place");
    ::unlinkat(disk.folder(), temporary.c_str(), 0);
  }
}

void ProgramCache::clear_memory() {
  std::lock_guard<std::mutex> lock(mutex_);
  entries_.clear();
  index_.clear();
}

}  // namespace neuron_rt
