// Shared by the example tests' `--device cuda` cases (gpt, resnet,
// fashion_mnist): the same training run on the CPU and on a CUDA device (a
// GPU, or the emulated device in CI), eagerly and compiled, for the test to
// compare.
#pragma once

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kiln/cuda.h"
#include "kiln/kiln.h"

namespace kiln::examples::testing {

/// One example's run on the CPU and the same run on cuda:0.
template <typename Result>
struct CpuAndCuda {
  Result cpu, gpu;
  std::string gpu_log;  ///< what the device run wrote
  bool compiled;        ///< trained through kiln::compile
  const char* mode;     ///< "compiled" or "eager", for messages
};

/// Trains with `o` through `train(options, log) -> Result` on the CPU and
/// then on cuda:0, eagerly and compiled (eager only under the sanitizers,
/// where it runs ~3x slower), and hands each pair to `check`. Skips the test
/// where no CUDA device is usable.
template <typename Options, typename Train, typename Check>
void train_on_cpu_and_cuda(const Options& o, Train train, Check check) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
#ifdef KILN_TEST_SANITIZED
  const std::vector<bool> modes = {false};
#else
  const std::vector<bool> modes = {false, true};
#endif
  for (bool compile : modes) {
    Options run = o;
    run.compile = compile;
    std::ostringstream log_cpu, log_gpu;
    auto cpu = train(run, log_cpu);
    run.device = Device::cuda();
    auto gpu = train(run, log_gpu);
    check(CpuAndCuda<decltype(cpu)>{std::move(cpu), std::move(gpu), log_gpu.str(), compile,
                                    compile ? "compiled" : "eager"});
  }
}

/// The device's per-step losses follow the CPU's: as many, each within
/// `rtol` of the CPU's (relative).
inline void expect_losses_follow(const std::vector<double>& gpu, const std::vector<double>& cpu,
                                 double rtol, const char* mode) {
  ASSERT_EQ(gpu.size(), cpu.size()) << mode;
  for (size_t i = 0; i < cpu.size(); ++i)
    EXPECT_NEAR(gpu[i], cpu[i], rtol * std::abs(cpu[i])) << mode << " step " << i + 1;
}

}  // namespace kiln::examples::testing
