// DistributedDataParallel with ranks as threads, over the in-process thread
// group and over Gloo: bucket assignment, gradients as bucket views,
// equivalence with one process on the whole batch (eager and compiled),
// no_sync, unused parameters, comm hooks, overlap of all-reduce with backward,
// and the user errors. (ddp_launch_test.cpp runs the example under kilnrun.)
#include "kiln/distributed/ddp.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>

#include "distributed/ddp_reference.h"
#include "distributed/thread_group.h"
#include "kiln/autograd.h"
#include "kiln/compile.h"
#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"
#include "runtime/test_util.h"

namespace kiln {
namespace {

using dist::DDPOptions;
using dist::DistributedDataParallel;
using testing::expect_error;
using testing::run_ranks;

std::shared_ptr<nn::Sequential> make_mlp(uint64_t seed, int64_t in = 20, int64_t hidden = 32,
                                         int64_t out = 10) {
  return testing::make_mlp(seed, {in, hidden, hidden, out});
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  EXPECT_EQ(x.size(), y.size());
  double d = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) d = std::max(d, std::abs(x[i] - y[i]));
  return d;
}

void expect_close(const Tensor& a, const Tensor& b, double tol, const std::string& what) {
  ASSERT_TRUE(a.defined()) << what;
  ASSERT_TRUE(b.defined()) << what;
  EXPECT_EQ(a.shape(), b.shape()) << what;
  EXPECT_LE(max_abs_diff(a, b), tol) << what;
}

using testing::Batch;

// A non-owning handle for DDPOptions::process_group (run_ranks owns the groups).
std::shared_ptr<dist::ProcessGroup> borrow(dist::ProcessGroup& pg) {
  return std::shared_ptr<dist::ProcessGroup>(&pg, [](dist::ProcessGroup*) {});
}

// How a test runs its ranks: threads over the in-process group, or over Gloo.
using RankFn = std::function<void(int, dist::ProcessGroup&)>;
using Runner = std::function<void(int, const RankFn&)>;

// The tests that matter most run on both backends.
class DDPBackends : public ::testing::TestWithParam<std::string> {
 protected:
  Runner runner() const {
    if (GetParam() == "gloo")
      return [](int n, const RankFn& fn) { testing::run_gloo_ranks(n, fn); };
    return [](int n, const RankFn& fn) { run_ranks(n, fn); };
  }
};

// Gradients of loss(model(x), y) for a fresh copy of `model` (the local reference).
std::vector<Tensor> local_grads(const nn::Module& model, const std::vector<Batch>& batches) {
  auto m = model.clone();
  for (const auto& b : batches) cross_entropy(m->forward(b.x), b.y).backward();
  std::vector<Tensor> g;
  for (auto& p : m->parameters()) g.push_back(p.grad());
  return g;
}

std::vector<Tensor> mean_of(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < a.size(); ++i) out.push_back((a[i] + b[i]) * 0.5);
  return out;
}

// A model whose parameters have chosen dtypes and sizes (for bucket tests).
struct Params : nn::Module {
  explicit Params(const std::vector<std::pair<int64_t, DType>>& specs) {
    for (size_t i = 0; i < specs.size(); ++i)
      register_parameter(str("p", i), zeros({specs[i].first}, specs[i].second));
  }
};

// Linear "used" always; Linear "branch" only when use_branch; "unused" never.
struct Branchy : nn::Module {
  std::shared_ptr<nn::Linear> used, branch, unused;
  bool use_branch = true;
  Branchy() {
    manual_seed(3);
    used = register_module("used", std::make_shared<nn::Linear>(4, 3));
    branch = register_module("branch", std::make_shared<nn::Linear>(4, 3));
    unused = register_module("unused", std::make_shared<nn::Linear>(4, 3));
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = used->forward(x);
    return use_branch ? y + branch->forward(x) : y;
  }
};

// ---- autograd's end-of-backward callbacks (added for DDP) ------------------

// queue_callback runs after every gradient was accumulated, once, in order;
// outside backward it is a clear error.
TEST(AutogradCallback, RunsAtTheEndOfBackward) {
  Tensor a = ones({2}).requires_grad_(), b = ones({2}).requires_grad_();
  std::vector<std::string> log;
  a.register_post_accumulate_grad_hook([&](const Tensor&) {
    EXPECT_TRUE(autograd::in_backward());
    autograd::queue_callback([&] {
      log.push_back(str("cb1 ", b.grad().defined()));
      autograd::queue_callback([&] { log.push_back("cb2"); });
    });
  });
  ((a * 2).sum() + (b * 3).sum()).backward();
  EXPECT_EQ(log, (std::vector<std::string>{"cb1 1", "cb2"}));
  EXPECT_FALSE(autograd::in_backward());
  expect_error([] { autograd::queue_callback([] {}); }, "[queue_callback]");
}

// ---- buckets ---------------------------------------------------------------

// Buckets follow reverse registration order; bucket 0 is capped at
// first_bucket_mb and the others at bucket_cap_mb; dtypes get their own buckets.
TEST(DDP, BucketAssignmentOrderAndCaps) {
  auto pg = testing::make_thread_groups(1)[0];
  const double byte = 1.0 / (1024.0 * 1024.0);  // in MB
  auto m = std::make_shared<Params>(std::vector<std::pair<int64_t, DType>>{{10000, DType::f32},
                                                                           {100, DType::f32},
                                                                           {5000, DType::f32},
                                                                           {50, DType::f32},
                                                                           {500, DType::f32},
                                                                           {10, DType::f32}});
  DistributedDataParallel ddp(
      m, {.bucket_cap_mb = 20000 * byte, .first_bucket_mb = 2000 * byte, .process_group = pg});
  ASSERT_EQ(ddp.num_buckets(), 3u);
  EXPECT_EQ(ddp.bucket_parameter_names(0), (std::vector<std::string>{"p5", "p4"}));
  EXPECT_EQ(ddp.bucket_parameter_names(1), (std::vector<std::string>{"p3", "p2"}));
  EXPECT_EQ(ddp.bucket_parameter_names(2), (std::vector<std::string>{"p1", "p0"}));
  EXPECT_EQ(ddp.bucket_buffer(1).numel(), 5050);
  expect_error([&] { ddp.bucket_buffer(3); }, "bucket 3 does not exist");

  // Default caps: everything (< 1 MB) in one bucket.
  DistributedDataParallel one(m, {.process_group = pg});
  EXPECT_EQ(one.num_buckets(), 1u);

  // Mixed dtypes: one open bucket per dtype.
  auto mixed = std::make_shared<Params>(
      std::vector<std::pair<int64_t, DType>>{{10, DType::f32}, {10, DType::f64}, {10, DType::f32}});
  DistributedDataParallel md(mixed, {.process_group = pg});
  ASSERT_EQ(md.num_buckets(), 2u);
  EXPECT_EQ(md.bucket_parameter_names(0), (std::vector<std::string>{"p2", "p0"}));
  EXPECT_EQ(md.bucket_parameter_names(1), (std::vector<std::string>{"p1"}));
  EXPECT_EQ(md.bucket_buffer(1).dtype(), DType::f64);
}

// Every .grad is a view into its bucket's buffer, and with zero_grad(false)
// the next backward accumulates into the same memory (no copy, no new tensor).
TEST(DDP, GradientsAreViewsIntoBuckets) {
  auto pg = testing::make_thread_groups(1)[0];
  auto m = make_mlp(1);
  DistributedDataParallel ddp(m, {.first_bucket_mb = 1e-3, .process_group = pg});
  ASSERT_GT(ddp.num_buckets(), 1u);
  Tensor x = randn({8, 20});
  Tensor y = randint(0, 10, {8});
  cross_entropy(ddp(x), y).backward();
  auto inside = [&](const Tensor& g) {
    for (size_t b = 0; b < ddp.num_buckets(); ++b) {
      Tensor buf = ddp.bucket_buffer(b);
      if (g.impl()->storage == buf.impl()->storage) return true;
    }
    return false;
  };
  std::vector<void*> ptrs;
  for (auto& p : m->parameters()) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_TRUE(inside(p.grad()));
    ptrs.push_back(p.grad().data_ptr());
  }
  std::vector<Tensor> first;
  for (auto& p : m->parameters()) first.push_back(p.grad().clone());
  m->zero_grad(/*set_to_none=*/false);
  cross_entropy(ddp(x), y).backward();
  auto ps = m->parameters();
  for (size_t i = 0; i < ps.size(); ++i) {
    EXPECT_EQ(ps[i].grad().data_ptr(), ptrs[i]);
    expect_close(ps[i].grad(), first[i], 1e-6, str("param ", i));
  }
  // zero_grad() (set_to_none) then backward: the gradient lands in the bucket
  // again (the weights' GEMMs write there, the biases are copied in).
  m->zero_grad();
  cross_entropy(ddp(x), y).backward();
  for (size_t i = 0; i < ps.size(); ++i) {
    EXPECT_TRUE(inside(ps[i].grad()));
    expect_close(ps[i].grad(), first[i], 1e-6, str("param ", i));
  }
}

// ---- equivalence with one process on the whole batch -----------------------

// `steps` batches of 2 * b examples.
std::vector<Batch> make_batches(int steps, int64_t b) {
  return testing::make_batches(steps, b, 20, 10);
}

// One process, batch 2B: the reference.
std::vector<Tensor> train_single(const std::vector<Batch>& data) {
  return testing::train_single(make_mlp(1), data);
}

// Two ranks with batch B each (rank r takes half r of every batch). Rank 1
// starts from other weights: DDP's broadcast must replace them.
// With whole_step, forward, backward and the SGD update are one compiled graph
// holding the bucket all-reduces as collective nodes (trace_collectives).
std::vector<std::vector<Tensor>> train_ddp(const Runner& run, const std::vector<Batch>& data,
                                           bool compiled, DDPOptions base = {},
                                           bool whole_step = false) {
  std::vector<std::shared_ptr<nn::Sequential>> models = {make_mlp(1), make_mlp(2)};
  std::vector<std::vector<Tensor>> params(2);
  const int64_t b = data[0].x.size(0) / 2;
  run(2, [&](int rank, dist::ProcessGroup& pg) {
    auto m = models[static_cast<size_t>(rank)];
    DDPOptions o = base;
    o.process_group = borrow(pg);
    DistributedDataParallel ddp(m, o);
    optim::SGD opt(m->parameters(), {.lr = 0.1, .momentum = 0.9});
    auto fwd_bwd = [&](const Tensor& x, const Tensor& y) {
      Tensor loss = cross_entropy(ddp(x), y);
      loss.backward();
      return loss;
    };
    auto step = compile(fwd_bwd, {.enabled = compiled, .name = "ddp_fwd_bwd"});
    auto whole = compile(
        [&](const Tensor& x, const Tensor& y) {
          opt.zero_grad();
          Tensor loss = cross_entropy(ddp(x), y);
          loss.backward();
          opt.step();
          return loss;
        },
        {.name = "ddp_whole_step"});
    if (whole_step) {
      for (const auto& bt : data)
        whole(bt.x.narrow(0, rank * b, b).contiguous(), bt.y.narrow(0, rank * b, b).contiguous());
      EXPECT_GE(whole.stats().compiled_calls, 5);
      params[static_cast<size_t>(rank)] = m->parameters();
      return;
    }
    dist::WorkPtr prev;
    for (const auto& bt : data) {
      opt.zero_grad();
      step(bt.x.narrow(0, rank * b, b).contiguous(), bt.y.narrow(0, rank * b, b).contiguous());
      // Every step (eager, traced or compiled) reduced every bucket anew.
      auto works = ddp.last_bucket_works();
      ASSERT_EQ(works.size(), ddp.num_buckets());
      EXPECT_NE(works[0], prev);
      prev = works[0];
      opt.step();
    }
    if (compiled) {
      EXPECT_GE(step.stats().compiled_calls, 1);
    }
    params[static_cast<size_t>(rank)] = m->parameters();
  });
  return params;
}

// 2 ranks x batch B == 1 process x batch 2B after 10 SGD-momentum steps.
TEST_P(DDPBackends, TwoRanksMatchOneProcessWithTheWholeBatch) {
  auto data = make_batches(10, 8);
  auto ref = train_single(data);
  auto ranks = train_ddp(runner(), data, /*compiled=*/false, {.first_bucket_mb = 1e-3});
  for (size_t i = 0; i < ref.size(); ++i) {
    expect_close(ranks[0][i], ref[i], 1e-5, str("rank 0 param ", i));
    expect_close(ranks[1][i], ranks[0][i], 0, str("rank 1 param ", i));
  }
}

// The same with forward + backward under kiln::compile: the compiled plan's
// gradient-ready hooks drive the buckets; same parameters as eager DDP.
TEST_P(DDPBackends, CompiledStepMatchesEagerDDP) {
  auto data = make_batches(10, 8);
  auto ref = train_single(data);
  auto eager = train_ddp(runner(), data, /*compiled=*/false, {.first_bucket_mb = 1e-3});
  auto comp = train_ddp(runner(), data, /*compiled=*/true,
                        {.first_bucket_mb = 1e-3, .trace_collectives = false});
  for (size_t i = 0; i < eager[0].size(); ++i) {
    expect_close(comp[0][i], eager[0][i], 1e-5, str("rank 0 param ", i));
    expect_close(comp[0][i], ref[i], 1e-5, str("rank 0 param ", i, " vs one process"));
    expect_close(comp[1][i], comp[0][i], 0, str("rank 1 param ", i));
  }
}

// Forward, backward and the optimizer update as one compiled graph: the bucket
// all-reduces are collective nodes in the IR (trace_collectives); the update
// reads the reduced gradients. Same parameters as eager DDP and one process.
TEST_P(DDPBackends, WholeCompiledStepMatchesEagerDDP) {
  auto data = make_batches(10, 8);
  auto ref = train_single(data);
  auto eager = train_ddp(runner(), data, /*compiled=*/false, {.first_bucket_mb = 1e-3});
  auto comp = train_ddp(runner(), data, /*compiled=*/true, {.first_bucket_mb = 1e-3},
                        /*whole_step=*/true);
  for (size_t i = 0; i < eager[0].size(); ++i) {
    expect_close(comp[0][i], eager[0][i], 1e-5, str("rank 0 param ", i));
    expect_close(comp[0][i], ref[i], 1e-5, str("rank 0 param ", i, " vs one process"));
    expect_close(comp[1][i], comp[0][i], 0, str("rank 1 param ", i));
  }
}

// ---- no_sync, unused parameters, comm hooks ---------------------------------

// Under no_sync() gradients accumulate locally and nothing is reduced; the next
// synchronized backward reduces the accumulated sum (mean over ranks).
TEST_P(DDPBackends, NoSyncAccumulatesLocallyThenReducesTheSum) {
  auto ref = make_mlp(1);
  manual_seed(7);
  std::vector<std::vector<Batch>> data = {
      {{randn({4, 20}), randint(0, 10, {4})}, {randn({4, 20}), randint(0, 10, {4})}},
      {{randn({4, 20}), randint(0, 10, {4})}, {randn({4, 20}), randint(0, 10, {4})}}};
  std::vector<std::vector<Tensor>> first(2), both(2);
  for (int r = 0; r < 2; ++r) {
    first[r] = local_grads(*ref, {data[r][0]});
    both[r] = local_grads(*ref, data[r]);
  }
  auto expected = mean_of(both[0], both[1]);
  std::vector<std::shared_ptr<nn::Sequential>> models = {make_mlp(1), make_mlp(1)};
  runner()(2, [&](int r, dist::ProcessGroup& pg) {
    auto m = models[static_cast<size_t>(r)];
    DistributedDataParallel ddp(m, {.first_bucket_mb = 1e-3, .process_group = borrow(pg)});
    {
      auto guard = ddp.no_sync();
      EXPECT_FALSE(ddp.sync_enabled());
      cross_entropy(ddp(data[r][0].x), data[r][0].y).backward();
    }
    EXPECT_TRUE(ddp.sync_enabled());
    EXPECT_TRUE(ddp.last_bucket_works().empty());  // nothing was reduced
    auto ps = m->parameters();
    for (size_t i = 0; i < ps.size(); ++i)
      expect_close(ps[i].grad(), first[r][i], 1e-6, str("rank ", r, " local grad ", i));
    cross_entropy(ddp(data[r][1].x), data[r][1].y).backward();
    EXPECT_EQ(ddp.last_bucket_works().size(), ddp.num_buckets());
    for (size_t i = 0; i < ps.size(); ++i)
      expect_close(ps[i].grad(), expected[i], 1e-5, str("rank ", r, " reduced grad ", i));
  });
}

// Without find_unused_parameters, a parameter that got no gradient is named in
// the error raised at the end of backward, on every rank.
TEST_P(DDPBackends, UnusedParameterIsNamedInTheError) {
  std::vector<std::shared_ptr<Branchy>> models = {std::make_shared<Branchy>(),
                                                  std::make_shared<Branchy>()};
  std::atomic<int> errors{0};
  runner()(2, [&](int r, dist::ProcessGroup& pg) {
    DistributedDataParallel ddp(models[static_cast<size_t>(r)], {.process_group = borrow(pg)});
    expect_error(
        [&] {
          ddp(ones({2, 4})).sum().backward();
        },
        {"[DistributedDataParallel]", "2 parameter(s) received no gradient", "unused.weight",
         "unused.bias", "find_unused_parameters=true"});
    ++errors;
  });
  EXPECT_EQ(errors.load(), 2);
}

// find_unused_parameters: a branch used on rank 0 only gets rank 0's gradient
// halved on both ranks; a layer no rank used keeps no .grad; the next
// iteration (everything used) reduces normally.
TEST_P(DDPBackends, FindUnusedParametersReducesWhatWasUsed) {
  auto ref = std::make_shared<Branchy>();
  manual_seed(8);
  std::vector<Tensor> xs = {randn({5, 4}), randn({5, 4})};
  auto grads_of = [&](const Tensor& x, bool branch) {
    auto m = std::make_shared<Branchy>();
    m->use_branch = branch;
    m->forward(x).sum().backward();
    return std::vector<Tensor>{m->used->weight.grad(), m->used->bias.grad(),
                               branch ? m->branch->weight.grad() : zeros({3, 4}),
                               branch ? m->branch->bias.grad() : zeros({3})};
  };
  auto it1 = mean_of(grads_of(xs[0], true), grads_of(xs[1], false));
  auto it2 = mean_of(grads_of(xs[0], true), grads_of(xs[1], true));
  std::vector<std::shared_ptr<Branchy>> models = {std::make_shared<Branchy>(),
                                                  std::make_shared<Branchy>()};
  runner()(2, [&](int r, dist::ProcessGroup& pg) {
    auto m = models[static_cast<size_t>(r)];
    DistributedDataParallel ddp(
        m, {.first_bucket_mb = 1e-5, .find_unused_parameters = true, .process_group = borrow(pg)});
    auto check = [&](const std::vector<Tensor>& want, const char* when) {
      expect_close(m->used->weight.grad(), want[0], 1e-6, str(when, " used.weight rank ", r));
      expect_close(m->used->bias.grad(), want[1], 1e-6, str(when, " used.bias rank ", r));
      expect_close(m->branch->weight.grad(), want[2], 1e-6, str(when, " branch.weight rank ", r));
      expect_close(m->branch->bias.grad(), want[3], 1e-6, str(when, " branch.bias rank ", r));
      EXPECT_FALSE(m->unused->weight.grad().defined()) << when << " rank " << r;
      EXPECT_FALSE(m->unused->bias.grad().defined()) << when << " rank " << r;
    };
    m->use_branch = r == 0;
    ddp(xs[static_cast<size_t>(r)]).sum().backward();
    check(it1, "iteration 1");
    m->zero_grad();
    m->use_branch = true;
    ddp(xs[static_cast<size_t>(r)]).sum().backward();
    check(it2, "iteration 2");
  });
}

// The fp16 and bf16 compression hooks give the mean within their precision
// (and really compress: bf16 rounding changes the result).
TEST_P(DDPBackends, CompressionHooksApproximateTheMean) {
  auto ref = make_mlp(1);
  manual_seed(9);
  std::vector<Batch> data = {{randn({6, 20}), randint(0, 10, {6})},
                             {randn({6, 20}), randint(0, 10, {6})}};
  auto expected = mean_of(local_grads(*ref, {data[0]}), local_grads(*ref, {data[1]}));
  std::vector<Batch> other = {{randn({6, 20}), randint(0, 10, {6})},
                              {randn({6, 20}), randint(0, 10, {6})}};
  auto expected_other = mean_of(local_grads(*ref, {other[0]}), local_grads(*ref, {other[1]}));
  for (bool bf16 : {false, true}) {
    std::vector<std::shared_ptr<nn::Sequential>> models = {make_mlp(1), make_mlp(1)};
    std::vector<double> worst(2, 0.0);
    runner()(2, [&](int r, dist::ProcessGroup& pg) {
      auto m = models[static_cast<size_t>(r)];
      DistributedDataParallel ddp(m, {.first_bucket_mb = 1e-3, .process_group = borrow(pg)});
      ddp.register_comm_hook(bf16 ? dist::bf16_compress_hook : dist::fp16_compress_hook);
      expect_error([&] { ddp.register_comm_hook(dist::allreduce_hook); }, "already registered");
      // Three iterations: the hooks' narrow buffers are reused, and the
      // second iteration's data differ (a stale buffer would show).
      for (int it = 0; it < 3; ++it) {
        const auto& batches = it == 1 ? other : data;
        const auto& want = it == 1 ? expected_other : expected;
        const Batch& b = batches[static_cast<size_t>(r)];
        m->zero_grad();
        cross_entropy(ddp(b.x), b.y).backward();
        auto ps = m->parameters();
        for (size_t i = 0; i < ps.size(); ++i) {
          const double scale = want[i].abs().max().item<double>();
          const double d = max_abs_diff(ps[i].grad(), want[i]);
          EXPECT_LE(d, (bf16 ? 1e-2 : 1e-3) * scale)
              << (bf16 ? "bf16" : "fp16") << " param " << i << " iteration " << it;
          worst[static_cast<size_t>(r)] = std::max(worst[static_cast<size_t>(r)], d / scale);
        }
      }
    });
    if (bf16) {
      EXPECT_GT(worst[0], 1e-5);
    }
  }
}

// ---- overlap -----------------------------------------------------------------

// The buckets of the last layers are all-reduced while backward is still
// running: when the first layer's first gradient arrives (bucket 2 is still
// incomplete, so backward has not finished), buckets 0 and 1 have been
// launched, and bucket 0's all-reduce completes while backward waits in that
// hook. Checked with the Work timestamps against the end of backward; no time
// thresholds. Eager and compiled (the plan's gradient-ready hooks).
TEST_P(DDPBackends, AllReduceRunsWhileBackwardRuns) {
  std::vector<std::shared_ptr<nn::Sequential>> models = {make_mlp(1, 256, 256, 256),
                                                         make_mlp(1, 256, 256, 256)};
  manual_seed(10);
  std::vector<Tensor> xs = {randn({64, 256}), randn({64, 256})};
  runner()(2, [&](int r, dist::ProcessGroup& pg) {
    auto m = models[static_cast<size_t>(r)];
    DistributedDataParallel ddp(m, {.bucket_cap_mb = 0.1,
                                    .first_bucket_mb = 0.1,
                                    .trace_collectives = false,  // comm hook, compiled
                                    .process_group = borrow(pg)});
    ASSERT_EQ(ddp.num_buckets(), 3u);
    EXPECT_EQ(ddp.bucket_parameter_names(2), (std::vector<std::string>{"0.bias", "0.weight"}));
    std::vector<dist::WorkPtr> launched;  // this iteration's Works, as DDP launches them
    ddp.register_comm_hook([&](dist::ProcessGroup& g, const dist::GradBucket& b) {
      launched.push_back(dist::allreduce_hook(g, b));
      return launched.back();
    });
    size_t seen_launched = 0;
    dist::Clock::time_point in_backward{};
    auto first = m->at<nn::Linear>(0);
    for (Tensor p : {first->weight, first->bias})
      p.register_post_accumulate_grad_hook([&](const Tensor&) {
        if (seen_launched) return;  // only at the first of the two
        seen_launched = launched.size();
        if (!launched.empty()) launched[0]->wait(std::chrono::seconds(20));
        in_backward = dist::Clock::now();
      });
    // Eager twice, then compiled: warm-up (eager), trace, two plan runs.
    auto fwd_bwd =
        compile([&](const Tensor& x) { ddp(x).pow(2).mean().backward(); }, {.name = "overlap"});
    for (int it = 0; it < 6; ++it) {
      m->zero_grad();
      launched.clear();
      seen_launched = 0;
      if (it < 2) {
        ddp(xs[static_cast<size_t>(r)]).pow(2).mean().backward();
      } else {
        fwd_bwd(xs[static_cast<size_t>(r)]);
      }
      EXPECT_EQ(seen_launched, 2u) << "rank " << r << " step " << it;
      auto works = ddp.last_bucket_works();
      ASSERT_EQ(works.size(), 3u);
      EXPECT_LT(works[0]->start_time(), works[0]->end_time());
      EXPECT_LE(works[0]->end_time(), in_backward);
      EXPECT_LT(in_backward, ddp.last_backward_end());
      // Bucket 1 was launched during backward (seen_launched == 2 above). When
      // its transfer begins on the comm thread races with the few microseconds
      // of backward left after the first layer's hook: not asserted.
      for (auto& w : works) EXPECT_TRUE(w->is_completed());
    }
    EXPECT_GE(fwd_bwd.stats().compiled_calls, 2);
  });
}

// Forwards every call to `inner` and keeps the Works of all_reduce (DDP's
// default reduction), so a test can wait for them during backward.
class RecordingGroup final : public dist::ProcessGroup {
 public:
  explicit RecordingGroup(dist::ProcessGroup& inner) : in_(inner) {}
  int rank() const override { return in_.rank(); }
  int size() const override { return in_.size(); }
  std::string backend() const override { return in_.backend(); }
  std::string transport() const override { return in_.transport(); }
  dist::WorkPtr all_reduce(Tensor t, dist::ReduceOp op) override {
    auto w = in_.all_reduce(t, op);
    std::lock_guard<std::mutex> lock(mu_);
    works_.push_back(w);
    return w;
  }
  dist::WorkPtr all_reduce_coalesced(std::vector<Tensor> ts, dist::ReduceOp op) override {
    return in_.all_reduce_coalesced(std::move(ts), op);
  }
  dist::WorkPtr broadcast(Tensor t, int root) override { return in_.broadcast(t, root); }
  dist::WorkPtr reduce(Tensor t, int root, dist::ReduceOp op) override {
    return in_.reduce(t, root, op);
  }
  dist::WorkPtr all_gather(std::vector<Tensor> outs, Tensor in) override {
    return in_.all_gather(std::move(outs), in);
  }
  dist::WorkPtr reduce_scatter(Tensor out, Tensor in, dist::ReduceOp op) override {
    return in_.reduce_scatter(out, in, op);
  }
  dist::WorkPtr barrier() override { return in_.barrier(); }
  dist::WorkPtr send(Tensor t, int dst, int tag) override { return in_.send(t, dst, tag); }
  dist::WorkPtr recv(Tensor t, int src, int tag) override { return in_.recv(t, src, tag); }
  Tensor make_comm_buffer(int64_t numel, DType dtype) override {
    return in_.make_comm_buffer(numel, dtype);
  }
  const dist::ProcessGroupOptions& options() const override { return in_.options(); }

  std::vector<dist::WorkPtr> works() {
    std::lock_guard<std::mutex> lock(mu_);
    return works_;
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    works_.clear();
  }

 private:
  dist::ProcessGroup& in_;
  std::mutex mu_;
  std::vector<dist::WorkPtr> works_;
};

// The default reduction (no comm hook): buckets 0 and 1 are launched before the
// first layer's gradients arrive, bucket 0's all-reduce completes while
// backward waits in the first layer's hook, and afterwards every .grad is the
// reduced bucket view. Ordering only, from Work timestamps; eager, with
// zero_grad() and zero_grad(false).
TEST_P(DDPBackends, DefaultReductionRunsWhileBackwardRuns) {
  std::vector<std::shared_ptr<nn::Sequential>> models = {make_mlp(1, 256, 256, 256),
                                                         make_mlp(1, 256, 256, 256)};
  manual_seed(10);
  std::vector<Tensor> xs = {randn({64, 256}), randn({64, 256})};
  runner()(2, [&](int r, dist::ProcessGroup& pg) {
    auto m = models[static_cast<size_t>(r)];
    auto rec = std::make_shared<RecordingGroup>(pg);
    auto grad_of = [&](const std::string& name) {
      for (auto& [n, t] : m->named_parameters())
        if (n == name) return t.grad();
      return Tensor();
    };
    DistributedDataParallel ddp(
        m, {.bucket_cap_mb = 0.1, .first_bucket_mb = 0.1, .process_group = rec});
    ASSERT_EQ(ddp.num_buckets(), 3u);
    size_t seen_launched = 0;
    dist::Clock::time_point in_backward{};
    auto first = m->at<nn::Linear>(0);
    for (Tensor p : {first->weight, first->bias})
      p.register_post_accumulate_grad_hook([&](const Tensor&) {
        if (seen_launched) return;  // only at the first of the two
        auto works = rec->works();
        seen_launched = works.size();
        if (!works.empty()) works[0]->wait(std::chrono::seconds(20));
        in_backward = dist::Clock::now();
      });
    for (int it = 0; it < 4; ++it) {
      m->zero_grad(/*set_to_none=*/it % 2 == 0);
      rec->clear();
      seen_launched = 0;
      ddp(xs[static_cast<size_t>(r)]).pow(2).mean().backward();
      EXPECT_EQ(seen_launched, 2u) << "rank " << r << " step " << it;
      auto works = ddp.last_bucket_works();
      auto launches = ddp.last_bucket_launch_times();
      ASSERT_EQ(works.size(), 3u);
      ASSERT_EQ(launches.size(), 3u);
      EXPECT_EQ(rec->works().size(), 3u);  // one all_reduce per bucket
      EXPECT_LE(launches[0], launches[1]);
      EXPECT_LE(launches[1], in_backward);
      EXPECT_LE(launches[0], works[0]->start_time());
      EXPECT_LE(works[0]->start_time(), works[0]->end_time());
      EXPECT_LE(works[0]->end_time(), in_backward);
      EXPECT_LT(in_backward, ddp.last_backward_end());
      for (size_t b = 0; b < 3; ++b) {
        Tensor buf = ddp.bucket_buffer(b);
        for (const auto& name : ddp.bucket_parameter_names(b)) {
          Tensor g = grad_of(name);
          ASSERT_TRUE(g.defined()) << name;
          EXPECT_EQ(g.impl()->storage, buf.impl()->storage) << name << " step " << it;
        }
      }
    }
  });
}

// ---- user errors -------------------------------------------------------------

TEST(DDPErrors, BadModulesAndOptions) {
  auto pg = testing::make_thread_groups(1)[0];
  auto no_params = std::make_shared<nn::Sequential>();
  no_params->push_back(std::make_shared<nn::ReLU>());
  expect_error([&] { DistributedDataParallel(no_params, {.process_group = pg}); },
               "no parameter that requires grad");
  expect_error([&] { DistributedDataParallel(nullptr, {.process_group = pg}); }, "module is null");
  expect_error(
      [&] { DistributedDataParallel(make_mlp(1), {.bucket_cap_mb = 0, .process_group = pg}); },
      "bucket_cap_mb and first_bucket_mb must be > 0");
}

// Ranks that built different models get the same clear error (no hang).
TEST_P(DDPBackends, RanksWithDifferentModelsGetAClearError) {
  std::vector<std::shared_ptr<nn::Sequential>> models = {make_mlp(1, 20, 32, 10),
                                                         make_mlp(1, 20, 16, 10)};
  std::atomic<int> errors{0};
  runner()(2, [&](int r, dist::ProcessGroup& pg) {
    expect_error(
        [&] {
          DistributedDataParallel(models[static_cast<size_t>(r)], {.process_group = borrow(pg)});
        },
        {"ranks disagree on the parameters", "rank 0 has 6 parameters", "rank 1 has 6"});
    ++errors;
  });
  EXPECT_EQ(errors.load(), 2);
}

INSTANTIATE_TEST_SUITE_P(, DDPBackends, ::testing::Values("threads", "gloo"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kiln
