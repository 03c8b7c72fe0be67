// DistributedDataParallel on CUDA computes gradients in its device buckets
// (kiln/grad_destination.h), as on the CPU: 2 forked ranks over the NCCL group
// on the emulated device train the same bits with the gradients computed in
// the buckets and copied into them, eager and compiled (hooks, traced
// all-reduces, the whole step), and match one process on the CPU. The
// counters show that the weight GEMMs wrote into the buckets (no copy) and
// that a traced all-reduce reduced in the bucket itself; a convolution's
// weight gradient is computed in its bucket as well. Tiny models (the
// emulated device is slow).
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "distributed/ddp_reference.h"
#include "distributed/nccl/nccl_store_group.h"
#include "distributed/store_ranks.h"
#include "kiln/compile.h"
#include "kiln/cuda.h"
#include "kiln/distributed/collectives.h"
#include "kiln/distributed/ddp.h"
#include "kiln/distributed/process_group.h"
#include "kiln/distributed/store.h"
#include "kiln/grad_destination.h"

namespace kiln::dist {
namespace {

using namespace std::chrono_literals;

using testing::Batch;

constexpr int kSteps = 4;

std::shared_ptr<ProcessGroup> nccl_group(int rank, int size, uint64_t port) {
  return testing::nccl_store_group(rank, size, port, "ddp_buckets");
}

// How a step runs: eagerly; forward+backward compiled with DDP's hooks
// reducing (trace_collectives=false) or with the all-reduces as IR nodes; or
// zero_grad, forward, backward and the update as one compiled graph.
enum class Mode { kEager, kCompiledHooks, kCompiledTraced, kWholeStep };

const char* name_of(Mode m) {
  switch (m) {
    case Mode::kEager:
      return "eager";
    case Mode::kCompiledHooks:
      return "compiled, hooks";
    case Mode::kCompiledTraced:
      return "compiled, traced all-reduces";
    case Mode::kWholeStep:
      return "whole step compiled";
  }
  return "?";
}

struct Outcome {
  std::vector<Tensor> params;  // on the CPU
  autograd::GradDestinationStats dest;
  BoundCollectiveStats bound;
  int compiled_calls = 0;
  int64_t replays = 0;  // of them, replays of a captured CUDA graph (the capturing run's too)
  int64_t captures = 0;
  int64_t plan_in_place = 0;  // the last plan run's outputs written into destinations
};

// Whether every parameter's .grad is its slice of one of ddp's buckets, at a
// multiple of 256 bytes from the bucket's start (a fresh allocation's
// alignment, which cuBLASLt's choice of GEMM depends on).
std::string grads_in_buckets(nn::Module& m, const DistributedDataParallel& ddp) {
  for (const Tensor& p : m.parameters()) {
    const Tensor g = p.grad();
    bool in = false;
    for (size_t b = 0; b < ddp.num_buckets() && !in; ++b) {
      const Tensor buf = ddp.bucket_buffer(b);
      if (!g.defined() || g.impl()->storage != buf.impl()->storage) continue;
      if ((g.offset() - buf.offset()) * 4 % 256 != 0)
        return str("a .grad of shape ", p.shape(), " starts ", (g.offset() - buf.offset()) * 4,
                   " bytes into its bucket");
      in = true;
    }
    if (!in) return str("a .grad of shape ", p.shape(), " is not in a bucket");
  }
  return "";
}

// This rank's kSteps SGD steps on its half of every batch, its MLP on the device.
std::string train(ProcessGroup& pg, const std::vector<Batch>& data, Mode mode, bool compute_in,
                  Outcome& out) {
  const int rank = pg.rank();
  auto m = testing::make_mlp(uint64_t(rank) + 1, {6, 8, 3});
  m->to(Device::cuda(0));
  DDPOptions o{.first_bucket_mb = 1e-4,
               .process_group = std::shared_ptr<ProcessGroup>(&pg, [](ProcessGroup*) {})};
  o.compute_grads_in_buckets = compute_in;
  o.trace_collectives = mode != Mode::kCompiledHooks;
  DistributedDataParallel ddp(m, o);
  if (ddp.num_buckets() < 2) return str("expected several buckets; got ", ddp.num_buckets());
  optim::SGD opt(m->parameters(), {.lr = 0.1, .momentum = 0.9});
  const bool fwd_bwd_compiled = mode == Mode::kCompiledHooks || mode == Mode::kCompiledTraced;
  auto fwd_bwd = compile(
      [&](const Tensor& x, const Tensor& y) {
        Tensor loss = cross_entropy(ddp(x), y);
        loss.backward();
        return loss;
      },
      {.enabled = fwd_bwd_compiled, .name = "nccl_buckets_fwd_bwd"});
  auto whole = compile(
      [&](const Tensor& x, const Tensor& y) {
        opt.zero_grad();
        Tensor loss = cross_entropy(ddp(x), y);
        loss.backward();
        opt.step();
        return loss;
      },
      {.enabled = mode == Mode::kWholeStep, .name = "nccl_buckets_whole_step"});
  const auto dest0 = autograd::grad_destination_stats();
  const auto bound0 = bound_collective_stats();
  const cuda::GraphStats graphs0 = cuda::graph_stats();
  const int64_t b = data[0].x.size(0) / 2;
  for (const Batch& bt : data) {
    Tensor x = bt.x.narrow(0, rank * b, b).contiguous().to(Device::cuda(0));
    Tensor y = bt.y.narrow(0, rank * b, b).contiguous().to(Device::cuda(0));
    if (mode == Mode::kWholeStep) {
      whole(x, y);
      continue;
    }
    opt.zero_grad();  // set_to_none: the buckets are the gradients' destinations
    fwd_bwd(x, y);
    // (a traced all-reduce of gradients copied in returns separate tensors)
    if (compute_in || mode != Mode::kCompiledTraced)
      if (auto why = grads_in_buckets(*m, ddp); !why.empty()) return why;
    opt.step();
  }
  const auto dest1 = autograd::grad_destination_stats();
  const auto bound1 = bound_collective_stats();
  out.dest = {dest1.computed_in_place - dest0.computed_in_place, dest1.copied - dest0.copied};
  out.bound = {bound1.in_place - bound0.in_place, bound1.copied - bound0.copied};
  out.replays = cuda::graph_stats().replays - graphs0.replays;
  out.captures = cuda::graph_stats().captures - graphs0.captures;
  out.compiled_calls =
      mode == Mode::kWholeStep ? whole.stats().compiled_calls : fwd_bwd.stats().compiled_calls;
  out.plan_in_place = fwd_bwd.stats().last_in_place;
  if (mode != Mode::kEager && out.compiled_calls < 2)
    return str("the plan ran ", out.compiled_calls, " times of ", data.size());
  out.params.clear();
  for (const Tensor& p : m->parameters()) out.params.push_back(p.to(Device::cpu()));
  return "";
}

std::string bits_differ(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size()) return "parameter counts differ";
  for (size_t i = 0; i < a.size(); ++i) {
    auto x = a[i].to_vector<float>(), y = b[i].to_vector<float>();
    if (x.size() != y.size() || std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) != 0)
      return str("parameter ", i, " differs");
  }
  return "";
}

std::string close_to(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  for (size_t i = 0; i < got.size() && i < want.size(); ++i)
    if (!allclose(got[i], want[i], 1e-5, 1e-5)) return str("parameter ", i, " differs");
  return got.size() == want.size() ? "" : "parameter counts differ";
}

// One rank: `mode` with the gradients computed in the buckets and copied
// into them; the same bits, one process's parameters, and the counters.
std::string compare_rank(int rank, uint64_t port, Mode mode) {
  auto pg = nccl_group(rank, 2, port);
  auto data = testing::make_batches(kSteps, 4, 6, 3);
  auto ref = testing::train_single(testing::make_mlp(1, {6, 8, 3}), data);
  Outcome in, copied;
  if (auto why = train(*pg, data, mode, true, in); !why.empty()) return "computed in: " + why;
  if (auto why = train(*pg, data, mode, false, copied); !why.empty()) return "copied in: " + why;
  const std::string what = name_of(mode);
  if (auto why = bits_differ(in.params, copied.params); !why.empty())
    return what + ", computed in vs copied in: " + why;
  if (auto why = close_to(in.params, ref); !why.empty()) return what + ", vs one process: " + why;
  // The copy path computes nothing into a bucket and binds no all-reduce to one.
  if (copied.dest.computed_in_place + copied.dest.copied + copied.bound.in_place +
          copied.bound.copied !=
      0)
    return what + ": the copy path used a gradient destination or a bound all-reduce";
  // Each eager step (a compiled step's first call runs eagerly): the two
  // Linear weights' GEMMs and the two biases' sums over the batch write their
  // buckets; nothing is copied in. A plan's gradients are not counted here.
  const int64_t n = kSteps - in.compiled_calls;
  if (in.dest.computed_in_place != 4 * n || in.dest.copied != 0)
    return str(what, ": ", in.dest.computed_in_place, " gradients computed in their buckets and ",
               in.dest.copied, " copied; expected ", 4 * n, " and 0");
  // A compiled forward+backward computes both weight gradients in their
  // buckets (its output destinations, or lent by the traced all-reduce).
  if (mode == Mode::kCompiledHooks || mode == Mode::kCompiledTraced)
    if (in.plan_in_place < copied.plan_in_place + 2)
      return str(what, ": the plan wrote ", in.plan_in_place,
                 " outputs into destinations with the gradients computed in the buckets, ",
                 copied.plan_in_place, " with them copied in; expected 2 more");
  // Counted where the plan runs its collective_start on the host: its plain
  // and capturing runs, not the replays (which repeat the captured work).
  const int64_t calls = mode == Mode::kCompiledTraced || mode == Mode::kWholeStep
                            ? in.compiled_calls - in.replays + in.captures
                            : 0;
  if (in.bound.in_place != 2 * calls || in.bound.copied != 2 * calls)
    return str(what, ": the bound all-reduces found ", in.bound.in_place,
               " gradients in their buckets and copied ", in.bound.copied, "; expected ", 2 * calls,
               " and ", 2 * calls);
  return "";
}

void run_mode(Mode mode) {
  auto status = testing::run_store_ranks(
      2, [&](int rank, uint64_t port) { return compare_rank(rank, port, mode); }, 180s);
  EXPECT_EQ(status, std::vector<int>(2, 0)) << "see the ranks' stderr (-1: timed out)";
}

TEST(NcclDDPBuckets, EagerWeightGradientsAreComputedInTheDeviceBuckets) {
  run_mode(Mode::kEager);
}

TEST(NcclDDPBuckets, CompiledHooksWriteGradientsInTheDeviceBuckets) {
  run_mode(Mode::kCompiledHooks);
}

TEST(NcclDDPBuckets, TracedAllReducesReduceInTheDeviceBuckets) {
  run_mode(Mode::kCompiledTraced);
}

TEST(NcclDDPBuckets, WholeCompiledStepReducesInTheDeviceBuckets) {
  run_mode(Mode::kWholeStep);
}

// A convolution's weight gradient on the device (conv2d_grad_weight) is
// computed in its bucket too: a small conv net, eager, 2 ranks.
std::shared_ptr<nn::Sequential> make_conv_net(uint64_t seed) {
  manual_seed(seed);
  auto m = std::make_shared<nn::Sequential>();
  m->push_back(std::make_shared<nn::Conv2d>(2, 3, 3));
  m->push_back(std::make_shared<nn::ReLU>());
  m->push_back(std::make_shared<nn::Flatten>());
  m->push_back(std::make_shared<nn::Linear>(3 * 4 * 4, 3));
  return m;
}

// This rank's conv net after kSteps eager DDP steps on its half of each batch,
// and the gradient destinations' counters over them.
std::string train_conv(ProcessGroup& pg, bool compute_in, Outcome& out) {
  manual_seed(5);
  const Tensor x = randn({kSteps, 8, 2, 6, 6}), y = randint(0, 3, {kSteps, 8});
  auto m = make_conv_net(uint64_t(pg.rank()) + 1);
  m->to(Device::cuda(0));
  DDPOptions o{.first_bucket_mb = 1e-4,
               .process_group = std::shared_ptr<ProcessGroup>(&pg, [](ProcessGroup*) {})};
  o.compute_grads_in_buckets = compute_in;
  DistributedDataParallel ddp(m, o);
  optim::SGD opt(m->parameters(), {.lr = 0.1, .momentum = 0.9});
  const auto dest0 = autograd::grad_destination_stats();
  for (int64_t i = 0; i < kSteps; ++i) {
    opt.zero_grad();
    const Tensor xi = x.select(0, i).narrow(0, pg.rank() * 4, 4).contiguous();
    const Tensor yi = y.select(0, i).narrow(0, pg.rank() * 4, 4).contiguous();
    cross_entropy(ddp(xi.to(Device::cuda(0))), yi.to(Device::cuda(0))).backward();
    if (auto why = grads_in_buckets(*m, ddp); !why.empty()) return why;
    opt.step();
  }
  const auto dest1 = autograd::grad_destination_stats();
  out.dest = {dest1.computed_in_place - dest0.computed_in_place, dest1.copied - dest0.copied};
  out.params.clear();
  for (const Tensor& p : m->parameters()) out.params.push_back(p.to(Device::cpu()));
  return "";
}

std::string conv_rank(int rank, uint64_t port) {
  auto pg = nccl_group(rank, 2, port);
  Outcome in, copied;
  if (auto why = train_conv(*pg, true, in); !why.empty()) return "computed in: " + why;
  if (auto why = train_conv(*pg, false, copied); !why.empty()) return "copied in: " + why;
  if (auto why = bits_differ(in.params, copied.params); !why.empty())
    return "computed in vs copied in: " + why;
  // The conv's and the Linear's weights and the Linear's bias computed in
  // place; the conv's bias (the engine's sum of a broadcast add) copied.
  if (in.dest.computed_in_place != 3 * kSteps || in.dest.copied != kSteps)
    return str(in.dest.computed_in_place, " gradients computed in their buckets and ",
               in.dest.copied, " copied; expected ", 3 * kSteps, " and ", kSteps);
  return "";
}

TEST(NcclDDPBuckets, ConvWeightGradientIsComputedInItsDeviceBucket) {
  auto status = testing::run_store_ranks(2, conv_rank, 180s);
  EXPECT_EQ(status, std::vector<int>(2, 0)) << "see the ranks' stderr (-1: timed out)";
}

}  // namespace
}  // namespace kiln::dist
