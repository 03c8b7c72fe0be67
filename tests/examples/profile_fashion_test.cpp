// Profiles the Fashion-MNIST CNN's training steps (eager and compiled) and
// validates the Chrome trace: parseable, spans nested per thread, and the
// ops, backward nodes, data-loader waits, compile phases and fused kernel
// launches (with bytes and GB/s) all present.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <sstream>

#include "fashion_mnist.h"
#include "kiln/data/fashion_mnist.h"
#include "kiln/profiler.h"
#include "runtime/trace_check.h"

namespace {

namespace fs = std::filesystem;

bool have_data() {
  return fs::exists(fs::path(kiln::data::FashionMNIST::kDefaultRoot) /
                    "train-images-idx3-ubyte.gz");
}

// Categories of the trace's spans.
std::set<std::string> categories(const nlohmann::json& t) {
  std::set<std::string> c;
  for (const auto& e : t["traceEvents"])
    if (e["ph"] == "X") c.insert(e["cat"].get<std::string>());
  return c;
}

nlohmann::json profile_cnn(bool compile) {
  kiln::examples::FashionOptions o;
  o.model = "cnn";
  o.epochs = 1;
  o.train_limit = 192;  // three steps of 64
  o.test_limit = 64;
  o.compile = compile;
  std::ostringstream log;
  kiln::profiler::Profile p({.record_shapes = true, .profile_memory = true});
  kiln::examples::train_fashion_mnist(o, log);
  p.stop();
  const std::string path =
      (fs::temp_directory_path() / kiln::str("kiln_cnn_profile_", ::getpid(), ".json")).string();
  p.export_chrome_trace(path);
  nlohmann::json t = kiln::testing::read_trace(path);
  fs::remove(path);
  EXPECT_FALSE(p.table().empty());
  return t;
}

}  // namespace

// Eager: conv ops with their shapes, backward nodes, the loader's waits.
TEST(ProfileFashionMnist, EagerCnnStep) {
  if (!have_data()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  nlohmann::json t = profile_cnn(false);
  ASSERT_FALSE(t.is_null());
  kiln::testing::expect_spans_nested(t);
  const auto cats = categories(t);
  for (const char* c : {"op", "autograd", "data"}) EXPECT_TRUE(cats.count(c)) << c;
  auto conv = kiln::testing::trace_events(t, "conv2d");
  ASSERT_FALSE(conv.empty());
  EXPECT_TRUE(conv[0]["args"].contains("shapes"));
  EXPECT_FALSE(kiln::testing::trace_events(t, "memory", "C").empty());
}

// Compiled: trace, passes and codegen spans, and fused kernels with bytes
// moved and achieved bandwidth.
TEST(ProfileFashionMnist, CompiledCnnStep) {
  if (!have_data()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  nlohmann::json t = profile_cnn(true);
  ASSERT_FALSE(t.is_null());
  kiln::testing::expect_spans_nested(t);
  for (const char* phase : {"trace", "codegen", "run compiled"})
    EXPECT_FALSE(kiln::testing::trace_events(t, phase).empty()) << phase;
  // The pass pipeline ran, or its result came from the disk plan cache (a test
  // run before this one in the same cache directory compiled the same step).
  EXPECT_TRUE(!kiln::testing::trace_events(t, "passes").empty() ||
              !kiln::testing::trace_events(t, "plan cache").empty());
  bool kernel = false;
  for (const auto& e : t["traceEvents"])
    if (e["ph"] == "X" && e["cat"] == "kernel") {
      kernel = true;
      EXPECT_TRUE(e["args"].contains("bytes") && e["args"].contains("GB/s") &&
                  e["args"].contains("work_items"))
          << e.dump();
    }
  EXPECT_TRUE(kernel);
}
