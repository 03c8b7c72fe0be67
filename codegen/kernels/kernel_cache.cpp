// The kernel cache: canonical kernel IR -> loaded machine code, in memory and
// on disk. Disk entries are host object files behind a small header (magic,
// key, symbol, size, XXH64 of the object), written to a temporary name and
// renamed, so concurrent writers (several ranks) never leave a torn entry; an
// entry that fails validation or does not load is rebuilt and overwritten.
// Only a directory and entries that no other user can write are used (see
// check_dir): the cache holds code this process runs.
//
// Key = XXH3-128 of the emitted LLVM IR, the canonical kernel IR, the host
// triple/CPU/features, the LLVM and kiln versions and the emitter version:
// hashing the emitted text itself means a changed emitter never reuses stale
// machine code.
#include "kernels/kernel_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "kernels/llvm/llvm_emit.h"
#include "kernels/llvm/llvm_jit.h"
#include "kiln/env.h"
#include "kiln/error.h"
#include "kiln/thread_pool.h"

#ifndef KILN_VERSION
#define KILN_VERSION "unknown"
#endif

namespace kiln::kir {

namespace fs = std::filesystem;

// ---- LoadedKernel ----

LoadedKernel::LoadedKernel(Kernel k, std::string key, KernelFn fn)
    : kernel_(std::move(k)), key_(std::move(key)), fn_(fn) {}

void LoadedKernel::operator()(int64_t begin, int64_t end, void* const* ptrs,
                              const int64_t* sizes) const {
  if (fn_)
    fn_(begin, end, ptrs, sizes);
  else
    interpret(kernel_, begin, end, ptrs, sizes);
}

void LoadedKernel::launch(void* const* ptrs, const int64_t* sizes) const {
  const int64_t n = work_items(kernel_, sizes);
  if (n <= 0) return;
  // Chunks of ~32K elements: pointwise items are elements; a row is `inner` elements,
  // read once per phase, so ~16K elements per chunk.
  int64_t grain = kDefaultGrain;
  if (kernel_.has_reductions())
    grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, sizes[kernel_.rank - 1]));
  parallel_for(0, n, grain, [&](int64_t b, int64_t e) { (*this)(b, e, ptrs, sizes); });
}

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// A C identifier made of the kernel's name.
std::string sanitize(const std::string& name) {
  std::string s = name.empty() ? "kernel" : name;
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
  if (std::isdigit(static_cast<unsigned char>(s[0]))) s = "k" + s;
  return s;
}

struct Cache {
  std::mutex mu;
  std::unordered_map<std::string, std::shared_ptr<const LoadedKernel>> memory;  // by kir text
  KernelCacheStats stats;
  std::once_flag jit_once;
  jit::LlvmJit* jit = nullptr;  // leaked: kernels stay callable until exit
  std::string target;           // host + versions, part of every key
  int vector_bits = 0;          // the host's vector width, for emit_llvm
  bool warned = false;
  bool warned_entry = false;
};

Cache& cache() {
  static Cache* c = new Cache;  // leaked, like the JIT it owns
  return *c;
}

jit::LlvmJit& the_jit(Cache& c) {
  std::call_once(c.jit_once, [&] {
    const jit::CpuInfo cpu = jit::host_cpu();
    c.target = str(cpu.triple, "\n", cpu.cpu, "\n", cpu.features, "\nllvm ", jit::llvm_version(),
                   "\nkiln ", KILN_VERSION, "\nemit ", kEmitVersion, "\n");
    c.vector_bits = cpu.vector_bits;
    c.jit = new jit::LlvmJit();
  });
  return *c.jit;
}

void warn_once(Cache& c, const std::string& msg) {
  std::lock_guard<std::mutex> lock(c.mu);
  if (c.warned) return;
  c.warned = true;
  std::cerr << "kiln: [kernel cache] " << msg << "; compiled kernels stay in memory only\n";
}

// An entry someone else could have written is never loaded: it is rebuilt.
void warn_entry_once(Cache& c, const std::string& msg) {
  std::lock_guard<std::mutex> lock(c.mu);
  if (c.warned_entry) return;
  c.warned_entry = true;
  std::cerr << "kiln: [kernel cache] " << msg << "; not loaded (kernels like it are rebuilt)\n";
}

// ---- disk entries ----

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'K', 'O', '0', '1'};

std::string u64_bytes(uint64_t v) {
  std::string s(8, '\0');
  std::memcpy(s.data(), &v, 8);
  return s;
}
uint64_t read_u64(const std::string& s, size_t at) {
  uint64_t v;
  std::memcpy(&v, s.data() + at, 8);
  return v;
}

std::string encode_entry(const std::string& key, const std::string& symbol,
                         const std::string& object) {
  std::string s(kMagic, sizeof kMagic);
  s += u64_bytes(key.size()) + key;
  s += u64_bytes(symbol.size()) + symbol;
  s += u64_bytes(object.size());
  s += u64_bytes(XXH64(object.data(), object.size(), 0));
  s += object;
  return s;
}

// The object of a valid entry for (key, symbol), or "" if the entry is corrupt.
std::string decode_entry(const std::string& s, const std::string& key, const std::string& symbol) {
  size_t at = sizeof kMagic;
  if (s.size() < at || std::memcmp(s.data(), kMagic, sizeof kMagic) != 0) return "";
  auto field = [&](std::string& out) {
    if (s.size() < at + 8) return false;
    const uint64_t n = read_u64(s, at);
    at += 8;
    if (n > s.size() - at) return false;
    out = s.substr(at, n);
    at += n;
    return true;
  };
  std::string k, sym;
  if (!field(k) || k != key || !field(sym) || sym != symbol) return "";
  if (s.size() < at + 16) return "";
  const uint64_t size = read_u64(s, at), sum = read_u64(s, at + 8);
  at += 16;
  if (size != s.size() - at || size == 0) return "";
  std::string object = s.substr(at);
  if (XXH64(object.data(), object.size(), 0) != sum) return "";
  return object;
}

// ---- who may write the cache ----
// A disk entry is machine code this process runs, so the directory and every
// entry must be writable by no one but this user (or root), as ssh and ccache
// demand of the files they trust; a world-writable parent without the sticky
// bit would let anyone swap the directory itself.

// Why `st` (of `what`) may be written by someone else, or "" when it may not.
std::string foreign_writer(const struct stat& st, const std::string& what) {
  const uid_t me = ::geteuid();
  if (st.st_uid != me && st.st_uid != 0)
    return str(what, " is owned by uid ", st.st_uid, ", not by this user (uid ", me, ") or root");
  if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return str(what, " is writable by ", (st.st_mode & S_IWOTH) ? "other users" : "its group",
               " (mode ", mode, ")");
  }
  return "";
}

// Creates `dir` and its missing parents as 0755 (the umask may only remove bits).
void make_dirs(const fs::path& dir) {
  fs::path at;
  for (const fs::path& part : dir) {
    at /= part;
    if (::mkdir(at.c_str(), 0755) != 0 && errno != EEXIST) return;  // reported by the caller
  }
}

// Makes `dir` if needed and checks that only this user or root can change what
// it holds; returns why not ("" when usable).
std::string check_dir(const std::string& dir) {
  std::error_code ec;
  make_dirs(fs::absolute(dir, ec));
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return str("cannot create ", dir, ": ", std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) return str("cannot create ", dir, ": not a directory");
  const fs::path real = fs::canonical(dir, ec);
  if (ec) return str("cannot resolve ", dir, ": ", ec.message());
  std::string why = foreign_writer(st, str("cache directory ", real.string()));
  for (fs::path p = real.parent_path(); why.empty(); p = p.parent_path()) {
    struct stat up {};
    if (::stat(p.c_str(), &up) == 0 && (up.st_mode & S_IWOTH) && !(up.st_mode & S_ISVTX))
      why = str("its parent ", p.string(), " is writable by everyone (and not sticky)");
    if (p == p.root_path() || p.empty()) break;
  }
  if (!why.empty()) return why + "; kiln runs the code a cache holds, so it refuses this one";
  return "";
}

enum class EntryRead : uint8_t { kAbsent, kRefused, kRead };

// Reads the entry at `p` unless it is not a regular file of this user or root
// that only they can write (checked on the opened file, so it cannot be swapped).
EntryRead read_entry(const fs::path& p, std::string& out, std::string& why) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return EntryRead::kAbsent;
    why = str("cannot open ", p.string(), ": ", std::strerror(errno));
    return EntryRead::kRefused;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    why = str(p.string(), " is not a regular file");
    return EntryRead::kRefused;
  }
  why = foreign_writer(st, str("entry ", p.string()));
  if (!why.empty()) {
    ::close(fd);
    return EntryRead::kRefused;
  }
  out.assign(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t r = ::read(fd, out.data() + got, out.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  out.resize(got);  // a short read is a corrupt entry, rebuilt like one
  ::close(fd);
  return EntryRead::kRead;
}

// Writes `text` to `p` atomically: a unique temporary in the same directory
// (mode 0644, so never writable by others whatever the umask), then rename.
bool write_atomic(const fs::path& p, const std::string& text, std::string* error) {
  static std::atomic<uint64_t> counter{0};
  const fs::path tmp = p.string() + str(".tmp.", ::getpid(), ".", counter++);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  bool ok = fd >= 0;
  for (size_t done = 0; ok && done < text.size();) {
    const ssize_t r = ::write(fd, text.data() + done, text.size() - done);
    if (r < 0 && errno == EINTR) continue;
    ok = r > 0;
    if (ok) done += static_cast<size_t>(r);
  }
  if (fd >= 0 && ::close(fd) != 0) ok = false;
  if (!ok) {
    if (error) *error = str("cannot write ", tmp.string(), ": ", std::strerror(errno));
    ::unlink(tmp.c_str());
    return false;
  }
  std::error_code ec;
  fs::rename(tmp, p, ec);
  if (ec) {
    if (error) *error = str("cannot rename ", tmp.string(), ": ", ec.message());
    fs::remove(tmp, ec);
    return false;
  }
  return true;
}

// KILN_DUMP=dir: <dir>/kernels/<name>_<key>.{kir,ll,opt.ll,s}.
void dump(const std::string& dir, const Kernel& k, const std::string& key, const std::string& ir,
          const jit::CompileOutputs& out) {
  const fs::path d = fs::path(dir) / "kernels";
  std::error_code ec;
  fs::create_directories(d, ec);
  KILN_CHECK(!ec, "[KILN_DUMP] cannot create directory ", d.string(), ": ", ec.message());
  const std::string stem = (d / str(sanitize(k.name), "_", key)).string();
  const std::pair<const char*, const std::string*> files[] = {
      {".ll", &ir}, {".opt.ll", &out.optimized_ir}, {".s", &out.assembly}};
  std::string err;
  KILN_CHECK(write_atomic(stem + ".kir", to_string(k), &err), "[KILN_DUMP] ", err);
  for (const auto& [ext, text] : files)
    if (!text->empty()) KILN_CHECK(write_atomic(stem + ext, *text, &err), "[KILN_DUMP] ", err);
}

}  // namespace

std::string cache_dir() {
  const std::string v = env::get("KILN_CACHE_DIR");
  if (v == "off") return "";
  if (!v.empty()) return v;
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) return str(xdg, "/kiln");
  const char* home = std::getenv("HOME");
  if (home && *home) return str(home, "/.cache/kiln");
  return "";
}

std::shared_ptr<const LoadedKernel> get_kernel(const Kernel& k, KernelSource* source) {
  verify(k);
  Cache& c = cache();
  const std::string text = to_string(k);
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.memory.find(text);
    if (it != c.memory.end()) {
      ++c.stats.memory_hits;
      if (source) *source = KernelSource::kMemory;
      return it->second;
    }
  }
  auto remember = [&](std::shared_ptr<const LoadedKernel> lk, KernelSource src) {
    std::lock_guard<std::mutex> lock(c.mu);
    auto [it, fresh] = c.memory.emplace(text, std::move(lk));
    if (source) *source = src;
    return it->second;
  };
  if (!jit::available()) {
    const std::string key = hex64(XXH3_64bits(text.data(), text.size()));
    return remember(std::make_shared<const LoadedKernel>(k, key, nullptr),
                    KernelSource::kInterpreted);
  }

  const auto t0 = Clock::now();
  jit::LlvmJit& jit = the_jit(c);
  const std::string symbol =
      str(sanitize(k.name), "_", hex64(XXH3_64bits(text.data(), text.size())));
  const std::string ir = emit_llvm(k, symbol, c.vector_bits);
  XXH3_state_t* st = XXH3_createState();
  XXH3_128bits_reset(st);
  for (const std::string* part : std::initializer_list<const std::string*>{&ir, &text, &c.target}) {
    XXH3_128bits_update(st, part->data(), part->size());
    XXH3_128bits_update(st, "\x1f", 1);
  }
  const XXH128_hash_t h = XXH3_128bits_digest(st);
  XXH3_freeState(st);
  const std::string key = hex64(h.high64) + hex64(h.low64);

  std::string dir = cache_dir();
  if (!dir.empty()) {
    const std::string why = check_dir(dir);
    if (!why.empty()) {
      warn_once(c, why);
      dir.clear();
    }
  }
  const std::string dump_dir = env::get("KILN_DUMP");
  const fs::path path = dir.empty() ? fs::path() : fs::path(dir) / (key + ".o");
  KernelFn fn = nullptr;
  KernelSource src = KernelSource::kCompiled;
  bool rebuilt = false;
  if (!dir.empty()) {
    std::string bytes, why;
    const EntryRead got = read_entry(path, bytes, why);
    if (got == EntryRead::kRefused) {
      warn_entry_once(c, why);
      rebuilt = true;
    } else if (got == EntryRead::kRead) {
      const auto t1 = Clock::now();
      const std::string object = decode_entry(bytes, key, symbol);
      if (!object.empty()) {
        try {
          fn = reinterpret_cast<KernelFn>(jit.load_object(object, symbol));
        } catch (const Error&) {
          fn = nullptr;  // valid checksum but unloadable (e.g. another LLVM wrote it): rebuild
        }
      }
      if (fn) {
        src = KernelSource::kDisk;
        std::lock_guard<std::mutex> lock(c.mu);
        ++c.stats.disk_hits;
        c.stats.load_ms += ms_since(t1);
      } else {
        rebuilt = true;
      }
    }
  }
  jit::CompileOutputs outputs;
  if (!fn) {
    const std::string object = jit.compile_to_object(ir, dump_dir.empty() ? nullptr : &outputs);
    fn = reinterpret_cast<KernelFn>(jit.load_object(object, symbol));
    {
      std::lock_guard<std::mutex> lock(c.mu);
      ++c.stats.compiled;
      if (rebuilt) ++c.stats.disk_rebuilt;
      c.stats.compile_ms += ms_since(t0);
    }
    std::string err;
    if (!dir.empty() && !write_atomic(path, encode_entry(key, symbol, object), &err))
      warn_once(c, err);
  } else if (!dump_dir.empty()) {
    jit.compile_to_object(ir, &outputs);  // only for the dump's optimized IR and assembly
  }
  if (!dump_dir.empty()) dump(dump_dir, k, key, ir, outputs);
  return remember(std::make_shared<const LoadedKernel>(k, key, fn), src);
}

std::string check_cache_dir(const std::string& dir) {
  return check_dir(dir);
}

CacheFileRead read_cache_file(const std::string& path, std::string& out, std::string& why) {
  switch (read_entry(path, out, why)) {
    case EntryRead::kAbsent:
      return CacheFileRead::kAbsent;
    case EntryRead::kRefused:
      return CacheFileRead::kRefused;
    case EntryRead::kRead:
      break;
  }
  return CacheFileRead::kRead;
}

bool write_cache_file(const std::string& path, const std::string& bytes, std::string* error) {
  return write_atomic(path, bytes, error);
}

KernelCacheStats kernel_cache_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.stats;
}

void clear_memory_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.memory.clear();
}

}  // namespace kiln::kir
