// Compiled DDP steps replayed from CUDA graphs with their NCCL collectives
// captured, on the emulated device (2 forked ranks): the step's plan is
// captured and replayed (graph stats), and trains as the same step without
// graphs and as one process; a rank that dies during a replayed step fails
// the other rank's next step with a kiln::Error within the group's timeout;
// destroying the group releases the graphs that hold its collectives.
#include <unistd.h>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "distributed/ddp_reference.h"
#include "distributed/store_ranks.h"
#include "kiln/compile.h"
#include "kiln/cuda.h"
#include "kiln/distributed/ddp.h"
#include "kiln/distributed/process_group.h"
#include "kiln/distributed/store.h"

namespace kiln::dist {
namespace {

using namespace std::chrono_literals;
using testing::Batch;

constexpr int kSteps = 5;

std::shared_ptr<ProcessGroup> group(int rank, uint64_t port, std::chrono::milliseconds timeout,
                                    const std::string& prefix) {
  TCPStoreOptions co;
  co.host = "127.0.0.1";
  co.port = uint16_t(port);
  co.timeout = 30s;
  auto store = std::make_shared<TCPStore>(co);
  ProcessGroupOptions po;
  po.timeout = timeout;
  po.host = "127.0.0.1";
  return make_nccl_group(store, rank, 2, rank, po, prefix);
}

// Rank pg->rank()'s parameters after training on its share of `data` with
// the whole DDP step compiled (zero_grad, forward, backward with the bucket
// all-reduces as collective nodes, SGD); `stats`: the graph runner's counts
// over the run.
std::string train(std::shared_ptr<ProcessGroup> pg, const std::vector<Batch>& data,
                  const std::string& name, std::vector<Tensor>& params, cuda::GraphStats& stats) {
  const int rank = pg->rank();
  auto m = testing::make_mlp(uint64_t(rank) + 1, {6, 8, 3});
  m->to(Device::cuda(0));
  DistributedDataParallel ddp(m, {.first_bucket_mb = 1e-4, .process_group = pg});
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
      {.name = name});
  const cuda::GraphStats before = cuda::graph_stats();
  const int64_t b = data[0].x.size(0) / 2;
  for (const Batch& bt : data)
    step(bt.x.narrow(0, rank * b, b).contiguous().to(Device::cuda(0)),
         bt.y.narrow(0, rank * b, b).contiguous().to(Device::cuda(0)));
  cuda::synchronize();
  const cuda::GraphStats after = cuda::graph_stats();
  stats.captures = after.captures - before.captures;
  stats.replays = after.replays - before.replays;
  stats.fallbacks = after.fallbacks - before.fallbacks;
  stats.last_fallback = after.last_fallback;
  if (step.stats().compiled_calls != int64_t(data.size()) - 1)  // the first call traces it
    return str("the plan ran ", step.stats().compiled_calls, " times of ", data.size());
  params.clear();
  for (const Tensor& p : m->parameters()) params.push_back(p.to(Device::cpu()));
  return "";
}

std::string same_bits(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size()) return "parameter counts differ";
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].to_vector<float>() != b[i].to_vector<float>()) return str("parameter ", i, " differs");
  return "";
}

std::string close_to(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  if (got.size() != want.size()) return "parameter counts differ";
  for (size_t i = 0; i < got.size(); ++i)
    if (!allclose(got[i], want[i], 1e-5, 1e-5)) return str("parameter ", i, " differs");
  return "";
}

// Both ranks: the step with graphs (the first call traces the step, the
// second runs its plan plainly, the third captures it, and every plan run
// from the third on is a replay) and with KILN_CUDA_GRAPHS=0 (no capture):
// the same bits, and one process's parameters.
std::string graph_rank(int rank, uint64_t port) {
  auto pg = group(rank, port, 30s, "graphs");
  auto data = testing::make_batches(kSteps, 4, 6, 3);
  auto ref = testing::train_single(testing::make_mlp(1, {6, 8, 3}), data);
  std::vector<Tensor> replayed, plain;
  cuda::GraphStats g, p;
  if (auto why = train(pg, data, "nccl_graph_step", replayed, g); !why.empty())
    return "graphs: " + why;
  if (g.captures != 1 || g.replays != kSteps - 2 || g.fallbacks != 0)
    return str("graphs: ", g.captures, " captures, ", g.replays, " replays, ", g.fallbacks,
               " plain plans (", g.last_fallback, "); expected 1, ", kSteps - 2, ", 0");
  ::setenv("KILN_CUDA_GRAPHS", "0", 1);
  const std::string why = train(pg, data, "nccl_plain_step", plain, p);
  ::unsetenv("KILN_CUDA_GRAPHS");
  if (!why.empty()) return "KILN_CUDA_GRAPHS=0: " + why;
  if (p.captures != 0 || p.replays != 0) return "KILN_CUDA_GRAPHS=0 still captured";
  if (auto d = same_bits(replayed, plain); !d.empty()) return "replayed vs plain: " + d;
  if (auto d = close_to(replayed, ref); !d.empty()) return "replayed vs one process: " + d;
  return "";
}

TEST(NcclGraphs, CompiledDdpStepReplaysItsCollectivesFromAGraph) {
  auto status = testing::run_store_ranks(
      2, [&](int rank, uint64_t port) { return graph_rank(rank, port); }, 180s);
  EXPECT_EQ(status, std::vector<int>(2, 0)) << "see the ranks' stderr (-1: timed out)";
}

// Both ranks run three steps (traced, plain, captured and replayed); rank 1's process
// then ends while rank 0 replays its fourth step, whose all-reduces wait for
// rank 1: one of rank 0's next steps raises a kiln::Error naming the replayed
// graph's collectives and the failure, within the group's timeout.
constexpr auto kTimeout = 8s;

std::string dying_rank(int rank, uint64_t port) {
  auto pg = group(rank, port, kTimeout, "dying");
  auto m = testing::make_mlp(1, {6, 8, 3});
  m->to(Device::cuda(0));
  DistributedDataParallel ddp(m, {.first_bucket_mb = 1e-4, .process_group = pg});
  optim::SGD opt(m->parameters(), {.lr = 0.1});
  auto step = compile(
      [&](const Tensor& x, const Tensor& y) {
        opt.zero_grad();
        Tensor loss = cross_entropy(ddp(x), y);
        loss.backward();
        opt.step();
        return loss;
      },
      {.name = "nccl_dying_step"});
  auto data = testing::make_batches(1, 2, 6, 3);
  Tensor x = data[0].x.to(Device::cuda(0)), y = data[0].y.to(Device::cuda(0));
  for (int i = 0; i < 3; ++i) step(x, y);
  cuda::synchronize();
  if (cuda::graph_stats().replays < 1) return "no step was replayed";
  if (rank == 1) {
    std::this_thread::sleep_for(300ms);  // rank 0 is inside its fourth step's all-reduce
    ::_exit(0);
  }
  const auto t0 = std::chrono::steady_clock::now();
  try {
    for (int i = 0; i < 1000; ++i) {
      step(x, y);
      cuda::synchronize();
      if (std::chrono::steady_clock::now() - t0 > kTimeout + 10s)
        return str("no error after ", i + 1, " steps");
    }
  } catch (const Error& e) {
    const std::string what = e.what();
    const auto took = std::chrono::steady_clock::now() - t0;
    if (took > kTimeout + 5s)
      return str("the error came after ",
                 std::chrono::duration_cast<std::chrono::milliseconds>(took).count(), " ms");
    for (const char* part : {"replayed CUDA graph's collectives", "all_reduce", "rank 1"})
      if (what.find(part) == std::string::npos) return str("the error lacks '", part, "': ", what);
    return "";
  }
  return "no kiln::Error";
}

TEST(NcclGraphs, RankDyingDuringAReplayedStepFailsThePeer) {
  auto status = testing::run_store_ranks(
      2, [&](int rank, uint64_t port) { return dying_rank(rank, port); }, 120s);
  EXPECT_EQ(status, std::vector<int>(2, 0)) << "see the ranks' stderr (-1: timed out)";
}

// A group destroyed while a compiled step's graph still holds its all-reduces
// (the step outlives it): the group releases the graph first, since NCCL's
// ncclCommDestroy waits until such graphs are destroyed (the emulated NCCL
// waits 5 s, then fails).
std::string destroy_rank(int rank, uint64_t port) {
  auto pg = group(rank, port, 30s, "destroy");
  auto m = testing::make_mlp(1, {6, 8, 3});
  m->to(Device::cuda(0));
  auto ddp = std::make_unique<DistributedDataParallel>(
      m, DDPOptions{.first_bucket_mb = 1e-4, .process_group = pg});
  optim::SGD opt(m->parameters(), {.lr = 0.1});
  auto step = compile(
      [&](const Tensor& x, const Tensor& y) {
        opt.zero_grad();
        Tensor loss = cross_entropy((*ddp)(x), y);
        loss.backward();
        opt.step();
        return loss;
      },
      {.name = "nccl_destroyed_step"});
  auto data = testing::make_batches(1, 2, 6, 3);
  Tensor x = data[0].x.to(Device::cuda(0)), y = data[0].y.to(Device::cuda(0));
  for (int i = 0; i < 3; ++i) step(x, y);
  cuda::synchronize();
  if (cuda::graph_stats().replays < 1) return "no step was replayed";
  const auto t0 = std::chrono::steady_clock::now();
  ddp.reset();
  pg.reset();  // the last holder: the group is destroyed, the step's plan still holds its graph
  const auto took = std::chrono::steady_clock::now() - t0;
  if (took > 2500ms)
    return str("destroying the group took ",
               std::chrono::duration_cast<std::chrono::milliseconds>(took).count(),
               " ms: it waited for the graph");
  return "";
}

TEST(NcclGraphs, DestroyingTheGroupReleasesItsGraphs) {
  auto status = testing::run_store_ranks(
      2, [&](int rank, uint64_t port) { return destroy_rank(rank, port); }, 120s);
  EXPECT_EQ(status, std::vector<int>(2, 0)) << "see the ranks' stderr (-1: timed out)";
}

}  // namespace
}  // namespace kiln::dist
