// `kilnrun --nproc-per-node 2 ddp_fashion_mnist --device cuda`: two ranks on
// loopback train over the "nccl" group on a CUDA device (in CI: the emulated
// device, which both ranks share, and the emulated NCCL) and end with the
// losses and accuracy of the same job on the CPU over Gloo (the same batches,
// initial weights and dropout masks: the device draws the CPU's numbers; the
// CUDA job alone under ASan). Every wait is bounded.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "distributed/kilnrun_test_util.h"
#include "kiln/cuda.h"
#include "kiln/data/fashion_mnist.h"

namespace {

namespace kr = kiln::testing::kilnrun;

// A 2-rank job of the example, its output; kiln::Error-free: failures are gtest's.
kr::Result run_job(const std::vector<std::string>& example_args) {
  const std::string dir = kr::make_temp_dir();
  std::vector<std::string> args = {"--nproc-per-node", "2", "--master-port",      "0",
                                   "--grace-period",   "2", KILN_DDP_EXAMPLE_PATH};
  args.insert(args.end(), example_args.begin(), example_args.end());
  kr::Result r = kr::run_kilnrun(args, dir, 240);
  std::filesystem::remove_all(dir);
  return r;
}

// The number after `key` in rank 0's output (-1 when missing).
double figure(const std::string& out, const std::string& key) {
  const size_t at = out.find(key);
  return at == std::string::npos ? -1.0 : std::stod(out.substr(at + key.size()));
}

}  // namespace

TEST(ExampleDdp, TrainsOnACudaDeviceUnderKilnrunLikeOnTheCpu) {
  if (!std::filesystem::exists(kiln::data::FashionMNIST::kDefaultRoot))
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  if (!kiln::cuda::is_available())
    GTEST_SKIP() << "no CUDA device: " << kiln::cuda::unavailable_reason();
  const std::vector<std::string> args = {"--limit",      "32", "--batch-size", "8", "--epochs", "1",
                                         "--test-limit", "40", "--log-every",  "1"};
  std::vector<std::string> cuda_args = args;
  cuda_args.insert(cuda_args.end(), {"--device", "cuda"});
  const kr::Result gpu = run_job(cuda_args);
  ASSERT_FALSE(gpu.timed_out) << gpu.out << gpu.err;
  ASSERT_EQ(gpu.code, 0) << gpu.out << gpu.err;
  EXPECT_NE(gpu.out.find("[rank 0] ddp: 2 ranks, mlp (eager), 32 training images (16 per rank)"),
            std::string::npos)
      << gpu.out;
  EXPECT_NE(gpu.out.find("on cuda (nccl)"), std::string::npos) << gpu.out;
  const double loss_gpu = figure(gpu.out, "mean loss ");
  EXPECT_GT(loss_gpu, 0) << gpu.out;
  EXPECT_GE(figure(gpu.out, "final test accuracy "), 0) << gpu.out;
#ifndef KILN_TEST_SANITIZED  // the CPU job too: ~13 s more under ASan
  const kr::Result cpu = run_job(args);
  ASSERT_FALSE(cpu.timed_out) << cpu.out << cpu.err;
  ASSERT_EQ(cpu.code, 0) << cpu.out << cpu.err;
  EXPECT_NE(cpu.out.find("on cpu (gloo)"), std::string::npos) << cpu.out;
  EXPECT_NEAR(loss_gpu, figure(cpu.out, "mean loss "), 1e-3) << gpu.out << cpu.out;
  EXPECT_DOUBLE_EQ(figure(gpu.out, "final test accuracy "), figure(cpu.out, "final test accuracy "))
      << gpu.out << cpu.out;
#endif
}
