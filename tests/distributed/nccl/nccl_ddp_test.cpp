// DistributedDataParallel with CUDA parameters over the NCCL group, on the
// emulated device: 2 and 4 forked ranks train eagerly and end with the parameters of
// one process trained on the whole batch (on the CPU); each bucket's
// all-reduce is launched during backward; the bf16 compression hook runs as
// device casts. Compiled steps: the collective ops on device tensors, the
// whole compiled DDP step against eager DDP and one process, and a bucket's
// collective_start before backward's last kernel. Tiny models (the emulated
// device is slow).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "distributed/ddp_reference.h"
#include "distributed/nccl/nccl_store_group.h"
#include "distributed/store_ranks.h"
#include "kiln/collective.h"
#include "kiln/compile.h"
#include "kiln/distributed/ddp.h"
#include "kiln/distributed/process_group.h"
#include "kiln/distributed/store.h"
#include "kiln/profiler.h"

namespace kiln::dist {
namespace {

using namespace std::chrono_literals;

using testing::Batch;

std::shared_ptr<nn::Sequential> make_mlp(uint64_t seed) {
  return testing::make_mlp(seed, {6, 8, 3});
}

std::vector<Batch> make_batches(int steps, int64_t b) {
  return testing::make_batches(steps, b, 6, 3);
}

// The reference: one process on the CPU, batch 2B.
std::vector<Tensor> train_single(const std::vector<Batch>& data) {
  return testing::train_single(make_mlp(1), data);
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
// This rank's NCCL group, through the test's store on `port`.
std::shared_ptr<ProcessGroup> nccl_group(int rank, int size, uint64_t port) {
  return testing::nccl_store_group(rank, size, port, "ddp");
}

std::string train_rank(int rank, int size, uint64_t port, bool bf16) {
  auto pg = nccl_group(rank, size, port);
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

// ---- compiled steps: collective_start/collective_wait on the device ----------

// The collective ops on device tensors, over group 0 (this process alone):
// the handle is a device scalar holding the key, found again without reading
// it back; a copy of the handle (other storage) is read back and works too.
// In a forked child, as every test here: a parent that used the emulated
// device would fork children that cannot (PoCL's threads are not forked).
std::string device_ops_rank() {
  Tensor a = arange(0.0, 6.0, 1.0, DType::f32).reshape({2, 3}).to(Device::cuda(0));
  Tensor b = full({4}, 2.5, DType::f32).to(Device::cuda(0));
  Tensor h = collective_start({a, b}, 0, 0);
  if (h.device() != Device::cuda(0) || h.dtype() != DType::i64)
    return str("the handle is ", h.dtype(), " on ", h.device());
  auto r = collective_wait(h, {a, b}, 0);
  if (r.size() != 2) return str(r.size(), " results");
  if (auto why = close_to({r[0], r[1]}, {a.to(Device::cpu()), b.to(Device::cpu())}, 0);
      !why.empty())
    return why;
  Tensor h2 = collective_start({b}, 0, 0);
  if (h2.to(Device::cpu()).item<int64_t>() >= 0) return "the key was not written to the device";
  auto r2 = collective_wait(h2.clone(), {b}, 0);
  if (auto why = close_to({r2[0]}, {b.to(Device::cpu())}, 0); !why.empty()) return why;
  try {
    collective_wait(h2, {b}, 0);
  } catch (const Error& e) {
    if (std::string(e.what()).find("already waited for") != std::string::npos) return "";
    return str("unexpected error: ", e.what());
  }
  return "a second wait of one handle was not refused";
}

TEST(NcclDDP, CollectiveOpsRunOnDeviceTensors) {
  auto status = testing::run_store_ranks(
      1, [&](int, uint64_t) { return device_ops_rank(); }, 120s);
  EXPECT_EQ(status, std::vector<int>(1, 0)) << "see the rank's stderr (-1: timed out)";
}

// Rank `rank`'s parameters after training on its share of `data` with DDP on
// the device: eagerly, or with the whole step (zero_grad, forward, backward,
// SGD update) one compiled graph whose bucket all-reduces are collective nodes.
std::string train_on_device(ProcessGroup& pg, const std::vector<Batch>& data, bool compiled,
                            std::vector<Tensor>& params) {
  const int rank = pg.rank(), size = pg.size();
  auto m = make_mlp(uint64_t(rank) + 1);
  m->to(Device::cuda(0));
  auto borrowed = std::shared_ptr<ProcessGroup>(&pg, [](ProcessGroup*) {});
  DistributedDataParallel ddp(m, {.first_bucket_mb = 1e-4, .process_group = borrowed});
  if (ddp.num_buckets() < 2) return str("expected several buckets; got ", ddp.num_buckets());
  optim::SGD opt(m->parameters(), {.lr = 0.1, .momentum = 0.9});
  auto step = compile(
      [&](const Tensor& x, const Tensor& y) {
        opt.zero_grad();
        Tensor loss = cross_entropy(ddp(x), y);
        loss.backward();
        opt.step();
        return loss;
      },
      {.enabled = compiled, .name = "nccl_ddp_whole_step"});
  const int64_t b = data[0].x.size(0) / size;
  for (const auto& bt : data)
    step(bt.x.narrow(0, rank * b, b).contiguous().to(Device::cuda(0)),
         bt.y.narrow(0, rank * b, b).contiguous().to(Device::cuda(0)));
  if (compiled && step.stats().compiled_calls < 2)
    return str("the compiled step ran its plan ", step.stats().compiled_calls,
               " times; expected at least 2 of ", data.size());
  params.clear();
  for (const Tensor& p : m->parameters()) params.push_back(p.to(Device::cpu()));
  return "";
}

// 2 ranks: the compiled DDP step on the device trains exactly as eager DDP on
// the device, and as one process on the CPU with the whole batch.
TEST(NcclDDP, CompiledStepOnTheDeviceMatchesEagerAndOneProcess) {
  auto status = testing::run_store_ranks(
      2,
      [&](int rank, uint64_t port) -> std::string {
        auto pg = nccl_group(rank, 2, port);
        auto data = make_batches(5, 4);
        auto ref = train_single(data);
        std::vector<Tensor> eager, comp;
        if (auto why = train_on_device(*pg, data, false, eager); !why.empty()) return why;
        if (auto why = train_on_device(*pg, data, true, comp); !why.empty()) return why;
        if (auto why = close_to(comp, eager, 1e-6); !why.empty())
          return "compiled vs eager: " + why;
        if (auto why = close_to(comp, ref, 1e-5); !why.empty()) return "vs one process: " + why;
        return "";
      },
      180s);
  EXPECT_EQ(status, std::vector<int>(2, 0)) << "see the ranks' stderr (-1: timed out)";
}

// In the compiled step's plan (forward and backward, trace_collectives), every
// bucket's collective_start runs, and the first one is enqueued before the
// last of backward's kernels: the all-reduce overlaps the rest of backward.
// Order of the executor's spans on this thread, no timing.
std::string overlap_rank(int rank, uint64_t port) {
  auto pg = nccl_group(rank, 2, port);
  auto m = make_mlp(1);
  m->to(Device::cuda(0));
  DistributedDataParallel ddp(m, {.first_bucket_mb = 1e-4, .process_group = pg});
  auto fwd_bwd = compile(
      [&](const Tensor& x, const Tensor& y) {
        Tensor loss = cross_entropy(ddp(x), y);
        loss.backward();
        return loss;
      },
      {.name = "nccl_ddp_overlap"});
  // The second call is profiled: it captures the plan into a CUDA graph,
  // running its nodes in order (the later calls replay the graph: no spans).
  auto data = make_batches(2, 4);
  std::vector<profiler::Event> events;
  for (size_t i = 0; i < data.size(); ++i) {
    m->zero_grad();
    Tensor x = data[i].x.narrow(0, rank * 4, 4).contiguous().to(Device::cuda(0));
    Tensor y = data[i].y.narrow(0, rank * 4, 4).contiguous().to(Device::cuda(0));
    if (i + 1 < data.size()) {
      fwd_bwd(x, y);
      continue;
    }
    profiler::Profile prof;
    fwd_bwd(x, y);
    prof.stop();
    events = prof.events();
  }
  if (fwd_bwd.stats().compiled_calls < 1) return "the plan never ran";
  std::sort(events.begin(), events.end(),
            [](const auto& a, const auto& b) { return a.ts_ns < b.ts_ns; });
  int64_t first_start = -1, last_compute = -1;
  size_t starts = 0;
  for (const auto& e : events) {
    if (e.cat != "node" && e.cat != "kernel") continue;
    if (e.name == "collective_start") {
      if (starts++ == 0) first_start = e.ts_ns;
    } else if (e.name != "collective_wait") {
      last_compute = e.ts_ns;
    }
  }
  if (starts != ddp.num_buckets())
    return str(starts, " collective_start nodes ran; DDP has ", ddp.num_buckets(), " buckets");
  if (!(first_start < last_compute))
    return "the first bucket's collective started after backward's last kernel";
  return "";
}

TEST(NcclDDP, CompiledStepStartsABucketBeforeBackwardsLastKernel) {
  auto status = testing::run_store_ranks(
      2, [&](int rank, uint64_t port) { return overlap_rank(rank, port); }, 180s);
  EXPECT_EQ(status, std::vector<int>(2, 0)) << "see the ranks' stderr (-1: timed out)";
}

}  // namespace
}  // namespace kiln::dist
