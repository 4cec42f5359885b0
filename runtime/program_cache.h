// Note [Program cache]
// ProgramCache keeps compiled programs (Note [Programs], program.h) as TorchNeuron keeps its
// NEFFs: in memory (bounded, least recently used first out) and on disk under a directory as
// <dir>/<key[0:2]>/<key[2:4]>/<key>.neff, sealed (seal_program), written atomically (a
// unique temporary file, then a rename), safe across processes. A damaged entry is reported,
// deleted and treated as a miss (so it is compiled again); an entry is returned only when
// decode_program accepts its payload. Counters go to Metrics ("CompilationCache.InMemoryHits",
// ...). Disk failures are reported, never thrown: the program still runs from memory.
//
// Note [Trusting the program cache]
// A program read from disk runs with the rights of the process that reads it, and a checksum
// proves nothing about who wrote it. So the cache uses only what the current user (the
// effective uid) could have written, as OpenSSH uses only private key files nobody else can
// write:
//  - The default directory is per user, <TMPDIR or /tmp>/neff_cache_<user>, as Inductor's
//    /tmp/torchinductor_<user> (TorchNeuron's /tmp/neff_cache is one directory for every
//    user of the machine). Directories the cache makes are 0700, entries 0600.
//  - On every disk access: the directory and its <k[0:2]>, <k[2:4]> levels must be
//    directories owned by the current user that group and others cannot write; each
//    ancestor of the directory must be owned by root or the current user and not writable by
//    group or others, unless it is sticky (as /tmp: others cannot rename what is ours); an
//    entry must be a regular file (not a symbolic link) owned by the current user that group
//    and others cannot write. Levels below the directory are checked on the opened
//    descriptors (openat with O_NOFOLLOW, fstat), so nothing can be swapped between the
//    check and the use.
//  - What fails a check is refused and reported, naming the path, its owner and mode and the
//    fix. It is never read, and never deleted (it may belong to someone else). A refused
//    directory leaves the cache memory-only; a refused entry is a miss, and the entry written
//    for the program compiled again replaces it.
//  - Keys are file names: letters, digits, '_' and '-' only (Error(kInvalidArgument)
//    otherwise), so that no key reaches outside the directory.
//
// Thread safety: any method may be called from any thread at once.
#pragma once

#include <cstddef>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

namespace neuron_rt {

class ProgramCache {
 public:
  // `directory` empty: memory only. Reports (damaged or refused entries, a refused
  // directory, failed writes) go to `report`; a refused directory is reported once until
  // what is wrong with it changes.
  ProgramCache(std::string directory, size_t max_entries,
               std::function<void(const std::string&)> report = nullptr);
  // The payload under `key`: memory first, then disk. `from_disk` tells which answered.
  std::optional<std::string> get(const std::string& key, bool* from_disk = nullptr);
  // Stores `payload` under `key` in memory and, when a directory is set (and trusted), on disk.
  void put(const std::string& key, const std::string& payload);
  void clear_memory();
  const std::string& directory() const { return directory_; }
  // <directory>/<key[0:2]>/<key[2:4]>/<key>.neff
  static std::string path_for(const std::string& directory, const std::string& key);
  // The per-user default: <TMPDIR, or /tmp>/neff_cache_<user name, or "uid<N>" without one>.
  static std::string default_directory();

 private:
  class Disk;
  void insert_locked(const std::string& key, const std::string& payload);
  void report(const std::string& message);
  void report_directory(const std::string& message);  // once per distinct message
  const std::string directory_;
  const size_t max_entries_;
  std::function<void(const std::string&)> report_;
  std::mutex mutex_;
  std::list<std::pair<std::string, std::string>> entries_;  // most recent first
  std::unordered_map<std::string, std::list<std::pair<std::string, std::string>>::iterator> index_;
  std::string directory_refusal_;  // the last reported refusal of the directory (under mutex_)
};

}  // namespace neuron_rt
