// The disk plan cache (codegen/driver/plan_cache.cpp): a compile that loads
// its optimized plan from disk gives bit-identical results to one that ran the
// passes; another graph, option or kiln build misses; truncated, corrupt,
// foreign and garbage entries, and entries with wrong kernel numbers, are
// ignored and recomputed; two processes
// writing the same entries at once leave valid ones; freeze is never cached.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <optional>
#include <thread>

#include "common/forked_together.h"
#include "common/scoped_env.h"
#include "driver/compile_internal.h"
#include "kiln/compile.h"
#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::ScopedEnv;

// A private cache directory (mode 0700: the cache refuses ones others can write).
class CacheDir {
 public:
  CacheDir() {
    static int n = 0;
    path_ = fs::temp_directory_path() / str("kiln_plan_cache_test_", ::getpid(), "_", n++);
    fs::remove_all(path_);
    fs::create_directories(path_);
    fs::permissions(path_, fs::perms::owner_all);
    env_.emplace("KILN_CACHE_DIR", path_.string());
  }
  ~CacheDir() {
    env_.reset();
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::vector<fs::path> plans() const {
    std::vector<fs::path> v;
    for (const auto& e : fs::directory_iterator(path_))
      if (e.path().extension() == ".plan") v.push_back(e.path());
    return v;
  }
  std::vector<fs::path> all() const {
    std::vector<fs::path> v;
    for (const auto& e : fs::directory_iterator(path_)) v.push_back(e.path());
    return v;
  }

 private:
  fs::path path_;
  std::optional<ScopedEnv> env_;
};

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_file(const fs::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << s;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(),
                     static_cast<size_t>(a.numel()) * a.element_size()) == 0;
}

// A small training step: Linear/LayerNorm/GELU blocks, MSE, AdamW, compiled whole.
struct Trainer {
  std::shared_ptr<nn::Sequential> model = std::make_shared<nn::Sequential>();
  std::unique_ptr<optim::AdamW> opt;
  Tensor x, y;
  std::optional<Compiled<std::function<Tensor(const Tensor&, const Tensor&)>>> step;
  explicit Trainer(CompileOptions o = {}) {
    manual_seed(7);
    for (int i = 0; i < 3; ++i) {
      model->push_back(std::make_shared<nn::Linear>(16, 16));
      model->push_back(std::make_shared<nn::LayerNorm>(16));
      model->push_back(std::make_shared<nn::GELU>());
    }
    opt = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions{.lr = 1e-2});
    x = randn({8, 16});
    y = randn({8, 16});
    o.name = "train_step";
    step.emplace(compile(std::function<Tensor(const Tensor&, const Tensor&)>(
                             [this](const Tensor& a, const Tensor& b) {
                               opt->zero_grad();
                               Tensor loss = mse_loss(model->forward(a), b);
                               loss.backward();
                               opt->step();
                               return loss;
                             }),
                         o));
  }
  // Losses of `n` steps, then the parameters.
  std::vector<Tensor> run(int n) {
    std::vector<Tensor> out;
    for (int i = 0; i < n; ++i) out.push_back((*step)(x, y).clone());
    for (const Tensor& p : model->parameters()) out.push_back(p.detach().clone());
    return out;
  }
};

void expect_same(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(same_bits(a[i], b[i])) << "tensor " << i;
}

TEST(PlanCache, HitGivesBitIdenticalTrainingSteps) {
  CacheDir dir;
  Trainer cold;
  const std::vector<Tensor> want = cold.run(4);
  EXPECT_EQ(cold.step->stats().plan_cache_hits, 0);
  ASSERT_EQ(dir.plans().size(), 1u);
  Trainer warm;  // a new compiled function: finds the plan on disk
  const std::vector<Tensor> got = warm.run(4);
  EXPECT_EQ(warm.step->stats().traces, 1);
  EXPECT_EQ(warm.step->stats().plan_cache_hits, 1);
  EXPECT_EQ(warm.step->stats().plan_cache_rejected, 0);
  EXPECT_EQ(warm.step->stats().graph_nodes, cold.step->stats().graph_nodes);
  EXPECT_EQ(warm.step->stats().fused_kernels, cold.step->stats().fused_kernels);
  EXPECT_EQ(warm.step->stats().predicted_peak_bytes, cold.step->stats().predicted_peak_bytes);
  EXPECT_EQ(warm.step->graph_text(), cold.step->graph_text());
  expect_same(got, want);
  Trainer off({.plan_cache = false});
  expect_same(off.run(4), want);
  EXPECT_EQ(off.step->stats().plan_cache_hits, 0);
}

// A differentiable forward: its partitioned forward and backward graphs come
// from disk too, and so do the gradients.
TEST(PlanCache, DifferentiableForwardHits) {
  CacheDir dir;
  auto run = [] {
    manual_seed(3);
    nn::Linear lin(6, 5);
    auto f =
        compile([&](const Tensor& x) { return (lin.forward(x).tanh() * x.sum(1, true)).sum(); });
    Tensor x = randn({4, 6}).requires_grad_(true);
    std::vector<Tensor> out;
    for (int i = 0; i < 3; ++i) {
      lin.weight.set_grad(Tensor());
      x.set_grad(Tensor());
      Tensor l = f(x);
      l.backward();
      out.push_back(l.detach().clone());
      out.push_back(lin.weight.grad().clone());
      out.push_back(x.grad().clone());
    }
    return std::make_pair(out, f.stats().plan_cache_hits);
  };
  const auto [want, hits0] = run();
  EXPECT_EQ(hits0, 0);
  const auto [got, hits1] = run();
  EXPECT_EQ(hits1, 1);
  expect_same(got, want);
}

TEST(PlanCache, AnotherGraphOptionOrBuildMisses) {
  CacheDir dir;
  auto hits = [](std::function<Tensor(const Tensor&)> fn, CompileOptions o) {
    auto f = compile(fn, o);
    f(ones({4, 4}));
    f(ones({4, 4}));
    return f.stats().plan_cache_hits;
  };
  auto times2 = [](const Tensor& x) { return (x * 2).exp().sum(1); };
  auto times3 = [](const Tensor& x) { return (x * 3).exp().sum(1); };
  EXPECT_EQ(hits(times2, {}), 0);
  EXPECT_EQ(hits(times2, {}), 1);
  EXPECT_EQ(hits(times3, {}), 0);  // another graph
  EXPECT_EQ(hits(times2, {.reassociate = false}), 0);
  EXPECT_EQ(hits(times2, {.memory_budget = 1 << 20}), 0);
  EXPECT_EQ(hits(times2, {.fuse = false}), 0);
  {
    ScopedEnv off("KILN_DISABLE_PASSES", "cse");
    EXPECT_EQ(hits(times2, {}), 0);
  }
  detail::set_plan_cache_build_for_testing("another kiln build");
  EXPECT_EQ(hits(times2, {}), 0);
  detail::set_plan_cache_build_for_testing("");
  EXPECT_EQ(hits(times2, {}), 1);
  EXPECT_EQ(dir.plans().size(), 7u);
  // Another input shape is another traced graph.
  auto f = compile(std::function<Tensor(const Tensor&)>(times2));
  f(ones({4, 5}));
  f(ones({4, 5}));
  EXPECT_EQ(f.stats().plan_cache_hits, 0);
}

TEST(PlanCache, FreezeAndDisabledAreNeverStored) {
  CacheDir dir;
  Tensor w = full({4, 4}, 0.5);
  auto fn = [&](const Tensor& x) { return matmul(x, w.t() * 2); };
  auto frozen = compile(fn, {.freeze = true, .warmup = 0});
  frozen(ones({2, 4}));
  auto off = compile(fn, {.warmup = 0, .plan_cache = false});
  off(ones({2, 4}));
  EXPECT_TRUE(dir.plans().empty());
  {
    ScopedEnv no_disk("KILN_CACHE_DIR", "off");
    auto f = compile(fn, {.warmup = 0});
    f(ones({2, 4}));
  }
  EXPECT_TRUE(dir.plans().empty());
}

// Every kind of bad entry is ignored (counted, logged), the plan is recomputed
// with the right results, and the rewritten entry serves the next compile.
TEST(PlanCache, BadEntriesAreIgnoredAndRecomputed) {
  CacheDir dir;
  const std::vector<Tensor> want = Trainer().run(2);
  ASSERT_EQ(dir.plans().size(), 1u);
  const fs::path entry = dir.plans()[0];
  const std::string good = read_file(entry);
  // Another function's valid entry, for the "foreign" case.
  {
    auto g = compile([](const Tensor& x) { return x.exp() + 1; }, {.warmup = 0});
    g(ones({3}));
  }
  std::string foreign;
  for (const fs::path& p : dir.plans())
    if (p != entry) foreign = read_file(p);
  ASSERT_FALSE(foreign.empty());
  std::string flipped = good;
  flipped[flipped.size() / 2] ^= 0x20;
  std::string wrong_size = good;
  wrong_size[8 + 32] ^= 1;  // the payload size field
  const std::pair<const char*, std::string> bad[] = {
      {"empty", ""},
      {"truncated", good.substr(0, good.size() / 2)},
      {"header only", good.substr(0, 40)},
      {"flipped payload byte", flipped},
      {"wrong size field", wrong_size},
      {"another key's entry", foreign},
      {"garbage", std::string(5000, 'x')},
      {"longer", good + "trailing"},
  };
  for (const auto& [what, bytes] : bad) {
    SCOPED_TRACE(what);
    write_file(entry, bytes);
    std::optional<ScopedEnv> log;
    log.emplace("KILN_LOG", "plan_cache");
    ::testing::internal::CaptureStderr();
    Trainer t;
    const std::vector<Tensor> got = t.run(2);
    const std::string err = ::testing::internal::GetCapturedStderr();
    log.reset();
    EXPECT_EQ(t.step->stats().plan_cache_hits, 0);
    EXPECT_EQ(t.step->stats().plan_cache_rejected, 1);
    EXPECT_NE(err.find("plan cache: ignored"), std::string::npos) << err;
    expect_same(got, want);
    Trainer again;  // the recomputed plan was written back
    expect_same(again.run(2), want);
    EXPECT_EQ(again.step->stats().plan_cache_hits, 1);
  }
}

// Each fusion group's kernel number (a warm start lowers only each kernel's
// first group): an entry whose numbers are wrong, with a matching checksum, is
// rejected and recomputed, whether or not KILN_VERIFY=1 lowers every group to
// compare; right numbers give bit-identical steps without lowering the rest.
TEST(PlanCache, WrongKernelNumbersAreIgnoredAndRecomputed) {
  CacheDir dir;
  const std::vector<Tensor> want = Trainer().run(2);
  ASSERT_EQ(dir.plans().size(), 1u);
  const fs::path entry = dir.plans()[0];
  const std::string good = read_file(entry);
  using Ids = std::vector<size_t>;
  const std::pair<const char*, std::function<void(Ids&)>> bad[] = {
      {"every group its own kernel", [](Ids& ids) { std::iota(ids.begin(), ids.end(), 0); }},
      {"every group the first kernel", [](Ids& ids) { std::fill(ids.begin(), ids.end(), 0); }},
      {"not numbered by first use", [](Ids& ids) { ids[0] = 1; }},
      {"out of range", [](Ids& ids) { ids.back() = ids.size(); }},
      {"one number missing", [](Ids& ids) { ids.pop_back(); }},
  };
  for (const char* verify : {"0", "1"}) {
    ScopedEnv v("KILN_VERIFY", verify);
    {
      SCOPED_TRACE(str("right numbers, KILN_VERIFY=", verify));
      write_file(entry, good);
      Trainer t;
      expect_same(t.run(2), want);
      EXPECT_EQ(t.step->stats().plan_cache_hits, 1);
    }
    for (const auto& [what, hook] : bad) {
      SCOPED_TRACE(str(what, ", KILN_VERIFY=", verify));
      fs::remove(entry);
      detail::set_plan_cache_kernel_ids_for_testing(hook);
      Trainer().run(2);  // writes the entry with the wrong numbers
      detail::set_plan_cache_kernel_ids_for_testing({});
      ASSERT_EQ(dir.plans().size(), 1u);
      ASSERT_NE(read_file(entry), good);
      std::optional<ScopedEnv> log;
      log.emplace("KILN_LOG", "plan_cache");
      ::testing::internal::CaptureStderr();
      Trainer t;
      const std::vector<Tensor> got = t.run(2);
      const std::string err = ::testing::internal::GetCapturedStderr();
      log.reset();
      EXPECT_EQ(t.step->stats().plan_cache_hits, 0);
      EXPECT_EQ(t.step->stats().plan_cache_rejected, 1);
      EXPECT_NE(err.find("plan cache: ignored"), std::string::npos) << err;
      expect_same(got, want);
      EXPECT_EQ(read_file(entry), good);  // rewritten with the right numbers
    }
  }
}

// Two processes tracing the same functions at once both store every entry;
// the entries stay valid and no temporary file is left behind.
TEST(PlanCache, ConcurrentWritersAreSafe) {
  CacheDir dir;
  auto work = [](int* hits = nullptr) {
    std::vector<Tensor> out;
    for (int k = 1; k <= 4; ++k) {
      auto f = compile(
          [k](const Tensor& x) { return (x * static_cast<double>(k)).tanh().sum(0) + x.mean(); },
          {.warmup = 0});
      out.push_back(f(full({16, 8}, 0.25)));
      if (hits) *hits += f.stats().plan_cache_hits;
    }
    return out;
  };
  kiln::testing::run_forked_together(
      2,
      [&](int) {
        for (int rep = 0; rep < 3; ++rep) work();
        return 0;
      },
      std::chrono::seconds(120));
  EXPECT_EQ(dir.plans().size(), 4u);
  for (const fs::path& p : dir.all())
    EXPECT_EQ(p.string().find(".tmp."), std::string::npos) << "temporary left behind: " << p;
  std::vector<Tensor> got;
  {
    ScopedEnv off("KILN_CACHE_DIR", "off");
    got = work();
  }
  int hits = 0;
  const std::vector<Tensor> again = work(&hits);  // from the entries the children wrote
  EXPECT_EQ(hits, 4);
  expect_same(again, got);
}

}  // namespace
}  // namespace kiln
