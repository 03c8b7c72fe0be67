// DistributedDataParallel with CUDA parameters over the NCCL group, on the
// emulated device: 2 and 4 forked ranks train eagerly and end with the parameters of
// one process trained on the whole batch (on the CPU); each bucket's
// all-reduce is launched during backward; the bf16 compression hook runs as
// device casts. Tiny models (the emulated device is slow).
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "distributed/store_ranks.h"
#include "kiln/distributed/ddp.h"
#include "kiln/distributed/process_group.h"
#include "kiln/distributed/store.h"

namespace kiln::dist {
namespace {

using namespace std::chrono_literals;

struct Batch {
  Tensor x, y;
};

std::shared_ptr<nn::Sequential> make_mlp(uint64_t seed) {
  manual_seed(seed);
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(6, 8),
                                          std::make_shared<nn::ReLU>(),
                                          std::make_shared<nn::Linear>(8, 3));
}

std::vector<Batch> make_batches(int steps, int64_t b) {
  manual_seed(42);
  std::vector<Batch> out;
  for (int s = 0; s < steps; ++s) out.push_back({randn({2 * b, 6}), randint(0, 3, {2 * b})});
  return out;
}

// The reference: one process on the CPU, batch 2B.
std::vector<Tensor> train_single(const std::vector<Batch>& data) {
  auto m = make_mlp(1);
  optim::SGD opt(m->parameters(), {.lr = 0.1, .momentum = 0.9});
  for (const auto& b : data) {
    opt.zero_grad();
    cross_entropy(m->forward(b.x), b.y).backward();
    opt.step();
  }
  return m->parameters();
}

std::string close_to(const std::vector<Tensor>& got, const std::vector<Tensor>& want, double tol) {
  if (got.size() != want.size()) return "parameter counts differ";
  for (size_t i = 0; i < got.size(); ++i) {
    Tensor g = got[i].to(Device::cpu()).to(DType::f64).reshape({-1});
    Tensor w = want[i].to(DType::f64).reshape({-1});
    for (int64_t k = 0; k < g.numel(); ++k) {
      const double a = g.data<double>()[k], b = w.data<double>()[k];
      if (std::abs(a - b) > tol * (1 + std::abs(b)))
        return str("param ", i, " element ", k, ": ", a, " vs ", b);
    }
  }
  return "";
}

// Rank `rank` of `size` trains on its share of every batch, its model on the
// device.
// Rank 1 starts from other weights: DDP's broadcast replaces them.
std::string train_rank(int rank, int size, uint64_t port, bool bf16) {
  TCPStoreOptions co;
  co.host = "127.0.0.1";
  co.port = uint16_t(port);
  co.timeout = 30s;
  auto store = std::make_shared<TCPStore>(co);
  ProcessGroupOptions po;
  po.timeout = 30s;
  po.host = "127.0.0.1";
  auto pg = make_nccl_group(store, rank, size, rank, po, "ddp");
  auto data = make_batches(3, 4);
  auto ref = train_single(data);
  auto m = make_mlp(rank + 1);
  m->to(Device::cuda(0));
  DistributedDataParallel ddp(m, {.first_bucket_mb = 1e-4, .process_group = pg});
  if (ddp.num_buckets() < 2) return str("expected several buckets; got ", ddp.num_buckets());
  std::vector<Clock::time_point> launched;
  ddp.register_comm_hook([&](ProcessGroup& g, const GradBucket& b) {
    launched.push_back(Clock::now());
    return bf16 ? bf16_compress_hook(g, b) : allreduce_hook(g, b);
  });
  optim::SGD opt(m->parameters(), {.lr = 0.1, .momentum = 0.9});
  const int64_t b = 8 / size;  // every batch holds 8 examples
  for (const auto& bt : data) {
    opt.zero_grad();
    launched.clear();
    Tensor x = bt.x.narrow(0, rank * b, b).contiguous().to(Device::cuda(0));
    Tensor y = bt.y.narrow(0, rank * b, b).contiguous().to(Device::cuda(0));
    cross_entropy(ddp(x), y).backward();
    if (launched.size() != ddp.num_buckets()) return "not every bucket was launched";
    // Bucket 0 (the last layer's gradients) started before backward ended.
    if (!(launched[0] < ddp.last_backward_end())) return "bucket 0 launched after backward";
    opt.step();
  }
  return close_to(m->parameters(), ref, bf16 ? 2e-2 : 1e-5);
}

void run_ranks(int size, bool bf16) {
  auto status = testing::run_store_ranks(
      size, [&](int rank, uint64_t port) { return train_rank(rank, size, port, bf16); }, 120s);
  EXPECT_EQ(status, std::vector<int>(size_t(size), 0)) << "see the ranks' stderr (-1: timed out)";
}

TEST(NcclDDP, TwoRanksOnTheDeviceMatchOneProcess) {
  run_ranks(2, false);
}

TEST(NcclDDP, FourRanksOnTheDeviceMatchOneProcess) {
  run_ranks(4, false);
}

TEST(NcclDDP, Bf16CompressionRunsOnTheDevice) {
  run_ranks(2, true);
}

}  // namespace
}  // namespace kiln::dist
