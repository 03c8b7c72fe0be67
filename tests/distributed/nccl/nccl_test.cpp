// NCCL through dlopen: loading, version and unique ids need no driver (CI
// runs them); a one-rank communicator's all-reduce runs where a GPU exists.
#include <cstring>
#include <vector>

#include "kernels/cuda/driver.h"
#include "kernels/cuda/module.h"
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

}  // namespace
}  // namespace kiln::dist::nccl
