// The disk plan cache: what the pass pipeline and fusion planning made of a
// traced graph, kept next to the kernel cache (same directory and ownership
// rules) so that a new process tracing the same function skips both; its
// kernels then come from the kernel cache.
//
// Key: XXH3-128 over the traced graph's binary form (ir/serialize.h: every
// node's op, attributes, constants, dtypes and shapes or symbols, the wiring,
// input and output names), the plan's input/output bindings, the options that
// shape the plan (pipeline, memory budget, fusion, kernels, reassociation,
// KILN_DISABLE_PASSES), the device, the entry format, kiln's version and the
// GNU build IDs of the loaded kiln libraries (a rebuilt pass never reuses an
// older pass's output).
//
// Entry <dir>/<key>.plan: magic, key, payload size, XXH64 of the payload,
// payload (bindings after partitioning, remat report, predicted peak, then per
// graph its binary form, fusion plan and each fusion group's kernel number,
// so a warm start lowers only each kernel's first group). A missing, truncated, corrupt or
// foreign (another key's) entry, or (under KILN_VERIFY=1, which re-verifies
// loaded graphs) one that does not verify, is ignored (with
// a KILN_LOG=plan_cache line), recomputed and rewritten; writes go to a unique
// temporary that is renamed, so concurrent writers never tear an entry.
#include <fcntl.h>
#include <link.h>
#include <sys/stat.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>

#include "driver/compile_internal.h"
#include "executor/executor.h"
#include "kernels/kernel_cache.h"
#include "kiln/env.h"
#include "kiln/ir/serialize.h"
#include "kiln/passes/fuse.h"
#include "kiln/profiler.h"

#ifndef KILN_VERSION
#define KILN_VERSION "unknown"
#endif

namespace kiln::detail {

namespace {

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'P', 'L', 'N', '1'};
constexpr uint64_t kFormat = 2;  // bump when the payload changes (2: kernel numbers)

bool log_on() {
  const std::string v = str(",", env::get("KILN_LOG"), ",");
  return v.find(",plan_cache,") != std::string::npos;
}

void log(const std::string& what) {
  if (log_on()) std::cerr << "[kiln] plan cache: " << what << "\n";
}

std::string hex(const unsigned char* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}

// The GNU build ID of a loaded object, else its path, size and mtime.
std::string object_identity(const dl_phdr_info* info) {
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
    const char* end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const auto* nh = reinterpret_cast<const ElfW(Nhdr)*>(p);
      const char* name = p + sizeof(ElfW(Nhdr));
      const char* desc = name + ((nh->n_namesz + 3) & ~3u);
      if (desc + nh->n_descsz > end) break;
      if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0)
        return hex(reinterpret_cast<const unsigned char*>(desc), nh->n_descsz);
      p = desc + ((nh->n_descsz + 3) & ~3u);
    }
  }
  const std::string path =
      info->dlpi_name && *info->dlpi_name ? info->dlpi_name : std::string("/proc/self/exe");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return path;
  return str(path, ":", st.st_size, ":", st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec);
}

// The kiln libraries loaded (libkiln_*), else the executable kiln is linked
// into: a new build of any of them is a new identity.
const std::string& build_identity() {
  static const std::string id = [] {
    std::pair<std::string, std::string> found;  // (kiln libraries, the executable)
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* data) {
          auto* out = static_cast<std::pair<std::string, std::string>*>(data);
          const std::string name = info->dlpi_name ? info->dlpi_name : "";
          const std::string base = std::filesystem::path(name).filename().string();
          if (name.empty()) {
            if (out->second.empty()) out->second = object_identity(info);
          } else if (base.rfind("libkiln", 0) == 0) {
            out->first += str(base, "=", object_identity(info), ";");
          }
          return 0;
        },
        &found);
    return found.first.empty() ? found.second : found.first;
  }();
  return id;
}

std::string& build_override() {
  static std::string id;
  return id;
}

std::function<void(std::vector<size_t>&)>& kernel_ids_hook() {
  static std::function<void(std::vector<size_t>&)> hook;
  return hook;
}

// Removes the least recently used entries past kPlanCacheEntries (a rebuilt
// kiln keys every plan anew, so old builds' entries would otherwise pile up).
void bound_entries(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::pair<fs::file_time_type, fs::path>> plans;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().extension() == ".plan") {
      std::error_code tec;
      const fs::file_time_type t = it->last_write_time(tec);
      if (!tec) plans.emplace_back(t, it->path());
    }
  if (plans.size() <= kPlanCacheEntries) return;
  std::sort(plans.begin(), plans.end());
  for (size_t i = 0; i + kPlanCacheEntries < plans.size(); ++i) fs::remove(plans[i].second, ec);
}

// ---- the payload ----

void write_fusion(ir::ByteWriter& w, const ir::Graph& g, const passes::FusionPlan& plan) {
  const std::vector<const ir::Value*> values = ir::numbered_values(g);
  int max_id = -1;
  for (const ir::Value* v : values) max_id = std::max(max_id, v->id());
  std::vector<uint32_t> num(static_cast<size_t>(max_id + 1), 0);
  for (size_t i = 0; i < values.size(); ++i)
    num[static_cast<size_t>(values[i]->id())] = static_cast<uint32_t>(i);
  auto nodes = [&](const std::vector<const ir::Node*>& ns) {
    w.uvar(ns.size());
    for (const ir::Node* n : ns) w.uvar(g.position(n));
  };
  auto vals = [&](const std::vector<const ir::Value*>& vs) {
    w.uvar(vs.size());
    for (const ir::Value* v : vs) w.uvar(num[static_cast<size_t>(v->id())]);
  };
  auto bits = [&](const std::vector<std::vector<bool>>& bs) {
    w.uvar(bs.size());
    for (const auto& b : bs) {
      w.uvar(b.size());
      for (bool x : b) w.u8(x ? 1 : 0);
    }
  };
  w.uvar(plan.groups.size());
  for (const passes::FusionGroup& grp : plan.groups) {
    w.u8(static_cast<uint8_t>(grp.kind));
    nodes(grp.nodes);
    vals(grp.inputs);
    vals(grp.outputs);
    w.uvar(grp.dims.size());
    for (const auto& d : grp.dims) w.shape(d);
    bits(grp.in_dense);
    bits(grp.out_dense);
    nodes(grp.column_sums);
  }
  w.uvar(plan.group_of.size());
  for (int k : plan.group_of) w.svar(k);
}

std::shared_ptr<passes::FusionPlan> read_fusion(ir::ByteReader& r, const ir::Graph& g) {
  const std::vector<ir::Node*> all = g.nodes();
  const std::vector<const ir::Value*> values = ir::numbered_values(g);
  auto plan = std::make_shared<passes::FusionPlan>();
  auto nodes = [&](std::vector<const ir::Node*>& out) {
    out.resize(r.count(1));
    for (const ir::Node*& n : out) {
      const uint64_t k = r.uvar();
      if (k >= all.size()) r.fail("fusion group node out of range");
      n = all[k];
    }
  };
  auto vals = [&](std::vector<const ir::Value*>& out) {
    out.resize(r.count(1));
    for (const ir::Value*& v : out) {
      const uint64_t k = r.uvar();
      if (k >= values.size()) r.fail("fusion group value out of range");
      v = values[k];
    }
  };
  auto bits = [&](std::vector<std::vector<bool>>& out) {
    out.resize(r.count(1));
    for (auto& b : out) {
      b.resize(r.count(1));
      for (size_t i = 0; i < b.size(); ++i) b[i] = r.u8() != 0;
    }
  };
  plan->groups.resize(r.count(8));
  for (passes::FusionGroup& grp : plan->groups) {
    const uint8_t kind = r.u8();
    if (kind > static_cast<uint8_t>(passes::GroupKind::kEpilogue)) r.fail("bad fusion group kind");
    grp.kind = static_cast<passes::GroupKind>(kind);
    nodes(grp.nodes);
    vals(grp.inputs);
    vals(grp.outputs);
    grp.dims.resize(r.count(1));
    for (auto& d : grp.dims) d = r.shape();
    bits(grp.in_dense);
    bits(grp.out_dense);
    nodes(grp.column_sums);
  }
  plan->group_of.resize(r.count(1));
  if (plan->group_of.size() != all.size()) r.fail("fusion plan of another graph");
  for (int& k : plan->group_of) {
    const int64_t v = r.svar();
    if (v < -1 || v >= static_cast<int64_t>(plan->groups.size())) r.fail("bad group number");
    k = static_cast<int>(v);
  }
  return plan;
}

// Executor::kernel_ids(): per fusion group, its kernel's number.
void write_kernel_ids(ir::ByteWriter& w, const Executor& e) {
  std::vector<size_t> ids = e.kernel_ids();
  if (kernel_ids_hook()) kernel_ids_hook()(ids);
  w.uvar(ids.size());
  for (size_t id : ids) w.uvar(id);
}

std::shared_ptr<const std::vector<size_t>> read_kernel_ids(ir::ByteReader& r,
                                                           const passes::FusionPlan& plan) {
  auto ids = std::make_shared<std::vector<size_t>>(r.count(1));
  if (ids->size() != plan.groups.size()) r.fail("kernel numbers of another fusion plan");
  for (size_t& id : *ids) {
    const uint64_t k = r.uvar();
    if (k >= ids->size()) r.fail("kernel number out of range");
    id = static_cast<size_t>(k);
  }
  return ids;
}

void write_bindings(ir::ByteWriter& w, const Plan& p) {
  w.uvar(p.inputs.size());
  for (const ir::InputBinding& b : p.inputs) {
    w.u8(b.kind);
    w.svar(b.index);
  }
  w.uvar(p.outputs.size());
  for (const ir::OutputBinding& b : p.outputs) {
    w.u8(b.kind);
    w.svar(b.index);
  }
}

std::vector<int> read_ints(ir::ByteReader& r) {
  std::vector<int> v(r.count(1));
  for (int& x : v) {
    const int64_t k = r.svar();
    if (k < 0 || k > INT32_MAX) r.fail("bad index");
    x = static_cast<int>(k);
  }
  return v;
}

void write_ints(ir::ByteWriter& w, const std::vector<int>& v) {
  w.uvar(v.size());
  for (int x : v) w.svar(x);
}

// What an entry holds, decoded before any of it goes into a Plan.
struct Loaded {
  std::vector<ir::InputBinding> inputs;
  std::vector<ir::OutputBinding> outputs;
  std::vector<int> bwd_grad_result, bwd_output_diff;
  size_t num_fwd_outputs = 0;
  int64_t remat_before = 0, remat_after = 0, predicted_peak = 0;
  bool budget_met = true;
  std::string remat_log;
  std::shared_ptr<ir::Graph> graph, bwd_graph;
  std::shared_ptr<passes::FusionPlan> fusion, bwd_fusion;
  std::shared_ptr<const std::vector<size_t>> kernel_ids, bwd_kernel_ids;
};

Loaded read_payload(std::string_view payload) {
  ir::ByteReader r(payload);
  Loaded l;
  l.inputs.resize(r.count(2));
  for (ir::InputBinding& b : l.inputs) {
    const uint8_t kind = r.u8();
    if (kind > ir::InputBinding::kGradOut) r.fail("bad input binding");
    b.kind = static_cast<ir::InputBinding::Kind>(kind);
    b.index = static_cast<int>(r.svar());
  }
  l.outputs.resize(r.count(2));
  for (ir::OutputBinding& b : l.outputs) {
    const uint8_t kind = r.u8();
    if (kind > ir::OutputBinding::kArgWrite) r.fail("bad output binding");
    b.kind = static_cast<ir::OutputBinding::Kind>(kind);
    b.index = static_cast<int>(r.svar());
  }
  l.bwd_grad_result = read_ints(r);
  l.bwd_output_diff = read_ints(r);
  l.num_fwd_outputs = static_cast<size_t>(r.uvar());
  l.remat_before = r.svar();
  l.remat_after = r.svar();
  l.budget_met = r.u8() != 0;
  l.remat_log = std::string(r.str());
  l.predicted_peak = r.svar();
  const bool has_bwd = r.u8() != 0;
  l.graph = ir::read_graph(r);
  l.fusion = read_fusion(r, *l.graph);
  l.kernel_ids = read_kernel_ids(r, *l.fusion);
  if (has_bwd) {
    l.bwd_graph = ir::read_graph(r);
    l.bwd_fusion = read_fusion(r, *l.bwd_graph);
    l.bwd_kernel_ids = read_kernel_ids(r, *l.bwd_fusion);
  }
  if (r.remaining() != 0) r.fail("trailing bytes");
  return l;
}

// The bindings agree with the plan's trace and the graphs' inputs/outputs:
// what a valid entry for this key always satisfies (a cheap second guard).
void check_consistent(const Loaded& l, const Plan& p) {
  KILN_CHECK(l.inputs.size() == l.graph->inputs().size() && l.outputs.size() == l.num_fwd_outputs &&
                 l.num_fwd_outputs <= l.graph->outputs().size() &&
                 (l.bwd_graph != nullptr) == !p.result_grad.empty() &&
                 (l.bwd_graph || l.num_fwd_outputs == l.graph->outputs().size()),
             "bindings do not match the graphs");
  for (const ir::InputBinding& b : l.inputs) {
    const size_t limit = b.kind == ir::InputBinding::kArg       ? p.args.size()
                         : b.kind == ir::InputBinding::kCapture ? p.captures.size()
                         : b.kind == ir::InputBinding::kHost    ? p.hosts.size()
                                                                : 0;
    KILN_CHECK(b.index >= 0 && static_cast<size_t>(b.index) < limit,
               "an input binding out of range");
  }
  for (const ir::OutputBinding& b : l.outputs) {
    const size_t limit = b.kind == ir::OutputBinding::kResult     ? p.num_results
                         : b.kind == ir::OutputBinding::kWrite    ? p.captures.size()
                         : b.kind == ir::OutputBinding::kGrad     ? p.captures.size()
                         : b.kind == ir::OutputBinding::kArgGrad  ? p.args.size()
                         : b.kind == ir::OutputBinding::kArgWrite ? p.args.size()
                         : b.kind == ir::OutputBinding::kEscaped  ? p.escaped.size()
                                                                  : 0;
    KILN_CHECK(b.index >= 0 && static_cast<size_t>(b.index) < limit,
               "an output binding out of range");
  }
}

std::string entry_path(const std::string& dir, const std::string& key) {
  return (std::filesystem::path(dir) / (key + ".plan")).string();
}

// The usable cache directory, or "" (the kernel cache warns about a refused one).
std::string usable_dir() {
  const std::string dir = kir::cache_dir();
  if (dir.empty() || !kir::check_cache_dir(dir).empty()) return "";
  return dir;
}

}  // namespace

void set_plan_cache_build_for_testing(const std::string& id) {
  build_override() = id;
}

void set_plan_cache_kernel_ids_for_testing(std::function<void(std::vector<size_t>&)> hook) {
  kernel_ids_hook() = std::move(hook);
}

std::string plan_cache_key(const Plan& p, const ir::Graph& traced, const CompileOptions& opts) {
  if (!opts.plan_cache || opts.freeze || kir::cache_dir().empty()) return "";
  // Diagnostics of the passes themselves (per-pass IR, times, remat cuts) need them to run.
  if (env::get_int("KILN_DEBUG", 0) >= 1 || env::get_flag("KILN_TIME_PASSES", false)) return "";
  ir::ByteWriter w;
  w.raw(kMagic, sizeof kMagic);
  w.uvar(kFormat);
  w.str(KILN_VERSION);
  w.str(build_override().empty() ? build_identity() : build_override());
  w.str(env::get("KILN_DISABLE_PASSES"));
  w.uvar(opts.pipeline.size());
  for (const std::string& s : opts.pipeline) w.str(s);
  w.svar(opts.memory_budget);
  w.u8(opts.fuse ? 1 : 0);
  w.u8(opts.interpret_kernels ? 1 : 0);
  w.u8(opts.reassociate ? 1 : 0);
  w.str(str(p.device));
  w.u8(p.result_grad.empty() ? 0 : 1);
  write_bindings(w, p);
  ir::write_graph(w, traced);
  const XXH128_hash_t h = XXH3_128bits(w.bytes().data(), w.bytes().size());
  unsigned char b[16];
  std::memcpy(b, &h.high64, 8);
  std::memcpy(b + 8, &h.low64, 8);
  return hex(b, sizeof b);
}

PlanSource load_cached_plan(Plan& p, const std::string& key, const CompileOptions& opts) {
  const std::string dir = usable_dir();
  if (dir.empty()) return PlanSource::kBuilt;
  profiler::Span span("compile", "plan cache");
  const auto t0 = std::chrono::steady_clock::now();
  const std::string path = entry_path(dir, key);
  std::string bytes, why;
  const kir::CacheFileRead got = kir::read_cache_file(path, bytes, why);
  if (got == kir::CacheFileRead::kAbsent) {
    log(str("miss ", key));
    return PlanSource::kBuilt;
  }
  Loaded l;
  std::unique_ptr<Executor> exec;
  std::shared_ptr<Executor> bwd_exec;
  try {
    KILN_CHECK(got == kir::CacheFileRead::kRead, why);
    const size_t head = sizeof kMagic + key.size() + 16;
    KILN_CHECK(bytes.size() >= head && std::memcmp(bytes.data(), kMagic, sizeof kMagic) == 0,
               "not a plan cache entry of this format");
    KILN_CHECK(bytes.compare(sizeof kMagic, key.size(), key) == 0, "the entry of another key");
    uint64_t size = 0, sum = 0;
    std::memcpy(&size, bytes.data() + sizeof kMagic + key.size(), 8);
    std::memcpy(&sum, bytes.data() + sizeof kMagic + key.size() + 8, 8);
    const std::string_view payload = std::string_view(bytes).substr(head);
    KILN_CHECK(size == payload.size(), "truncated (", payload.size(), " of ", size, " bytes)");
    KILN_CHECK(XXH64(payload.data(), payload.size(), 0) == sum, "checksum mismatch");
    l = read_payload(payload);
    check_consistent(l, p);
    // The graphs were verified when built and stored; the checksum matched, so
    // the executors skip verifying them again (59 ms at 29k nodes). The cache
    // directory is trusted as the kernel cache next to it is (it holds machine
    // code); the checksum guards against torn or corrupted entries.
    profiler::Span codegen("compile", "codegen");  // lowering, kernels (no fusion planning)
    ExecutorOptions eo = executor_options(opts, p.device, l.bwd_graph ? "forward" : "graph");
    eo.fusion.precomputed = l.fusion;
    eo.kernel_ids = l.kernel_ids;
    eo.verify = false;
    exec = std::make_unique<Executor>(l.graph, eo);
    if (l.bwd_graph) {
      ExecutorOptions bo = executor_options(opts, p.device, "backward");
      bo.fusion.precomputed = l.bwd_fusion;
      bo.kernel_ids = l.bwd_kernel_ids;
      bo.verify = false;
      bwd_exec = std::make_shared<Executor>(l.bwd_graph, bo);
    }
  } catch (const std::exception& e) {
    log(str("ignored ", path, ": ", e.what(), "; recomputing it"));
    return PlanSource::kRejected;
  }
  p.inputs = std::move(l.inputs);
  p.outputs = std::move(l.outputs);
  p.bwd_grad_result = std::move(l.bwd_grad_result);
  p.bwd_output_diff = std::move(l.bwd_output_diff);
  p.num_fwd_outputs = l.num_fwd_outputs;
  p.remat_before = l.remat_before;
  p.remat_after = l.remat_after;
  p.budget_met = l.budget_met;
  p.remat_log = std::move(l.remat_log);
  p.predicted_peak = l.predicted_peak;
  p.graph = std::move(l.graph);
  p.bwd_graph = std::move(l.bwd_graph);
  p.exec = std::move(exec);
  p.bwd_exec = std::move(bwd_exec);
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // recently used (bound_entries)
  log(str("hit ", key, " (",
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(),
          " ms)"));
  return PlanSource::kDisk;
}

void store_cached_plan(const Plan& p, const std::string& key) {
  const std::string dir = usable_dir();
  if (dir.empty() || !p.graph || !p.exec) return;
  ir::ByteWriter w;
  try {
    write_bindings(w, p);
    write_ints(w, p.bwd_grad_result);
    write_ints(w, p.bwd_output_diff);
    w.uvar(p.num_fwd_outputs);
    w.svar(p.remat_before);
    w.svar(p.remat_after);
    w.u8(p.budget_met ? 1 : 0);
    w.str(p.remat_log);
    w.svar(p.predicted_peak);
    w.u8(p.bwd_graph ? 1 : 0);
    ir::write_graph(w, *p.graph);
    write_fusion(w, *p.graph, p.exec->fusion_plan());
    write_kernel_ids(w, *p.exec);
    if (p.bwd_graph) {
      ir::write_graph(w, *p.bwd_graph);
      write_fusion(w, *p.bwd_graph, p.bwd_exec->fusion_plan());
      write_kernel_ids(w, *p.bwd_exec);
    }
  } catch (const std::exception& e) {
    log(str("not stored: ", e.what()));
    return;
  }
  const std::string& payload = w.bytes();
  std::string entry(kMagic, sizeof kMagic);
  entry += key;
  const uint64_t size = payload.size(), sum = XXH64(payload.data(), payload.size(), 0);
  entry.append(reinterpret_cast<const char*>(&size), 8);
  entry.append(reinterpret_cast<const char*>(&sum), 8);
  entry += payload;
  std::string err;
  if (!kir::write_cache_file(entry_path(dir, key), entry, &err))
    log(str("not stored: ", err));
  else
    log(str("stored ", key, " (", entry.size(), " bytes)"));
  bound_entries(dir);
}

}  // namespace kiln::detail
