// Verifies the profiler: op, autograd, pool and memory events, the Chrome
// trace file (parsed back, spans nested per thread), the table, merging and
// the memory snapshot.
#include "kiln/profiler.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "kiln/env.h"
#include "kiln/kiln.h"
#include "runtime/test_util.h"
#include "runtime/trace_check.h"

using namespace kiln;
namespace fs = std::filesystem;
namespace kt = kiln::testing;

namespace {

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / str("kiln_profiler_", ::getpid(), "_", name)).string();
}

// A small forward and backward: matmul, relu, sum, then the engine's nodes.
void small_step() {
  Tensor w = randn({16, 8}).requires_grad_();
  Tensor x = randn({4, 16});
  Tensor loss = relu(matmul(x, w)).sum();
  loss.backward();
}

}  // namespace

// Ops carry shapes and dtypes; backward nodes, memory counters and thread
// names appear; the file parses and every span nests within its parent.
TEST(Profiler, TraceOfAForwardAndBackwardIsWellFormed) {
  profiler::Profile p({.record_shapes = true, .profile_memory = true});
  small_step();
  p.stop();
  const std::string path = temp_path("step.json");
  p.export_chrome_trace(path);
  nlohmann::json t = kt::read_trace(path);
  ASSERT_FALSE(t.is_null());
  kt::expect_spans_nested(t);
  auto mm = kt::trace_events(t, "matmul");
  ASSERT_FALSE(mm.empty());
  EXPECT_EQ(mm[0]["cat"], "op");
  EXPECT_EQ(mm[0]["args"]["shapes"], "[4, 16], [16, 8]");
  EXPECT_EQ(mm[0]["args"]["dtypes"], "f32, f32");
  bool backward_node = false, names = false;
  for (const auto& e : t["traceEvents"]) {
    backward_node = backward_node || (e["ph"] == "X" && e["cat"] == "autograd");
    names = names || (e["ph"] == "M" && e["name"] == "thread_name");
  }
  EXPECT_TRUE(backward_node);
  EXPECT_TRUE(names);
  auto mem = kt::trace_events(t, "memory", "C");
  ASSERT_FALSE(mem.empty());
  EXPECT_TRUE(mem[0]["args"]["allocated_bytes"].is_number());
  fs::remove(path);
}

// Without a recording profile nothing is kept; a stopped profile keeps only
// its own window.
TEST(Profiler, RecordsOnlyInsideItsWindow) {
  if (!env::get("KILN_PROFILE").empty()) GTEST_SKIP() << "a whole-run profile records";
  profiler::Profile p;
  p.stop();
  EXPECT_FALSE(profiler::enabled());
  small_step();
  EXPECT_TRUE(p.events().empty());
  {
    profiler::Profile outer;
    small_step();
    profiler::Profile inner;
    Tensor y = randn({3}) + 1.0;
    inner.stop();
    outer.stop();
    EXPECT_GT(outer.events().size(), inner.events().size());
    bool add = false;
    for (const auto& e : inner.events()) add = add || e.name == "add";
    EXPECT_TRUE(add);
  }
  EXPECT_FALSE(profiler::enabled());
}

// The table lists each name once with its calls, total and self times;
// a parent's self time excludes its children.
TEST(Profiler, TableSumsTotalAndSelfTime) {
  profiler::Profile p;
  {
    profiler::Span outer("user", "outer");
    for (int i = 0; i < 3; ++i) Tensor y = randn({8}) * 2.0;
  }
  p.stop();
  const std::string t = p.table(profiler::SortBy::kTotal);
  EXPECT_NE(t.find("Self ms"), std::string::npos) << t;
  EXPECT_NE(t.find("outer"), std::string::npos) << t;
  EXPECT_NE(t.find("mul"), std::string::npos) << t;
  // Sorted by total, the enclosing span comes first.
  EXPECT_LT(t.find("outer"), t.find("mul")) << t;
  const std::string by_count = p.table(profiler::SortBy::kCount, 1);
  EXPECT_EQ(by_count.find("outer"), std::string::npos) << by_count;
}

// Pool chunks of a large op run on named worker threads, nested in order.
TEST(Profiler, PoolChunksAreSpansOnNamedWorkers) {
  if (num_threads() < 2) GTEST_SKIP() << "one thread: no pool workers";
  profiler::Profile p;
  Tensor a = randn({1 << 22});
  Tensor b = (a * 3.0).exp();
  p.stop();
  int chunks = 0;
  for (const auto& e : p.events()) chunks += e.name == "chunk";
  EXPECT_GT(chunks, 1);
  const std::string path = temp_path("pool.json");
  p.export_chrome_trace(path);
  nlohmann::json t = kt::read_trace(path);
  kt::expect_spans_nested(t);
  bool worker = false;
  for (const auto& e : t["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "thread_name")
      worker = worker || e["args"]["name"].get<std::string>().starts_with("pool worker");
  EXPECT_TRUE(worker);
  fs::remove(path);
}

// The snapshot names the op that allocated each live block.
TEST(Profiler, MemorySnapshotNamesTheAllocatingOp) {
  if (!env::get("KILN_PROFILE").empty()) GTEST_SKIP() << "a whole-run profile records";
  profiler::Profile p({.profile_memory = true});
  Tensor a = randn({256, 256});
  Tensor b = matmul(a, a);
  MemorySnapshot s = memory_snapshot();
  bool found = false;
  for (const MemoryBlock& m : s.blocks)
    if (m.op == "matmul" && m.bytes >= 256 * 256 * 4) found = true;
  EXPECT_TRUE(found) << s.str();
  EXPECT_NE(s.str().find("matmul"), std::string::npos);
  p.stop();
  EXPECT_TRUE(memory_snapshot().blocks.empty());
}

// Per-rank files merge into one parseable timeline that keeps both processes.
TEST(Profiler, MergesTraceFiles) {
  const std::string a = temp_path("a.json"), b = temp_path("b.json"), out = temp_path("m.json");
  {
    profiler::Profile p;
    Tensor y = randn({4}) + 1.0;
    p.export_chrome_trace(a);
    p.export_chrome_trace(b);
  }
  profiler::merge_chrome_traces({a, b}, out);
  nlohmann::json m = kt::read_trace(out);
  EXPECT_EQ(m["traceEvents"].size(), 2 * kt::read_trace(a)["traceEvents"].size());
  kt::expect_error([&] { profiler::merge_chrome_traces({temp_path("missing.json")}, out); },
                   "[merge_chrome_traces] cannot read");
  for (const auto& f : {a, b, out}) fs::remove(f);
}

// A path that cannot be written is a kiln::Error naming the operation.
TEST(Profiler, ExportToAnUnwritablePathThrows) {
  profiler::Profile p;
  p.stop();
  kt::expect_error([&] { p.export_chrome_trace("/nonexistent-dir/x/trace.json"); },
                   "[export_chrome_trace] cannot open");
}
