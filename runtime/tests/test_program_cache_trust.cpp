// Note [Trusting the program cache]: what another user could have written is refused,
// reported (path, owner, mode, fix) and never read or deleted; what the cache makes is private.
// Tests that need files of another user make them with chown, which needs root: they skip
// (saying so) otherwise.
#include <gtest/gtest.h>

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "runtime/program.h"
#include "runtime/program_cache.h"
#include "runtime/tests/program_fuzzing.h"

using namespace neuron_rt;

namespace {

constexpr uid_t kOtherUser = 65534;  // nobody
const std::string kKey = "0123456789abcdef0123456789abcdef";

std::string temporary_directory() {
  char path[] = "/tmp/neuron_cache_trust_XXXXXX";
  return mkdtemp(path);
}

mode_t mode_of(const std::string& path) {
  struct stat info {};
  EXPECT_EQ(::lstat(path.c_str(), &info), 0) << path;
  return info.st_mode & 07777;
}

bool exists(const std::string& path) {
  struct stat info {};
  return ::lstat(path.c_str(), &info) == 0;
}

std::string program() { return encode_program(fuzzing::seed_programs()[0]); }

// A cache whose reports are kept.
struct Reporting {
  explicit Reporting(const std::string& directory)
      : cache(directory, 8, [this](const std::string& message) { reports.push_back(message); }) {}
  std::vector<std::string> reports;
  ProgramCache cache;
  std::string joined() const {
    std::string all;
    for (const auto& r : reports) all += r + "\n";
    return all;
  }
};

// A directory holding a well-formed entry for kKey, written by the cache itself.
std::string directory_with_entry() {
  const std::string dir = temporary_directory() + "/cache";
  ProgramCache(dir, 4).put(kKey, program());
  return dir;
}

#define NEEDS_ROOT() \
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make files of another user (chown)"

}  // namespace

TEST(ProgramCacheTrust, TheDefaultDirectoryIsPerUser) {
  const char* saved = std::getenv("TMPDIR");
  const std::string saved_value = saved ? saved : "";
  ::unsetenv("TMPDIR");
  const std::string plain = ProgramCache::default_directory();
  EXPECT_EQ(plain.rfind("/tmp/neff_cache_", 0), 0u) << plain;
  EXPECT_NE(plain, "/tmp/neff_cache");  // TorchNeuron's shared default is not ours
  if (::geteuid() == 0) EXPECT_EQ(plain, "/tmp/neff_cache_root");
  ::setenv("TMPDIR", "/var/tmp/", 1);
  EXPECT_EQ(ProgramCache::default_directory(), "/var/tmp" + plain.substr(4));
  if (saved) ::setenv("TMPDIR", saved_value.c_str(), 1); else ::unsetenv("TMPDIR");
}

TEST(ProgramCacheTrust, WhatTheCacheMakesIsPrivate) {
  const std::string dir = temporary_directory() + "/a/b";  // missing parents too
  ::umask(022);
  ProgramCache(dir, 4).put(kKey, program());
  EXPECT_EQ(mode_of(dir), 0700u);
  EXPECT_EQ(mode_of(dir.substr(0, dir.size() - 2)), 0700u);
  EXPECT_EQ(mode_of(dir + "/01"), 0700u);
  EXPECT_EQ(mode_of(dir + "/01/23"), 0700u);
  EXPECT_EQ(mode_of(ProgramCache::path_for(dir, kKey)), 0600u);
  bool from_disk = false;
  EXPECT_EQ(ProgramCache(dir, 4).get(kKey, &from_disk).value_or(""), program());
  EXPECT_TRUE(from_disk);
}

TEST(ProgramCacheTrust, ADirectoryOthersCanWriteIsRefused) {
  const std::string dir = directory_with_entry();
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
  Reporting reader(dir);
  EXPECT_FALSE(reader.cache.get(kKey).has_value());  // a well-formed entry, but in a directory anyone can write
  ASSERT_EQ(reader.reports.size(), 1u);
  const std::string& message = reader.reports[0];
  EXPECT_NE(message.find(dir), std::string::npos) << message;
  EXPECT_NE(message.find("mode 0777"), std::string::npos) << message;
  EXPECT_NE(message.find("owner "), std::string::npos) << message;
  EXPECT_NE(message.find("chmod go-w " + dir), std::string::npos) << message;
  EXPECT_TRUE(exists(ProgramCache::path_for(dir, kKey)));  // never deleted
  reader.cache.put(kKey, program());   // memory only, and the same refusal is not reported again
  reader.cache.get("fedcba9876543210fedcba9876543210");
  EXPECT_EQ(reader.reports.size(), 1u) << reader.joined();
  EXPECT_TRUE(reader.cache.get(kKey).has_value());  // from memory
  ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);  // the fix the message names
  Reporting fixed(dir);
  EXPECT_TRUE(fixed.cache.get(kKey).has_value()) << fixed.joined();
}

TEST(ProgramCacheTrust, ALevelOthersCanWriteIsRefused) {
  const std::string dir = directory_with_entry();
  ASSERT_EQ(::chmod((dir + "/01/23").c_str(), 0775), 0);
  Reporting reader(dir);
  EXPECT_FALSE(reader.cache.get(kKey).has_value());
  EXPECT_NE(reader.joined().find("mode 0775"), std::string::npos) << reader.joined();
}

TEST(ProgramCacheTrust, ADirectoryOfAnotherUserIsRefused) {
  NEEDS_ROOT();
  const std::string dir = directory_with_entry();
  ASSERT_EQ(::chown(dir.c_str(), kOtherUser, kOtherUser), 0);
  Reporting reader(dir);
  EXPECT_FALSE(reader.cache.get(kKey).has_value());
  const std::string message = reader.joined();
  EXPECT_NE(message.find("belongs to "), std::string::npos) << message;
  EXPECT_NE(message.find("uid 65534"), std::string::npos) << message;
  EXPECT_NE(message.find("TORCH_NEURONX_NEFF_CACHE_DIR"), std::string::npos) << message;
  reader.cache.put("fedcba9876543210fedcba9876543210", program());
  EXPECT_FALSE(exists(ProgramCache::path_for(dir, "fedcba9876543210fedcba9876543210")));  // nothing written there
}

TEST(ProgramCacheTrust, AnEntryOfAnotherUserIsRefusedThenReplaced) {
  NEEDS_ROOT();
  const std::string dir = directory_with_entry();
  const std::string path = ProgramCache::path_for(dir, kKey);
  ASSERT_EQ(::chown(path.c_str(), kOtherUser, kOtherUser), 0);
  Reporting reader(dir);
  EXPECT_FALSE(reader.cache.get(kKey).has_value());
  const std::string message = reader.joined();
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("uid 65534"), std::string::npos) << message;
  EXPECT_NE(message.find("mode 0600"), std::string::npos) << message;
  EXPECT_NE(message.find("rm " + path), std::string::npos) << message;
  EXPECT_TRUE(exists(path));  // refused, not deleted
  reader.cache.put(kKey, program());  // the program compiled again replaces it
  struct stat info {};
  ASSERT_EQ(::stat(path.c_str(), &info), 0);
  EXPECT_EQ(info.st_uid, ::geteuid());
  Reporting again(dir);
  EXPECT_TRUE(again.cache.get(kKey).has_value()) << again.joined();
}

TEST(ProgramCacheTrust, AnEntryOthersCanWriteIsRefused) {
  const std::string dir = directory_with_entry();
  const std::string path = ProgramCache::path_for(dir, kKey);
  ASSERT_EQ(::chmod(path.c_str(), 0666), 0);
  Reporting reader(dir);
  EXPECT_FALSE(reader.cache.get(kKey).has_value());
  EXPECT_NE(reader.joined().find("mode 0666"), std::string::npos) << reader.joined();
  EXPECT_TRUE(exists(path));
}

TEST(ProgramCacheTrust, SymbolicLinksAreNotFollowedBelowTheDirectory) {
  const std::string dir = directory_with_entry();
  const std::string elsewhere = directory_with_entry();
  const std::string path = ProgramCache::path_for(dir, kKey);
  // The entry as a link to a well-formed entry elsewhere.
  ASSERT_EQ(::unlink(path.c_str()), 0);
  ASSERT_EQ(::symlink(ProgramCache::path_for(elsewhere, kKey).c_str(), path.c_str()), 0);
  Reporting reader(dir);
  EXPECT_FALSE(reader.cache.get(kKey).has_value());
  EXPECT_NE(reader.joined().find("symbolic link"), std::string::npos) << reader.joined();
  // A level as a link to another directory.
  const std::string dir2 = directory_with_entry();
  ASSERT_EQ(::rename((dir2 + "/01").c_str(), (dir2 + "/moved").c_str()), 0);
  ASSERT_EQ(::symlink((dir2 + "/moved").c_str(), (dir2 + "/01").c_str()), 0);
  Reporting reader2(dir2);
  EXPECT_FALSE(reader2.cache.get(kKey).has_value());
  EXPECT_NE(reader2.joined().find("not a directory"), std::string::npos) << reader2.joined();
}

TEST(ProgramCacheTrust, ADirectoryInsideAParentOthersCanWriteIsRefusedUnlessSticky) {
  const std::string parent = temporary_directory();
  const std::string dir = parent + "/cache";
  ProgramCache(dir, 4).put(kKey, program());
  ASSERT_EQ(::chmod(parent.c_str(), 0777), 0);
  Reporting reader(dir);
  EXPECT_FALSE(reader.cache.get(kKey).has_value());
  EXPECT_NE(reader.joined().find("is inside " + parent), std::string::npos) << reader.joined();
  ASSERT_EQ(::chmod(parent.c_str(), 01777), 0);  // as /tmp: others cannot rename what is ours
  Reporting sticky(dir);
  EXPECT_TRUE(sticky.cache.get(kKey).has_value()) << sticky.joined();
}

TEST(ProgramCacheTrust, ADirectoryThatIsALinkToAnotherUsersDirectoryIsRefused) {
  NEEDS_ROOT();
  const std::string theirs = directory_with_entry();
  ASSERT_EQ(::chown(theirs.c_str(), kOtherUser, kOtherUser), 0);
  const std::string link = temporary_directory() + "/cache";
  ASSERT_EQ(::symlink(theirs.c_str(), link.c_str()), 0);
  Reporting reader(link);
  EXPECT_FALSE(reader.cache.get(kKey).has_value());
  EXPECT_NE(reader.joined().find("uid 65534"), std::string::npos) << reader.joined();
}

TEST(ProgramCacheTrust, KeysCannotReachOutsideTheDirectory) {
  const std::string dir = temporary_directory();
  ProgramCache cache(dir, 4);
  for (const std::string key : {"../../../tmp/evil", "ab/../../x", "a b", "", "x.neff"}) {
    try {
      cache.put(key, program());
      ADD_FAILURE() << "key '" << key << "' was accepted";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
    }
    EXPECT_THROW(cache.get(key), Error) << key;
  }
  ProgramCache memory_only("", 4);  // without a directory a key is only a name
  memory_only.put("a/b", "x");
  EXPECT_TRUE(memory_only.get("a/b").has_value());
}
