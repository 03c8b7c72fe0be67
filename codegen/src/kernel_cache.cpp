// The kernel cache: canonical kernel IR -> loaded machine code, in memory and
// on disk. Disk entries are host object files behind a small header (magic,
// key, symbol, size, XXH64 of the object), written to a temporary name and
// renamed, so concurrent writers (several ranks) never leave a torn entry; an
// entry that fails validation or does not load is rebuilt and overwritten.
//
// Key = XXH3-128 of the emitted LLVM IR, the canonical kernel IR, the host
// triple/CPU/features, the LLVM and kiln versions and the emitter version:
// hashing the emitted text itself means a changed emitter never reuses stale
// machine code.
#include "kiln/kernel_cache.h"

#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "kiln/env.h"
#include "kiln/error.h"
#include "kiln/llvm_jit.h"
#include "kiln/thread_pool.h"
#include "llvm_emit.h"

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

bool read_file(const fs::path& p, std::string& out) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  out = ss.str();
  return true;
}

// Writes `text` to `p` atomically: a unique temporary in the same directory, then rename.
bool write_atomic(const fs::path& p, const std::string& text, std::string* error) {
  static std::atomic<uint64_t> counter{0};
  const fs::path tmp = p.string() + str(".tmp.", ::getpid(), ".", counter++);
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (f) f.write(text.data(), static_cast<std::streamsize>(text.size()));
    if (f) f.flush();
    if (!f) {
      if (error) *error = str("cannot write ", tmp.string());
      std::error_code ec;
      fs::remove(tmp, ec);
      return false;
    }
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

  const std::string dir = cache_dir();
  const std::string dump_dir = env::get("KILN_DUMP");
  const fs::path path = dir.empty() ? fs::path() : fs::path(dir) / (key + ".o");
  KernelFn fn = nullptr;
  KernelSource src = KernelSource::kCompiled;
  bool rebuilt = false;
  if (!dir.empty()) {
    std::string bytes;
    if (read_file(path, bytes)) {
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
    if (!dir.empty()) {
      std::error_code ec;
      fs::create_directories(dir, ec);
      std::string err;
      if (ec)
        warn_once(c, str("cannot create ", dir, ": ", ec.message()));
      else if (!write_atomic(path, encode_entry(key, symbol, object), &err))
        warn_once(c, err);
    }
  } else if (!dump_dir.empty()) {
    jit.compile_to_object(ir, &outputs);  // only for the dump's optimized IR and assembly
  }
  if (!dump_dir.empty()) dump(dump_dir, k, key, ir, outputs);
  return remember(std::make_shared<const LoadedKernel>(k, key, fn), src);
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
