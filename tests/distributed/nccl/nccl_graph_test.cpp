// Compiled DDP steps replayed from CUDA graphs with their NCCL collectives
// captured, on the emulated device (2 forked ranks): the step's plan is
// captured and replayed (graph stats), and trains as the same step without
// graphs and as one process; a rank that dies during a replayed step fails
// the other rank's next step with a kiln::Error within the group's timeout;
// destroying the group releases the graphs that hold its collectives.
#include <unistd.h>
#include <chrono>
#include <cstdlib>
#include <functional>
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

std::shared_ptr<nn::Sequential> on_device(std::shared_ptr<nn::Sequential> m) {
  m->to(Device::cuda(0));
  return m;
}

// A rank's model on the device (seed `seed`), DDP over `pg` with several
// buckets, SGD, and the whole step compiled: zero_grad, forward, backward
// with the bucket all-reduces as collective nodes, the update.
struct DdpStep {
  using Body = std::function<Tensor(const Tensor&, const Tensor&)>;
  DdpStep(std::shared_ptr<ProcessGroup> pg, uint64_t seed, double momentum, const std::string& name)
      : m(on_device(testing::make_mlp(seed, {6, 8, 3}))),
        ddp(std::make_unique<DistributedDataParallel>(
            m, DDPOptions{.first_bucket_mb = 1e-4, .process_group = pg})),
        opt(m->parameters(), {.lr = 0.1, .momentum = momentum}),
        step(compile(Body([this](const Tensor& x, const Tensor& y) {
                       opt.zero_grad();
                       Tensor loss = cross_entropy((*ddp)(x), y);
                       loss.backward();
                       opt.step();
                       return loss;
                     }),
                     {.name = name})) {}
  std::shared_ptr<nn::Sequential> m;
  std::unique_ptr<DistributedDataParallel> ddp;
  optim::SGD opt;
  Compiled<Body> step;
};

// Runs body(rank, port) on 2 forked ranks; both must return "".
void expect_two_ranks(std::string (*body)(int, uint64_t), std::chrono::seconds limit) {
  auto status = testing::run_store_ranks(2, body, limit);
  EXPECT_EQ(status, std::vector<int>(2, 0)) << "see the ranks' stderr (-1: timed out)";
}

// Rank pg->rank()'s parameters after training on its share of `data` with
// the compiled DDP step; `stats`: the graph runner's counts over the run.
std::string train(std::shared_ptr<ProcessGroup> pg, const std::vector<Batch>& data,
                  const std::string& name, std::vector<Tensor>& params, cuda::GraphStats& stats) {
  const int rank = pg->rank();
  DdpStep s(pg, uint64_t(rank) + 1, 0.9, name);
  if (s.ddp->num_buckets() < 2) return str("expected several buckets; got ", s.ddp->num_buckets());
  const cuda::GraphStats before = cuda::graph_stats();
  const int64_t b = data[0].x.size(0) / 2;
  for (const Batch& bt : data)
    s.step(bt.x.narrow(0, rank * b, b).contiguous().to(Device::cuda(0)),
           bt.y.narrow(0, rank * b, b).contiguous().to(Device::cuda(0)));
  cuda::synchronize();
  const cuda::GraphStats after = cuda::graph_stats();
  stats.captures = after.captures - before.captures;
  stats.replays = after.replays - before.replays;
  stats.fallbacks = after.fallbacks - before.fallbacks;
  stats.last_fallback = after.last_fallback;
  if (s.step.stats().compiled_calls != int64_t(data.size()) - 1)  // the first call traces it
    return str("the plan ran ", s.step.stats().compiled_calls, " times of ", data.size());
  params.clear();
  for (const Tensor& p : s.m->parameters()) params.push_back(p.to(Device::cpu()));
  return "";
}

// Three steps of `s` (traced, plain, captured and replayed) on one batch,
// which x and y get; "" once a step was replayed.
std::string three_steps(DdpStep& s, Tensor& x, Tensor& y) {
  auto data = testing::make_batches(1, 2, 6, 3);
  x = data[0].x.to(Device::cuda(0));
  y = data[0].y.to(Device::cuda(0));
  for (int i = 0; i < 3; ++i) s.step(x, y);
  cuda::synchronize();
  return cuda::graph_stats().replays < 1 ? "no step was replayed" : "";
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
  expect_two_ranks(graph_rank, 180s);
}

// Both ranks run three steps (traced, plain, captured and replayed); rank
// 1's process then ends while rank 0 replays its fourth step, whose all-reduces wait for
// rank 1: one of rank 0's next steps raises a kiln::Error naming the replayed
// graph's collectives and the failure, within the group's timeout.
constexpr auto kTimeout = 8s;

std::string dying_rank(int rank, uint64_t port) {
  DdpStep s(group(rank, port, kTimeout, "dying"), 1, 0.0, "nccl_dying_step");
  Tensor x, y;
  if (auto why = three_steps(s, x, y); !why.empty()) return why;
  if (rank == 1) {
    std::this_thread::sleep_for(300ms);  // rank 0 is inside its fourth step's all-reduce
    ::_exit(0);
  }
  const auto t0 = std::chrono::steady_clock::now();
  try {
    for (int i = 0; i < 1000; ++i) {
      s.step(x, y);
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
  expect_two_ranks(dying_rank, 120s);
}

// A group destroyed while a compiled step's graph still holds its all-reduces
// (the step outlives it): the group releases the graph first, since NCCL's
// ncclCommDestroy waits until such graphs are destroyed (the emulated NCCL
// waits 5 s, then fails).
std::string destroy_rank(int rank, uint64_t port) {
  auto pg = group(rank, port, 30s, "destroy");
  DdpStep s(pg, 1, 0.0, "nccl_destroyed_step");
  Tensor x, y;
  if (auto why = three_steps(s, x, y); !why.empty()) return why;
  const auto t0 = std::chrono::steady_clock::now();
  s.ddp.reset();
  pg.reset();  // the last holder: the group is destroyed, the step's plan still holds its graph
  const auto took = std::chrono::steady_clock::now() - t0;
  if (took > 2500ms)
    return str("destroying the group took ",
               std::chrono::duration_cast<std::chrono::milliseconds>(took).count(),
               " ms: it waited for the graph");
  return "";
}

TEST(NcclGraphs, DestroyingTheGroupReleasesItsGraphs) {
  expect_two_ranks(destroy_rank, 120s);
}

}  // namespace
}  // namespace kiln::dist
