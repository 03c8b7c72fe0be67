// NCCL through dlopen: loading, version and unique ids need no driver (CI
// runs them); a one-rank communicator's all-reduce runs where a GPU exists.
#include <cstring>
#include <vector>

#include "kernels/cuda/driver.h"
#include "kernels/cuda/module.h"
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
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
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

// On a GPU (tools/device/gpu_checks.sh): a one-rank NCCL process group over
// the real library, its collectives, and two DDP steps of a small MLP on the
// device against the same steps on the CPU.
TEST(Nccl, OneRankGroupAndDdpStepsOnTheGpu) {
  if (!cuda::is_available() || cuda::driver().emulated)
    GTEST_SKIP() << "no CUDA GPU: " << cuda::unavailable_reason();
  TCPStoreServerOptions so;
  so.host = "127.0.0.1";
  TCPStoreServer server(so);
  TCPStoreOptions co;
  co.host = "127.0.0.1";
  co.port = server.port();
  auto pg = make_nccl_group(std::make_shared<TCPStore>(co), 0, 1, 0, {}, "gpu");
  ASSERT_EQ(pg->backend(), "nccl");
  Tensor x = arange(0.0, 1000.0, 1.0, DType::f32).to(Device::cuda(0));
  pg->all_reduce(x, ReduceOp::kAvg)->wait();
  pg->broadcast(x, 0)->wait();
  pg->barrier()->wait(std::chrono::milliseconds(60000));
  Tensor back = x.to(Device::cpu());
  EXPECT_EQ(back.data<float>()[999], 999.0f);

  auto make = [] {
    manual_seed(7);
    return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(32, 64),
                                            std::make_shared<nn::ReLU>(),
                                            std::make_shared<nn::Linear>(64, 10));
  };
  manual_seed(1);
  Tensor in = randn({16, 32});
  Tensor target = randint(0, 10, {16});
  auto ref = make();
  optim::SGD ref_opt(ref->parameters(), {.lr = 0.1});
  auto m = make();
  m->to(Device::cuda(0));
  DistributedDataParallel ddp(m, {.first_bucket_mb = 1e-3, .process_group = pg});
  optim::SGD opt(m->parameters(), {.lr = 0.1});
  const Tensor in_gpu = in.to(Device::cuda(0)), target_gpu = target.to(Device::cuda(0));
  for (int step = 0; step < 2; ++step) {
    ref_opt.zero_grad();
    cross_entropy(ref->forward(in), target).backward();
    ref_opt.step();
    opt.zero_grad();
    cross_entropy(ddp(in_gpu), target_gpu).backward();
    opt.step();
  }
  auto want = ref->parameters(), got = m->parameters();
  for (size_t i = 0; i < want.size(); ++i) {
    Tensor g = got[i].to(Device::cpu());
    for (int64_t k = 0; k < g.numel(); ++k)
      EXPECT_NEAR(g.data<float>()[k], want[i].data<float>()[k], 1e-4) << "param " << i;
  }
}

}  // namespace
}  // namespace kiln::dist::nccl
