// NCCL through dlopen: loading, version and unique ids need no driver (CI
// runs them); a one-rank communicator's all-reduce, a one-rank group's eager
// and compiled DDP steps run where a GPU exists (skipped elsewhere).
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/driver.h"
#include "kernels/cuda/module.h"
#include "kiln/compile.h"
#include "kiln/cuda.h"
#include "kiln/distributed/ddp.h"
#include "kiln/distributed/process_group.h"
#include "nccl_lib.h"

namespace kiln::dist::nccl {
namespace {

TEST(Nccl, LoadsAndMakesUniqueIdsWithoutAGpu) {
  ASSERT_TRUE(available()) << "NCCL ships with the CUDA toolkit kiln was built with";
  int version = 0;
  check(lib().ncclGetVersion(&version), "ncclGetVersion");
  EXPECT_GE(version, 22800);
  ncclUniqueId a{}, b{};
  check(lib().ncclGetUniqueId(&a), "ncclGetUniqueId");
  check(lib().ncclGetUniqueId(&b), "ncclGetUniqueId");
  EXPECT_NE(std::memcmp(&a, &b, sizeof a), 0);
}

TEST(Nccl, ErrorsCarryNcclsMessage) {
  try {
    check(ncclInvalidArgument, "ncclAllReduce");
    FAIL() << "expected kiln::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[nccl] ncclAllReduce failed"), std::string::npos)
        << e.what();
  }
}

TEST(Nccl, OneRankAllReduceOnTheGpu) {
  // The real library needs a real GPU (the emulated device has the emulated NCCL).
  if (!cuda::is_available() || cuda::driver().emulated)
    GTEST_SKIP() << "no CUDA GPU: " << cuda::unavailable_reason();
  cuda::set_device(0);
  ncclUniqueId id{};
  check(lib().ncclGetUniqueId(&id), "ncclGetUniqueId");
  ncclComm_t comm = nullptr;
  check(lib().ncclCommInitRank(&comm, 1, id, 0), "ncclCommInitRank");
  std::vector<float> host(1 << 20);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i % 97) - 48.0f;
  cuda::DeviceBuffer in(host.size() * 4), out(host.size() * 4);
  in.upload(host.data(), host.size() * 4);
  check(lib().ncclAllReduce(reinterpret_cast<void*>(in.get()), reinterpret_cast<void*>(out.get()),
                            host.size(), ncclFloat32, ncclSum, comm, nullptr),
        "ncclAllReduce");
  cuda::check(cuda::driver().cuCtxSynchronize(), "cuCtxSynchronize");
  std::vector<float> got(host.size());
  out.download(got.data(), got.size() * 4);
  EXPECT_EQ(got, host);
  ncclResult_t async = ncclSuccess;
  check(lib().ncclCommGetAsyncError(comm, &async), "ncclCommGetAsyncError");
  EXPECT_EQ(async, ncclSuccess);
  check(lib().ncclCommDestroy(comm), "ncclCommDestroy");
}

// A one-rank NCCL group over the real library (a store on loopback).
std::shared_ptr<ProcessGroup> one_rank_group(TCPStoreServer& server, const std::string& prefix) {
  TCPStoreOptions co;
  co.host = "127.0.0.1";
  co.port = server.port();
  return make_nccl_group(std::make_shared<TCPStore>(co), 0, 1, 0, {}, prefix);
}

std::shared_ptr<nn::Sequential> small_mlp() {
  manual_seed(7);
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(32, 64),
                                          std::make_shared<nn::ReLU>(),
                                          std::make_shared<nn::Linear>(64, 10));
}

// `steps` SGD steps of small_mlp() on the CPU, and through `gpu_step` (given
// the model on the GPU, its optimizer, the batch on the GPU); parameters compared.
void expect_gpu_steps_match_cpu(
    int steps, const std::function<void(std::shared_ptr<nn::Sequential>, optim::SGD&, const Tensor&,
                                        const Tensor&)>& gpu_steps) {
  manual_seed(1);
  Tensor in = randn({16, 32});
  Tensor target = randint(0, 10, {16});
  auto ref = small_mlp();
  optim::SGD ref_opt(ref->parameters(), {.lr = 0.1});
  for (int step = 0; step < steps; ++step) {
    ref_opt.zero_grad();
    cross_entropy(ref->forward(in), target).backward();
    ref_opt.step();
  }
  auto m = small_mlp();
  m->to(Device::cuda(0));
  optim::SGD opt(m->parameters(), {.lr = 0.1});
  gpu_steps(m, opt, in.to(Device::cuda(0)), target.to(Device::cuda(0)));
  auto want = ref->parameters(), got = m->parameters();
  for (size_t i = 0; i < want.size(); ++i) {
    Tensor g = got[i].to(Device::cpu());
    for (int64_t k = 0; k < g.numel(); ++k)
      EXPECT_NEAR(g.data<float>()[k], want[i].data<float>()[k], 1e-4) << "param " << i;
  }
}

// On a GPU (tools/device/gpu_checks.sh): a one-rank NCCL process group over
// the real library, its collectives, and two DDP steps of a small MLP on the
// device against the same steps on the CPU.
TEST(Nccl, OneRankGroupAndDdpStepsOnTheGpu) {
  if (!cuda::is_available() || cuda::driver().emulated)
    GTEST_SKIP() << "no CUDA GPU: " << cuda::unavailable_reason();
  TCPStoreServerOptions so;
  so.host = "127.0.0.1";
  TCPStoreServer server(so);
  auto pg = one_rank_group(server, "gpu");
  ASSERT_EQ(pg->backend(), "nccl");
  Tensor x = arange(0.0, 1000.0, 1.0, DType::f32).to(Device::cuda(0));
  pg->all_reduce(x, ReduceOp::kAvg)->wait();
  pg->broadcast(x, 0)->wait();
  pg->barrier()->wait(std::chrono::milliseconds(60000));
  Tensor back = x.to(Device::cpu());
  EXPECT_EQ(back.data<float>()[999], 999.0f);
  expect_gpu_steps_match_cpu(2, [&](auto m, optim::SGD& opt, const Tensor& in, const Tensor& t) {
    DistributedDataParallel ddp(m, {.first_bucket_mb = 1e-3, .process_group = pg});
    for (int step = 0; step < 2; ++step) {
      opt.zero_grad();
      cross_entropy(ddp(in), t).backward();
      opt.step();
    }
  });
}

// On a GPU: the whole DDP step compiled (the bucket all-reduces as
// collective_start/collective_wait nodes on the device) over a one-rank NCCL
// group, four steps against the CPU; from the third step on, the plan replays
// a CUDA graph with the NCCL all-reduces captured in it.
TEST(Nccl, OneRankCompiledDdpStepOnTheGpu) {
  if (!cuda::is_available() || cuda::driver().emulated)
    GTEST_SKIP() << "no CUDA GPU: " << cuda::unavailable_reason();
  TCPStoreServerOptions so;
  so.host = "127.0.0.1";
  TCPStoreServer server(so);
  auto pg = one_rank_group(server, "gpu_compiled");
  expect_gpu_steps_match_cpu(4, [&](auto m, optim::SGD& opt, const Tensor& in, const Tensor& t) {
    DistributedDataParallel ddp(m, {.first_bucket_mb = 1e-3, .process_group = pg});
    auto step = compile(
        [&](const Tensor& x, const Tensor& y) {
          opt.zero_grad();
          Tensor loss = cross_entropy(ddp(x), y);
          loss.backward();
          opt.step();
          return loss;
        },
        {.name = "gpu_ddp_step"});
    const cuda::GraphStats before = cuda::graph_stats();
    for (int i = 0; i < 4; ++i) step(in, t);
    const cuda::GraphStats after = cuda::graph_stats();
    EXPECT_GE(step.stats().compiled_calls, 1);
    EXPECT_EQ(after.captures - before.captures, 1);
    EXPECT_EQ(after.replays - before.replays, 2);  // steps 3 (the capture's) and 4
    EXPECT_EQ(after.fallbacks - before.fallbacks, 0) << after.last_fallback;
  });
}

}  // namespace
}  // namespace kiln::dist::nccl
