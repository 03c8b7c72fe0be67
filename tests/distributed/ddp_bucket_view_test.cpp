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
          if (v != Variant::kSeparateGrads) {
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

INSTANTIATE_TEST_SUITE_P(, DDPBucketViews, ::testing::Values(0, 1),
                         [](const auto& info) { return info.param ? "shm" : "tcp"; });

}  // namespace
}  // namespace kiln
