// Checkpoint files beyond one save: temp files of other saves (stale ones are
// removed, live ones kept), the target's permissions and symlinks kept on
// re-save, headers with very many entries, and StateDict's name index.
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "kiln/functional.h"
#include "runtime/serialize/safetensors_test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using test::ScratchDir;

StateDict small_dict(float v) {
  StateDict sd;
  sd.set("w", full({4}, v));
  return sd;
}

unsigned mode_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

// A temp file another save is still writing (it holds the lock) is left alone;
// once nobody holds it, the next save removes it. Other names are never touched.
TEST(SafetensorsFiles, OnlyUnlockedTempFilesOfTheTargetAreRemoved) {
  ScratchDir dir;
  const std::string path = dir.file("m.safetensors");
  const std::string live = path + ".tmp.12345.0123456789abcdef";
  const std::vector<std::string> others = {
      "m.safetensors.tmp.1.0123",              // not a temp name of ours
      "m.safetensors.tmp.x.0123456789abcdef",  // not a pid
      "n.safetensors.tmp.1.0123456789abcdef",  // another target's
  };
  test::write_file(live, "partial");
  for (const std::string& o : others) test::write_file(dir.file(o), "keep");
  const int fd = ::open(live.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  save_safetensors(path, small_dict(1));
  EXPECT_TRUE(fs::exists(live)) << "a live save's temp file was removed";
  ::close(fd);  // its writer is gone
  save_safetensors(path, small_dict(2));
  EXPECT_FALSE(fs::exists(live));
  for (const std::string& o : others) EXPECT_TRUE(fs::exists(dir.file(o))) << o;
  EXPECT_EQ(load_safetensors(path).at("w").to_vector<float>(), std::vector<float>(4, 2.f));
}

// Re-saving keeps the target's mode (0600 stays 0600, also against the umask).
TEST(SafetensorsFiles, ResaveKeepsPermissions) {
  ScratchDir dir;
  const std::string path = dir.file("secret.safetensors");
  save_safetensors(path, small_dict(1));
  for (unsigned mode : {0600u, 0640u, 0444u, 0666u}) {
    ASSERT_EQ(::chmod(path.c_str(), mode), 0);
    save_safetensors(path, small_dict(static_cast<float>(mode)));
    EXPECT_EQ(mode_of(path), mode) << std::oct << mode;
    EXPECT_EQ(load_safetensors(path).at("w").to_vector<float>()[0], static_cast<float>(mode));
  }
}

// Saving to a symlink writes its target (relative, chained, or not existing
// yet) and leaves the link in place.
TEST(SafetensorsFiles, SaveThroughSymlinkWritesItsTarget) {
  ScratchDir dir;
  fs::create_directory(dir.path() / "real");
  const std::string real = dir.file("real/ckpt.safetensors");
  save_safetensors(real, small_dict(1));
  ASSERT_EQ(::chmod(real.c_str(), 0600), 0);
  fs::create_symlink("real/ckpt.safetensors", dir.path() / "link");
  fs::create_symlink("link", dir.path() / "link2");
  save_safetensors(dir.file("link2"), small_dict(2));
  EXPECT_TRUE(fs::is_symlink(dir.path() / "link"));
  EXPECT_TRUE(fs::is_symlink(dir.path() / "link2"));
  EXPECT_EQ(load_safetensors(real).at("w").to_vector<float>(), std::vector<float>(4, 2.f));
  EXPECT_EQ(mode_of(real), 0600u);
  fs::create_symlink("real/new.safetensors", dir.path() / "dangling");
  save_safetensors(dir.file("dangling"), small_dict(3));
  EXPECT_TRUE(fs::is_symlink(dir.path() / "dangling"));
  EXPECT_EQ(load_safetensors(dir.file("real/new.safetensors")).at("w").to_vector<float>(),
            std::vector<float>(4, 3.f));
  fs::create_symlink("loop", dir.path() / "loop");
  EXPECT_THROW(save_safetensors(dir.file("loop"), small_dict(4)), Error);
}

// A header of 100,000 zero-size entries (5 MB) loads in one linear pass: the
// parse used to take time quadratic in the entry count (minutes here). The
// child process is given a minute, a hundred times what it needs.
TEST(SafetensorsFiles, HundredThousandEntriesLoadInLinearTime) {
  GTEST_FLAG_SET(death_test_style, "fast");
  constexpr int kEntries = 100000;
  std::string header = "{";
  for (int i = 0; i < kEntries; ++i) {
    if (i) header += ',';
    header += "\"layer." + std::to_string(i) + R"(.bias":{"dtype":"F32","shape":[0],)" +
              R"("data_offsets":[0,0]})";
  }
  header += '}';
  const std::string file = test::make_file(header);
  EXPECT_EXIT(
      {
        ::alarm(60);
        StateDict sd = parse_safetensors(file, "many");
        bool ok = sd.size() == kEntries && sd.contains("layer.99999.bias") &&
                  sd.at("layer.0.bias").numel() == 0;
        std::_Exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// StateDict keeps insertion order and finds every name after sets that
// replace, erases in the middle and re-insertions.
TEST(StateDictIndex, OrderAndLookupsSurviveEraseAndReplace) {
  StateDict sd;
  for (int i = 0; i < 6; ++i) sd.set("k" + std::to_string(i), full({1}, i));
  sd.set("k2", full({1}, 20));  // replaces in place
  EXPECT_TRUE(sd.erase("k1"));
  EXPECT_FALSE(sd.erase("k1"));
  sd.set("k1", full({1}, 10));  // back at the end
  EXPECT_EQ(sd.keys(), (std::vector<std::string>{"k0", "k2", "k3", "k4", "k5", "k1"}));
  const float want[] = {0, 20, 3, 4, 5, 10};
  for (size_t i = 0; i < sd.size(); ++i) {
    const std::string& name = sd.items()[i].first;
    ASSERT_NE(sd.find(name), nullptr) << name;
    EXPECT_EQ(sd.at(name).item<float>(), want[i]) << name;
  }
  EXPECT_FALSE(sd.contains("k6"));
  EXPECT_THROW(sd.at("k6"), Error);
}

}  // namespace
}  // namespace kiln
