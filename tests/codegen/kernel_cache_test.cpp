// The kernel cache: memory hits, disk hits in a fresh memory cache, corrupt
// entries detected and rebuilt, concurrent writers (two processes) leaving a
// valid entry, KILN_CACHE_DIR resolution, directories and entries other users
// can write refused, KILN_DUMP files, vectorized code, thread-pool launches
// and the interpreted fallback.
#include "kernels/kernel_cache.h"
#include "common/forked_together.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <thread>

#include "codegen/kernel_test_util.h"
#include "kernels/llvm/llvm_jit.h"
#include "kiln/error.h"

namespace kiln::kir {
namespace {

namespace fs = std::filesystem;
using testing::Builder;
using testing::ScopedEnv;

#define SKIP_WITHOUT_LLVM() \
  if (!jit::available()) GTEST_SKIP() << "built without LLVM 19 (kernels are interpreted)"

// A fresh directory under the system temp dir, removed at the end of the test.
// Mode 0700 whatever the umask: the cache refuses directories others can write.
class TempDir {
 public:
  TempDir() {
    static int n = 0;
    path_ = fs::temp_directory_path() / kiln::str("kiln_cache_test_", ::getpid(), "_", n++);
    fs::remove_all(path_);
    fs::create_directories(path_);
    fs::permissions(path_, fs::perms::owner_all);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

// y = a * x + salt, distinct per salt (so each test gets kernels no one compiled yet).
Kernel axpy(double salt, int rank = 1) {
  Builder b(rank, "axpy");
  const auto f = DType::f32;
  std::vector<bool> all(static_cast<size_t>(rank), true);
  int x = b.load(b.in(f, all)),
      a = b.load(b.in(f, std::vector<bool>(static_cast<size_t>(rank), false)));
  int y = b.op(OpId::add, f, b.op(OpId::mul, f, a, x), b.cnst(f, salt));
  b.store(b.out(f, all), y);
  return b.k;
}

double unique_salt() {
  static std::mt19937 rng(static_cast<uint32_t>(
      std::chrono::steady_clock::now().time_since_epoch().count() ^ ::getpid()));
  return static_cast<double>(rng() % 1000000) + 0.25;
}

// Runs `lk` on 1000 ramp values and checks y = 2x + salt.
void expect_axpy_works(const LoadedKernel& lk, double salt) {
  std::vector<float> x(1000), y(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  float a = 2.0f;
  void* ptrs[] = {x.data(), &a, y.data()};
  const int64_t sizes[] = {1000};
  lk.launch(ptrs, sizes);
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(y[i], 2.0f * x[i] + static_cast<float>(salt)) << "element " << i;
}

std::vector<fs::path> entries(const fs::path& dir) {
  std::vector<fs::path> v;
  for (const auto& e : fs::directory_iterator(dir)) v.push_back(e.path());
  return v;
}

// The second request for an equal kernel is a memory hit returning the same code.
TEST(KernelCache, MemoryHit) {
  TempDir dir;
  ScopedEnv env("KILN_CACHE_DIR", dir.str());
  const double salt = unique_salt();
  const KernelCacheStats before = kernel_cache_stats();
  KernelSource s1, s2;
  auto a = get_kernel(axpy(salt), &s1);
  auto b = get_kernel(axpy(salt), &s2);
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(s2, KernelSource::kMemory);
  EXPECT_EQ(kernel_cache_stats().memory_hits, before.memory_hits + 1);
  EXPECT_EQ(a->key().size(), jit::available() ? 32u : 16u);
  expect_axpy_works(*b, salt);
}

// After clear_memory_cache, the kernel loads from its disk entry: nothing compiles.
TEST(KernelCache, DiskHitInAFreshMemoryCache) {
  SKIP_WITHOUT_LLVM();
  TempDir dir;
  ScopedEnv env("KILN_CACHE_DIR", dir.str());
  EXPECT_EQ(cache_dir(), dir.str());
  const double salt = unique_salt();
  KernelSource src;
  auto first = get_kernel(axpy(salt), &src);
  EXPECT_EQ(src, KernelSource::kCompiled);
  EXPECT_TRUE(fs::exists(dir.path() / (first->key() + ".o")));
  EXPECT_EQ(entries(dir.path()).size(), 1u) << "a temporary file was left behind";
  clear_memory_cache();
  const KernelCacheStats before = kernel_cache_stats();
  auto again = get_kernel(axpy(salt), &src);
  EXPECT_EQ(src, KernelSource::kDisk);
  EXPECT_EQ(again->key(), first->key());
  const KernelCacheStats after = kernel_cache_stats();
  EXPECT_EQ(after.disk_hits, before.disk_hits + 1);
  EXPECT_EQ(after.compiled, before.compiled);
  expect_axpy_works(*again, salt);
}

// Entries that are truncated, overwritten, bit-flipped or have a bad header
// are detected, recompiled, counted and replaced by a valid entry.
TEST(KernelCache, CorruptEntriesAreRebuilt) {
  SKIP_WITHOUT_LLVM();
  TempDir dir;
  ScopedEnv env("KILN_CACHE_DIR", dir.str());
  using Corrupt = void (*)(std::string&);
  const Corrupt corruptions[] = {
      [](std::string& s) { s.resize(s.size() / 2); },
      [](std::string& s) { s.back() = static_cast<char>(s.back() ^ 0x40); },
      [](std::string& s) { s[3] = 'X'; },
      [](std::string& s) { s[s.size() / 2] = static_cast<char>(s[s.size() / 2] ^ 1); },
      [](std::string& s) { s = "not an object"; },
      [](std::string& s) { s.clear(); },
  };
  for (Corrupt corrupt : corruptions) {
    const double salt = unique_salt();
    auto lk = get_kernel(axpy(salt));
    const fs::path file = dir.path() / (lk->key() + ".o");
    std::string bytes;
    {
      std::ifstream in(file, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    corrupt(bytes);
    std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
    clear_memory_cache();
    const KernelCacheStats before = kernel_cache_stats();
    KernelSource src;
    auto rebuilt = get_kernel(axpy(salt), &src);
    EXPECT_EQ(src, KernelSource::kCompiled);
    EXPECT_EQ(kernel_cache_stats().disk_rebuilt, before.disk_rebuilt + 1);
    expect_axpy_works(*rebuilt, salt);
    clear_memory_cache();
    get_kernel(axpy(salt), &src);
    EXPECT_EQ(src, KernelSource::kDisk) << "the rebuilt entry is valid";
  }
}

// Two processes compiling the same kernels into one cache directory at the
// same moment (as two ranks do) leave valid entries and no temporary files.
TEST(KernelCache, ConcurrentWritersLeaveValidEntries) {
  SKIP_WITHOUT_LLVM();
  TempDir dir;
  ScopedEnv env("KILN_CACHE_DIR", dir.str());
  std::vector<double> salts;
  for (int i = 0; i < 6; ++i) salts.push_back(unique_salt() + i);
  kiln::testing::run_forked_together(
      2,
      [&](int) {
        int code = 0;
        clear_memory_cache();
        for (double s : salts) {
          auto lk = get_kernel(axpy(s));
          std::vector<float> x{1.0f}, y{0.0f};
          float a = 2.0f;
          void* ptrs[] = {x.data(), &a, y.data()};
          const int64_t sizes[] = {1};
          (*lk)(0, 1, ptrs, sizes);
          if (y[0] != 2.0f + static_cast<float>(s)) code = 2;
        }
        return code;
      },
      std::chrono::seconds(60));
  EXPECT_EQ(entries(dir.path()).size(), salts.size()) << "temporary files left behind";
  clear_memory_cache();
  for (double s : salts) {
    KernelSource src;
    auto lk = get_kernel(axpy(s), &src);
    EXPECT_EQ(src, KernelSource::kDisk);
    expect_axpy_works(*lk, s);
  }
}

// Threads asking for many new kernels at once each get working code.
TEST(KernelCache, ThreadSafe) {
  ScopedEnv env("KILN_CACHE_DIR", "off");
  const double base = unique_salt();
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 5; ++i) {
        const double salt = base + (i % 3) + 0.5 * t;
        auto lk = get_kernel(axpy(salt));
        std::vector<float> x{3.0f}, y{0.0f};
        float a = 2.0f;
        void* ptrs[] = {x.data(), &a, y.data()};
        const int64_t sizes[] = {1};
        (*lk)(0, 1, ptrs, sizes);
        if (y[0] != 6.0f + static_cast<float>(salt)) ++failures;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

// KILN_CACHE_DIR: a path, "off", or the user's cache directory by default.
TEST(KernelCache, CacheDirectory) {
  {
    ScopedEnv env("KILN_CACHE_DIR", "off");
    EXPECT_EQ(cache_dir(), "");
    auto lk = get_kernel(axpy(unique_salt()));  // works without a disk cache
    EXPECT_NE(lk, nullptr);
  }
  {
    ScopedEnv env("KILN_CACHE_DIR", "");
    ScopedEnv xdg("XDG_CACHE_HOME", "/tmp/xdg");
    EXPECT_EQ(cache_dir(), "/tmp/xdg/kiln");
  }
  {
    ScopedEnv env("KILN_CACHE_DIR", "");
    ScopedEnv xdg("XDG_CACHE_HOME", "");
    ScopedEnv home("HOME", "/home/someone");
    EXPECT_EQ(cache_dir(), "/home/someone/.cache/kiln");
  }
}

// An unusable cache directory warns and keeps working from memory.
TEST(KernelCache, UnwritableDirectoryFallsBackToMemory) {
  SKIP_WITHOUT_LLVM();
  TempDir dir;
  const fs::path file = dir.path() / "a_file";
  std::ofstream(file) << "x";
  ScopedEnv env("KILN_CACHE_DIR", (file / "sub").string());  // below a regular file
  const double salt = unique_salt();
  KernelSource src;
  auto lk = get_kernel(axpy(salt), &src);
  EXPECT_EQ(src, KernelSource::kCompiled);
  expect_axpy_works(*lk, salt);
}

// ---- who may write the cache (it holds code that runs) ----

// Copies the disk entry of axpy(salt), compiled in a safe directory, into `dir`
// (as someone who can write there could), and says where the kernel came from
// when `dir` is the cache.
KernelSource source_with_planted_entry(const fs::path& dir, double salt) {
  TempDir safe;
  {
    ScopedEnv env("KILN_CACHE_DIR", safe.str());
    auto lk = get_kernel(axpy(salt));
    fs::copy_file(safe.path() / (lk->key() + ".o"), dir / (lk->key() + ".o"),
                  fs::copy_options::overwrite_existing);
  }
  clear_memory_cache();
  ScopedEnv env("KILN_CACHE_DIR", dir.string());
  KernelSource src;
  auto lk = get_kernel(axpy(salt), &src);
  expect_axpy_works(*lk, salt);
  return src;
}

void set_mode(const fs::path& p, unsigned mode) {
  ASSERT_EQ(::chmod(p.c_str(), mode), 0) << p;
}

unsigned mode_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
  return st.st_mode & 07777;
}

// An entry in a directory its group or other users can write is never loaded
// (the directory is refused: in-memory only), while the same entry in a
// private directory is.
TEST(KernelCache, DirectoryOthersCanWriteIsRefused) {
  SKIP_WITHOUT_LLVM();
  for (unsigned mode : {0770u, 0757u, 0777u}) {
    TempDir dir;
    set_mode(dir.path(), mode);
    EXPECT_EQ(source_with_planted_entry(dir.path(), unique_salt()), KernelSource::kCompiled)
        << "mode " << std::oct << mode;
    EXPECT_EQ(entries(dir.path()).size(), 1u) << "nothing is written to a refused directory";
  }
  TempDir dir;
  set_mode(dir.path(), 0755);
  EXPECT_EQ(source_with_planted_entry(dir.path(), unique_salt()), KernelSource::kDisk);
}

// A parent directory everyone can write without the sticky bit (where anyone
// could swap the cache directory) refuses the cache; /tmp's 01777 does not.
TEST(KernelCache, WorldWritableParentWithoutStickyBitIsRefused) {
  SKIP_WITHOUT_LLVM();
  TempDir parent;
  const fs::path dir = parent.path() / "cache";
  fs::create_directory(dir);
  set_mode(dir, 0700);
  set_mode(parent.path(), 0777);
  EXPECT_EQ(source_with_planted_entry(dir, unique_salt()), KernelSource::kCompiled);
  set_mode(parent.path(), 01777);
  EXPECT_EQ(source_with_planted_entry(dir, unique_salt()), KernelSource::kDisk);
}

// An entry others can write is rebuilt, not loaded; the rebuilt entry is
// private again and loads.
TEST(KernelCache, EntryOthersCanWriteIsRebuilt) {
  SKIP_WITHOUT_LLVM();
  TempDir dir;
  ScopedEnv env("KILN_CACHE_DIR", dir.str());
  for (unsigned mode : {0664u, 0646u}) {
    const double salt = unique_salt();
    auto lk = get_kernel(axpy(salt));
    const fs::path entry = dir.path() / (lk->key() + ".o");
    set_mode(entry, mode);
    clear_memory_cache();
    const KernelCacheStats before = kernel_cache_stats();
    KernelSource src;
    expect_axpy_works(*get_kernel(axpy(salt), &src), salt);
    EXPECT_EQ(src, KernelSource::kCompiled) << "mode " << std::oct << mode;
    EXPECT_EQ(kernel_cache_stats().disk_rebuilt, before.disk_rebuilt + 1);
    EXPECT_EQ(mode_of(entry) & 022, 0u);
    clear_memory_cache();
    get_kernel(axpy(salt), &src);
    EXPECT_EQ(src, KernelSource::kDisk);
  }
}

// A directory or an entry owned by another user (neither this one nor root)
// is refused. Needs root to give files away.
TEST(KernelCache, DirectoryOrEntryOfAnotherUserIsRefused) {
  SKIP_WITHOUT_LLVM();
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (chown)";
  const uid_t nobody = 65534;
  {
    TempDir dir;
    ASSERT_EQ(::chown(dir.path().c_str(), nobody, nobody), 0);
    EXPECT_EQ(source_with_planted_entry(dir.path(), unique_salt()), KernelSource::kCompiled);
  }
  TempDir dir;
  ScopedEnv env("KILN_CACHE_DIR", dir.str());
  const double salt = unique_salt();
  auto lk = get_kernel(axpy(salt));
  ASSERT_EQ(::chown((dir.path() / (lk->key() + ".o")).c_str(), nobody, nobody), 0);
  clear_memory_cache();
  KernelSource src;
  get_kernel(axpy(salt), &src);
  EXPECT_EQ(src, KernelSource::kCompiled);
}

// A group-writable umask (002, common with per-user groups) still makes a
// usable cache: kiln creates the directory and entries without those bits.
TEST(KernelCache, CacheMadeUnderAGroupUmaskIsUsable) {
  SKIP_WITHOUT_LLVM();
  TempDir root;
  const fs::path dir = root.path() / "new" / "cache";
  ScopedEnv env("KILN_CACHE_DIR", dir.string());
  const mode_t old = ::umask(002);
  const double salt = unique_salt();
  auto lk = get_kernel(axpy(salt));
  ::umask(old);
  EXPECT_EQ(mode_of(dir) & 022, 0u);
  EXPECT_EQ(mode_of(dir / (lk->key() + ".o")) & 022, 0u);
  clear_memory_cache();
  KernelSource src;
  get_kernel(axpy(salt), &src);
  EXPECT_EQ(src, KernelSource::kDisk);
}

// KILN_DUMP writes each kernel's kernel IR, LLVM IR, optimized IR and assembly;
// the optimized IR of simple kernels is vectorized at the host's full width (8
// floats with AVX2, 16 where 512-bit vectors are used) and calls no libm
// function, also with transcendentals and reductions.
TEST(KernelCache, DumpsShowVectorizedCode) {
  SKIP_WITHOUT_LLVM();
  TempDir dir;
  ScopedEnv cache("KILN_CACHE_DIR", "off");
  ScopedEnv dump("KILN_DUMP", dir.str());
  const int bits = jit::host_cpu().vector_bits;
  const std::string vec = str("<", bits / 32, " x float>");
  const char* reg = bits >= 512 ? "zmm" : bits >= 256 ? "ymm" : "xmm";
  auto read = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  // Pointwise kernels using every inline f32 function.
  for (OpId op : {OpId::add, OpId::exp, OpId::tanh, OpId::erf, OpId::pow, OpId::sin, OpId::log1p}) {
    Builder b(2, str("dump_", op_name(op)));
    const auto f = DType::f32;
    int x = b.load(b.in(f, {true, true})), c = b.load(b.in(f, {false, true}));
    int y = op_info(op).arity == 2 ? b.op(op, f, x, c) : b.op(op, f, b.op(OpId::add, f, x, c));
    b.store(b.out(f, {true, true}), b.op(OpId::add, f, y, b.cnst(f, unique_salt())));
    auto lk = get_kernel(b.k);
    const fs::path stem = dir.path() / "kernels" / str(b.k.name, "_", lk->key());
    for (const char* ext : {".kir", ".ll", ".opt.ll", ".s"})
      EXPECT_TRUE(fs::exists(stem.string() + ext)) << stem << ext;
    EXPECT_EQ(read(stem.string() + ".kir"), to_string(b.k));
    const std::string opt = read(stem.string() + ".opt.ll");
    EXPECT_NE(opt.find(vec), std::string::npos) << op_name(op) << " did not vectorize";
    EXPECT_FALSE(std::regex_search(opt, std::regex(R"(call [^@]*@(?!llvm\.))")))
        << op_name(op) << " calls a function";
    EXPECT_NE(read(stem.string() + ".s").find(reg), std::string::npos) << op_name(op);
  }
  // A softmax-like kernel: every phase loop vectorizes (max, f32 sum in float, store loop),
  // and exp runs once per element (the sum loop stores it; the store loop reads it back).
  Builder b(2, "dump_softmax");
  const auto f = DType::f32;
  int xa = b.in(f, {true, true}), oa = b.out(f, {true, true});
  int x = b.load(xa);
  int mx = b.reduce(OpId::max, x, 0, f);
  int e = b.op(OpId::exp, f, b.op(OpId::sub, f, x, mx));
  int s = b.reduce(OpId::sum, e, 1, f);
  b.store(oa, b.op(OpId::mul, f, e, b.op(OpId::div, f, b.cnst(f, 1), s)));
  auto lk = get_kernel(b.k);
  const std::string opt = read(dir.path() / "kernels" / str("dump_softmax_", lk->key(), ".opt.ll"));
  EXPECT_NE(opt.find("@llvm.vector.reduce.fmax.v"), std::string::npos) << "max did not vectorize";
  EXPECT_TRUE(std::regex_search(opt, std::regex(R"(@llvm\.vector\.reduce\.fadd\.v\d+f32)")))
      << "sum did not vectorize in float";
  EXPECT_NE(opt.find(vec), std::string::npos);
  const std::string ll = read(dir.path() / "kernels" / str("dump_softmax_", lk->key(), ".ll"));
  const std::string body = ll.substr(0, ll.find("\n}\n"));  // the kernel function
  size_t exps = 0;  // exp's expansion rounds x / ln2 once (the only rint of this kernel)
  for (size_t at = body.find("@llvm.rint.f32("); at != std::string::npos;
       at = body.find("@llvm.rint.f32(", at + 1))
    ++exps;
  EXPECT_EQ(exps, 1u) << "exp(x - max) is computed more than once per element";
}

// launch() over the thread pool gives the same bytes as one call over all items,
// and a LoadedKernel without code (builds without LLVM) runs the interpreter.
TEST(KernelCache, LaunchAndInterpretedFallback) {
  ScopedEnv env("KILN_CACHE_DIR", "off");
  Builder b(2, "launch");
  const auto f = DType::f32;
  int x = b.load(b.in(f, {true, true}));
  int s = b.reduce(OpId::sum, x, 0, f);
  b.store(b.out(f, {true, true}), b.op(OpId::sub, f, x, s));
  b.store(b.out(f, {true, false}), s);
  b.k.reassoc = false;  // bit-exact against the interpreter
  const std::vector<int64_t> sizes{3000, 37};
  std::mt19937 rng(9);
  auto whole = testing::make_buffers(b.k, sizes, rng, [](DType, std::mt19937& r) {
    return static_cast<double>(r() % 1000) / 100.0 - 5.0;
  });
  auto pooled = whole, interp = whole;
  auto lk = get_kernel(b.k);
  auto pw = testing::pointers(whole), pp = testing::pointers(pooled),
       pi = testing::pointers(interp);
  (*lk)(0, sizes[0], pw.data(), sizes.data());
  lk->launch(pp.data(), sizes.data());
  LoadedKernel fallback(b.k, "none", nullptr);
  EXPECT_EQ(fallback.fn(), nullptr);
  fallback.launch(pi.data(), sizes.data());
  for (size_t a = 1; a < 3; ++a) {
    EXPECT_EQ(whole[a].bytes, pooled[a].bytes) << "arg" << a;
    EXPECT_EQ(whole[a].bytes, interp[a].bytes) << "arg" << a;
  }
}

}  // namespace
}  // namespace kiln::kir
