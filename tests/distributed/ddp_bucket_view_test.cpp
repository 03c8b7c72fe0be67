// DistributedDataParallel's gradient_as_bucket_view and the gradients that
// backward computes straight into the buckets (kiln/grad_destination.h): 2
// ranks over Gloo, on loopback TCP and on shared memory, train bit-identical
// parameters with bucket views on and off (and with the gradients copied into
// the buckets instead of computed there) under zero_grad(set_to_none) true and
// false, gradient accumulation, no_sync(), SGD momentum and Adam, eager and
// compiled; every .grad lies inside its bucket's storage.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>

#include "distributed/ddp_reference.h"
#include "distributed/thread_group.h"
#include "kiln/compile.h"
#include "kiln/distributed/collectives.h"
#include "kiln/distributed/ddp.h"
#include "kiln/grad_destination.h"
#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"

namespace kiln {
namespace {

using dist::DDPOptions;
using dist::DistributedDataParallel;

std::shared_ptr<dist::ProcessGroup> borrow(dist::ProcessGroup& pg) {
  return std::shared_ptr<dist::ProcessGroup>(&pg, [](dist::ProcessGroup*) {});
}

// What one training run does per step.
struct Schedule {
  bool set_to_none = true;
  bool adam = false;           // else SGD with momentum
  int backwards_per_step = 1;  // > 1: accumulation without zero_grad in between
  bool no_sync = false;        // all but the last backward of a step under no_sync()
  bool compiled = false;       // forward + backward under kiln::compile (hooks drive the buckets)
  bool whole_step = false;     // zero_grad, forward, backward, update as one compiled graph
  bool traced_collectives = false;  // compiled: the all-reduces as IR nodes (else hooks)
  std::string name() const {
    return str(set_to_none ? "set_to_none" : "zero_grad(false)", adam ? ", Adam" : ", SGD", ", ",
               backwards_per_step, " backward(s)", no_sync ? ", no_sync" : "",
               compiled ? ", compiled" : "", whole_step ? ", whole step" : "",
               traced_collectives ? ", collectives traced" : "");
  }
};

// How DDP treats the gradients.
enum class Variant { kSeparateGrads, kViewsCopiedIn, kViewsComputedIn };

DDPOptions options_of(Variant v) {
  DDPOptions o{.first_bucket_mb = 2e-3};  // several buckets
  o.gradient_as_bucket_view = v != Variant::kSeparateGrads;
  o.compute_grads_in_buckets = v == Variant::kViewsComputedIn;
  return o;
}

struct RunResult {
  std::vector<std::vector<Tensor>> params{2};
  int64_t computed_in_place = 0;  // gradient destinations' counters over the run
  int64_t copied = 0;
};

constexpr int kSteps = 4;

// kSteps steps of 2 ranks over Gloo (`shm` as ProcessGroupOptions::shm), each
// on its own micro-batches of the MLP 20-32-32-10.
RunResult train(int shm, Variant v, const Schedule& s) {
  std::vector<std::shared_ptr<nn::Sequential>> models = {testing::make_mlp(1, {20, 32, 32, 10}),
                                                         testing::make_mlp(2, {20, 32, 32, 10})};
  auto data = testing::make_batches(kSteps * s.backwards_per_step, 8, 20, 10);
  const auto before = autograd::grad_destination_stats();
  RunResult out;
  testing::run_gloo_ranks(
      2,
      [&](int rank, dist::ProcessGroup& pg) {
        EXPECT_EQ(pg.transport(), shm ? "shm" : "tcp");
        auto m = models[static_cast<size_t>(rank)];
        DDPOptions o = options_of(v);
        o.trace_collectives = s.whole_step || s.traced_collectives;
        o.process_group = borrow(pg);
        DistributedDataParallel ddp(m, o);
        std::unique_ptr<optim::Optimizer> opt;
        if (s.adam)
          opt = std::make_unique<optim::Adam>(m->parameters(), optim::AdamOptions{.lr = 1e-2});
        else
          opt = std::make_unique<optim::SGD>(m->parameters(),
                                             optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
        auto half = [&](const Tensor& t) { return t.narrow(0, rank * 8, 8).contiguous(); };
        auto fwd_bwd = compile(
            [&](const Tensor& x, const Tensor& y) {
              Tensor loss = cross_entropy(ddp(x), y);
              loss.backward();
              return loss;
            },
            {.enabled = s.compiled, .name = "bucket_view_fwd_bwd"});
        auto whole = compile(
            [&](const Tensor& x, const Tensor& y) {
              opt->zero_grad(s.set_to_none);
              Tensor loss = cross_entropy(ddp(x), y);
              loss.backward();
              opt->step();
              return loss;
            },
            {.name = "bucket_view_whole_step"});
        for (int step = 0, k = 0; step < kSteps; ++step) {
          if (s.whole_step) {
            whole(half(data[size_t(k)].x), half(data[size_t(k)].y));
            ++k;
            continue;
          }
          opt->zero_grad(s.set_to_none);
          for (int b = 0; b < s.backwards_per_step; ++b, ++k) {
            const bool last = b + 1 == s.backwards_per_step;
            std::optional<DistributedDataParallel::NoSyncGuard> guard;
            if (s.no_sync && !last) guard.emplace(ddp);
            fwd_bwd(half(data[size_t(k)].x), half(data[size_t(k)].y));
          }
          // (a traced all-reduce of gradients copied in returns separate
          // tensors: the code before session 8, kept for comparisons)
          const bool views_expected =
              v == Variant::kViewsComputedIn ||
              (v == Variant::kViewsCopiedIn && !(s.traced_collectives && s.set_to_none));
          if (views_expected) {
            // Every .grad is a view into its bucket: its data lies in the buffer.
            size_t in_bucket = 0;
            for (auto& p : m->parameters())
              for (size_t bk = 0; bk < ddp.num_buckets(); ++bk) {
                Tensor buf = ddp.bucket_buffer(bk);
                const char* lo = static_cast<const char*>(buf.data_ptr());
                const char* g = static_cast<const char*>(p.grad().data_ptr());
                if (p.grad().impl()->storage == buf.impl()->storage && g >= lo &&
                    g + p.grad().numel() * 4 <= lo + buf.numel() * 4)
                  ++in_bucket;
              }
            EXPECT_EQ(in_bucket, m->parameters().size()) << "step " << step;
          }
          opt->step();
        }
        out.params[static_cast<size_t>(rank)] = m->parameters();
      },
      std::chrono::milliseconds(30000), shm);
  const auto after = autograd::grad_destination_stats();
  out.computed_in_place = after.computed_in_place - before.computed_in_place;
  out.copied = after.copied - before.copied;
  return out;
}

void expect_bits_equal(const std::vector<Tensor>& a, const std::vector<Tensor>& b,
                       const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    auto x = a[i].to_vector<float>(), y = b[i].to_vector<float>();
    ASSERT_EQ(x.size(), y.size()) << what;
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0)
        << what << ": parameter " << i << " differs";
  }
}

class DDPBucketViews : public ::testing::TestWithParam<int> {};

// The same parameters, to the bit, whether .grad is a separate tensor, a
// bucket view that gradients are copied into, or a bucket view that backward
// computes them into; and both ranks agree.
TEST_P(DDPBucketViews, BitIdenticalWithAndWithoutBucketViews) {
  const int shm = GetParam();
  std::vector<Schedule> schedules = {
      {.set_to_none = true},
      {.set_to_none = false},
      {.set_to_none = true, .adam = true},
      {.set_to_none = false, .adam = true, .backwards_per_step = 2},
      {.set_to_none = true, .backwards_per_step = 3},
      {.set_to_none = true, .backwards_per_step = 2, .no_sync = true},
      {.set_to_none = false, .adam = true, .backwards_per_step = 2, .no_sync = true},
  };
  for (const Schedule& s : schedules) {
    SCOPED_TRACE(s.name());
    RunResult separate = train(shm, Variant::kSeparateGrads, s);
    RunResult copied = train(shm, Variant::kViewsCopiedIn, s);
    RunResult computed = train(shm, Variant::kViewsComputedIn, s);
    expect_bits_equal(separate.params[0], separate.params[1], "separate grads, rank 1 vs 0");
    expect_bits_equal(copied.params[0], separate.params[0], "views, copied in");
    expect_bits_equal(computed.params[0], separate.params[0], "views, computed in");
    expect_bits_equal(computed.params[1], computed.params[0], "views, computed in, rank 1 vs 0");
    EXPECT_EQ(
        separate.computed_in_place + separate.copied + copied.computed_in_place + copied.copied, 0);
    // Each rank's three Linear weights are computed in their buckets (their
    // biases copied) whenever .grad was undefined: every step after
    // zero_grad(set_to_none), else only the first step.
    const int64_t undefined_steps = s.set_to_none ? kSteps : 1;
    EXPECT_EQ(computed.computed_in_place, 2 * 3 * undefined_steps);
    EXPECT_EQ(computed.copied, 2 * 3 * undefined_steps);
  }
}

// Compiled steps: forward + backward under kiln::compile (the plan writes the
// gradients and fires DDP's hooks) and the whole step as one graph (the
// all-reduces are IR nodes) give the same bits with bucket views on and off.
TEST_P(DDPBucketViews, CompiledStepsBitIdenticalWithAndWithoutBucketViews) {
  const int shm = GetParam();
  std::vector<Schedule> schedules = {
      {.set_to_none = true, .compiled = true},
      {.set_to_none = false, .compiled = true},
      {.set_to_none = true, .whole_step = true},
      {.set_to_none = false, .compiled = true, .traced_collectives = true},
      {.set_to_none = true, .compiled = true, .traced_collectives = true},
      {.set_to_none = true, .adam = true, .compiled = true, .traced_collectives = true},
      {.set_to_none = true, .backwards_per_step = 2, .compiled = true},
  };
  for (const Schedule& s : schedules) {
    SCOPED_TRACE(s.name());
    RunResult separate = train(shm, Variant::kSeparateGrads, s);
    RunResult copied = train(shm, Variant::kViewsCopiedIn, s);
    RunResult computed = train(shm, Variant::kViewsComputedIn, s);
    expect_bits_equal(separate.params[1], separate.params[0], "separate, rank 1 vs 0");
    expect_bits_equal(copied.params[0], separate.params[0], "views copied in vs separate grads");
    expect_bits_equal(copied.params[1], copied.params[0], "views copied in, rank 1 vs 0");
    expect_bits_equal(computed.params[0], separate.params[0], "views vs separate grads");
    expect_bits_equal(computed.params[1], computed.params[0], "rank 1 vs 0");
  }
}

// A compiled step computes a gradient without .grad into the parameter's
// gradient destination (the plan's output destination): the weight's GEMM
// writes there and .grad is that buffer, with eager's values. It used to
// write a fresh tensor that DDP then copied into its bucket.
TEST(GradDestination, CompiledStepComputesGradientsInTheirDestinations) {
  manual_seed(7);
  auto lin = std::make_shared<nn::Linear>(16, 8);
  Tensor x = randn({4, 16});
  lin->forward(x).square().sum().backward();
  const Tensor want_w = lin->weight.grad().clone(), want_b = lin->bias.grad().clone();
  Tensor dw = zeros({8, 16}), db = zeros({8});
  autograd::set_grad_destination(lin->weight, dw);
  autograd::set_grad_destination(lin->bias, db);
  auto step = compile([&](const Tensor& in) { lin->forward(in).square().sum().backward(); });
  for (int i = 0; i < 3; ++i) {
    lin->zero_grad();  // set_to_none
    step(x);
    EXPECT_EQ(lin->weight.grad().data_ptr(), dw.data_ptr()) << "call " << i;
    EXPECT_EQ(lin->bias.grad().data_ptr(), db.data_ptr()) << "call " << i;
    EXPECT_TRUE(allclose(lin->weight.grad(), want_w, 1e-5, 1e-6));
    EXPECT_TRUE(allclose(lin->bias.grad(), want_b, 1e-5, 1e-6));
  }
  EXPECT_GE(step.stats().compiled_calls, 2);
  autograd::clear_grad_destination(lin->weight);
  autograd::clear_grad_destination(lin->bias);
}

// A compiled step whose backward accumulates into a defined .grad (after
// zero_grad(set_to_none=false)) fires the post-accumulate-grad hooks with the
// sum, once per call. It used to trace the accumulation as an in-place write of
// .grad, which fires no hook: DDP then reduced nothing in compiled steps and
// the ranks drifted apart.
TEST(GradAccumulation, CompiledAccumulationFiresPostAccumulateHooks) {
  manual_seed(6);
  auto lin = std::make_shared<nn::Linear>(3, 2);
  int calls = 0;
  Tensor seen;
  lin->weight.register_post_accumulate_grad_hook([&](const Tensor& p) {
    ++calls;
    ASSERT_FALSE(p.grad().is_symbolic());
    seen = p.grad().clone();
  });
  auto step = compile([&](const Tensor& x) { lin->forward(x).sum().backward(); });
  for (int i = 0; i < 4; ++i) {
    lin->zero_grad(/*set_to_none=*/false);  // undefined on the first call only
    step(full({2, 3}, 1.0));
    lin->forward(full({2, 3}, 1.0)).sum().backward();  // eager: accumulates once more
  }
  EXPECT_GE(step.stats().compiled_calls, 2);
  EXPECT_EQ(calls, 8);
  EXPECT_TRUE(allclose(seen, full({2, 3}, 4.0)));  // two backwards of column sums 2
}

// A compiled step whose all-reduces are IR nodes computes each weight
// gradient in its bucket: the executor lends the collective_wait output's
// destination (the bucket view) to the GEMM, so the bound collective_start
// copies only the biases (reshaped sums) and collective_wait copies nothing.
// It copied all six gradients into the bucket before.
TEST(DDPCompiledCollectives, WeightGradientsAreComputedInTheirBuckets) {
  std::vector<std::shared_ptr<nn::Sequential>> models = {testing::make_mlp(1, {20, 32, 32, 10}),
                                                         testing::make_mlp(2, {20, 32, 32, 10})};
  std::vector<int> calls(2, 0);
  std::vector<Tensor> grads(2);
  dist::BoundCollectiveStats before{};
  testing::run_gloo_ranks(
      2,
      [&](int rank, dist::ProcessGroup& pg) {
        auto m = models[static_cast<size_t>(rank)];
        DDPOptions o = options_of(Variant::kViewsComputedIn);
        o.process_group = borrow(pg);
        DistributedDataParallel ddp(m, o);
        Tensor x = randn({8, 20}), y = full({8}, 3.0, DType::i64);
        auto step = compile([&](const Tensor& in, const Tensor& t) {
          Tensor loss = cross_entropy(ddp(in), t);
          loss.backward();
          return loss;
        });
        m->zero_grad();
        step(x, y);  // eager (the warm-up call)
        pg.barrier()->wait();
        if (rank == 0) before = dist::bound_collective_stats();
        pg.barrier()->wait();
        for (int i = 0; i < 3; ++i) {
          m->zero_grad();
          step(x, y);
        }
        calls[static_cast<size_t>(rank)] = step.stats().compiled_calls;
        grads[static_cast<size_t>(rank)] = m->parameters()[0].grad().clone();
      },
      std::chrono::milliseconds(30000), 1);
  const dist::BoundCollectiveStats after = dist::bound_collective_stats();
  EXPECT_EQ(calls[0], 3);
  EXPECT_EQ(calls[1], 3);
  EXPECT_EQ(after.in_place - before.in_place, 2 * 3 * 3);  // ranks x calls x weights
  EXPECT_EQ(after.copied - before.copied, 2 * 3 * 3);      // the biases
  EXPECT_TRUE(equal(grads[0], grads[1]));
}

// A traced accumulation into a defined .grad computes a Linear's weight
// gradient untransposed: the matmul's result is not read through a permute
// (it was: the add read it through a strided copy, 1.5x a DDP step with
// zero_grad(set_to_none=false) on 1024x1024 weights).
TEST(GradAccumulation, CompiledAccumulationReadsNoTransposedMatmul) {
  manual_seed(8);
  auto lin = std::make_shared<nn::Linear>(64, 32);
  Tensor x = randn({16, 64});
  auto step = compile([&](const Tensor& in) { lin->forward(in).square().sum().backward(); });
  Tensor want;
  for (int i = 0; i < 3; ++i) {
    lin->zero_grad(/*set_to_none=*/false);  // undefined on the first call only
    step(x);
    step(x);
  }
  {
    auto ref = std::make_shared<nn::Linear>(64, 32);
    ref->weight.detach().copy_(lin->weight.detach());
    ref->bias.detach().copy_(lin->bias.detach());
    for (int k = 0; k < 2; ++k) ref->forward(x).square().sum().backward();
    want = ref->weight.grad();
  }
  EXPECT_TRUE(allclose(lin->weight.grad(), want, 1e-4, 1e-5));
  EXPECT_GE(step.stats().compiled_calls, 2);
  const std::string g = step.graph_text();
  std::vector<std::string> matmuls;  // "%N" of every matmul's result
  for (size_t at = g.find(" = matmul("); at != std::string::npos; at = g.find(" = matmul(", at + 1))
    matmuls.push_back(g.substr(g.rfind('%', at), at - g.rfind('%', at)));
  EXPECT_FALSE(matmuls.empty()) << g;
  for (const std::string& m : matmuls)
    EXPECT_EQ(g.find("permute(" + m + ")"), std::string::npos) << m << " is transposed:\n" << g;
}

INSTANTIATE_TEST_SUITE_P(, DDPBucketViews, ::testing::Values(0, 1),
                         [](const auto& info) { return info.param ? "shm" : "tcp"; });

}  // namespace
}  // namespace kiln
