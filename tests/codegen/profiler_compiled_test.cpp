// The profiler on compiled calls: while memory is recorded, each compiled run
// reports its measured peak and the values alive there (memory_snapshot and a
// "peak of ..." span in the trace), and the kernel spans nest in the run.
#include <gtest/gtest.h>

#include "kiln/compile.h"
#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "kiln/profiler.h"

namespace kiln {
namespace {

// A forward + backward step of a small MLP, compiled: the peak names values of
// the graph (their producer op or fused kernel) and their sizes.
TEST(ProfilerCompiled, PeakReportNamesTheValuesAliveAtThePeak) {
  manual_seed(3);
  nn::Linear l1(32, 256), l2(256, 8);
  auto step = compile(
      [&](const Tensor& x) {
        Tensor loss = l2.forward(relu(l1.forward(x))).pow(2).mean();
        loss.backward();
        return loss.detach();
      },
      {.name = "mlp_step"});
  const Tensor x = randn({64, 32});
  step(x);  // traces and compiles outside the profile
  profiler::Profile p({.profile_memory = true});
  step(x);
  const MemorySnapshot s = memory_snapshot();
  p.stop();
  ASSERT_FALSE(s.compiled_peaks.empty()) << s.str();
  const PeakReport& r = s.compiled_peaks.front();
  EXPECT_NE(r.plan.find("mlp_step"), std::string::npos) << r.plan;
  EXPECT_GT(r.peak_bytes, 0);
  ASSERT_FALSE(r.values.empty());
  int64_t sum = 0;
  for (const PeakValue& v : r.values) {
    EXPECT_FALSE(v.value.empty());
    EXPECT_FALSE(v.op.empty());
    EXPECT_GT(v.bytes, 0);
    sum += v.bytes;
  }
  EXPECT_EQ(sum, r.peak_bytes);  // the listed buffers are the peak
  // The hidden activation [64, 256] (64 KiB) is among the largest values.
  EXPECT_GE(r.values.front().bytes, 64 * 256 * 4) << s.str();
  EXPECT_NE(s.str().find("peak of"), std::string::npos);
  bool span = false, kernel = false;
  for (const profiler::Event& e : p.events()) {
    span = span || e.name.rfind("peak of", 0) == 0;
    kernel = kernel || e.cat == "kernel";
  }
  EXPECT_TRUE(span);
  EXPECT_TRUE(kernel);
}

}  // namespace
}  // namespace kiln
