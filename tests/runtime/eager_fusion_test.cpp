// Eager mode's fused composites (runtime/src/ops/fused_composites.cpp): softmax,
// log_softmax, layer_norm, GELU and SiLU against their unfused primitive-op form
// (set_eager_fusion(false)), forward and backward, on special values, odd
// shapes, non-contiguous inputs and every dtype they take; gradcheck and double
// backward; what falls back to the primitives; the vectorizable exp's accuracy.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "ops/vec_math.h"
#include "runtime/cpu_levels.h"
#include "symbolic_recorder.h"
#include "test_util.h"

using namespace kiln;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Restores the process-wide fusion switch.
struct FusionScope {
  bool prev = eager_fusion_enabled();
  explicit FusionScope(bool on) { set_eager_fusion(on); }
  ~FusionScope() { set_eager_fusion(prev); }
};

int64_t ulps(float a, double b) {
  const float r = static_cast<float>(b);
  if (std::isnan(a) && std::isnan(r)) return 0;
  auto key = [](float f) {
    const int32_t i = std::bit_cast<int32_t>(f);
    return i < 0 ? int64_t{INT32_MIN} - i : int64_t{i};
  };
  return std::abs(key(a) - key(r));
}

TEST(EagerFusion, ExpF32WithinTwoUlpOnADenseSweep) {
  int64_t worst = 0;
  float worst_x = 0;
  // Every 251st float pattern: all magnitudes, both signs, subnormal results included.
  for (uint64_t b = 0; b <= 0xFFFFFFFFull; b += 251) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(b));
    const int64_t u = ulps(ops::vec::exp_f32(x), std::exp(static_cast<double>(x)));
    if (u > worst) worst = u, worst_x = x;
  }
  EXPECT_LE(worst, 2) << "at x = " << worst_x;
  EXPECT_EQ(ops::vec::exp_f32(std::numeric_limits<float>::infinity()),
            std::numeric_limits<float>::infinity());
  EXPECT_EQ(ops::vec::exp_f32(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isnan(ops::vec::exp_f32(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(ops::vec::exp_f32(0.0f), 1.0f);
  EXPECT_EQ(ops::vec::exp_f32(89.0f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(ops::vec::exp_f32(-104.0f), 0.0f);
}

using Fn = std::function<Tensor(const Tensor&)>;

struct Case {
  std::string name;
  Fn f;
};

std::vector<Case> cases() {
  Tensor w = randn({7}), b = randn({7});
  return {
      {"softmax", [](const Tensor& x) { return softmax(x, -1); }},
      {"log_softmax", [](const Tensor& x) { return log_softmax(x, -1); }},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, "tanh"); }},
      {"gelu_erf", [](const Tensor& x) { return gelu(x, "none"); }},
      {"silu", [](const Tensor& x) { return silu(x); }},
      {"layer_norm", [](const Tensor& x) { return layer_norm(x, {x.size(-1)}); }},
      {"layer_norm_affine",
       [w, b](const Tensor& x) {
         return layer_norm(x, {7}, cast(w, x.dtype()), cast(b, x.dtype()), 1e-5);
       }},
      {"layer_norm_2d",
       [](const Tensor& x) {
         return x.dim() >= 2 ? layer_norm(x, {x.size(-2), x.size(-1)})
                             : layer_norm(x, {x.size(-1)});
       }},
  };
}

// Inputs of trailing size 7 (layer_norm_affine's weight): random rows, a row of
// special values, large magnitudes, a transposed (non-contiguous) view, a slice.
std::vector<Tensor> inputs(DType dt) {
  std::vector<Tensor> xs;
  xs.push_back(cast(randn({5, 7}) * 3.0, dt));
  xs.push_back(cast(randn({2, 3, 7}), dt));
  Tensor special = from_vector(std::vector<double>{0.0,   -0.0, 1e30, -1e30, 80.0, -80.0, 7.0,  //
                                                   kInf,  1.0,  2.0,  3.0,   4.0,  5.0,   6.0,  //
                                                   -kInf, 1.0,  2.0,  3.0,   4.0,  5.0,   6.0,  //
                                                   kNaN,  1.0,  2.0,  3.0,   4.0,  5.0,   6.0},
                               {4, 7});
  xs.push_back(cast(special, dt));
  xs.push_back(cast(randn({7, 5}), dt).transpose(0, 1));      // non-contiguous
  xs.push_back(cast(randn({4, 14}), dt).slice(1, 0, 14, 2));  // strided rows
  xs.push_back(cast(randn({0, 7}), dt));
  return xs;
}

void expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  std::vector<double> g = cast(got, DType::f64).contiguous().to_vector<double>();
  std::vector<double> w = cast(want, DType::f64).contiguous().to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i]) || std::isinf(w[i])) {
      EXPECT_TRUE(std::isnan(w[i]) ? std::isnan(g[i]) : g[i] == w[i])
          << what << " element " << i << ": got " << g[i] << ", want " << w[i];
    } else {
      EXPECT_NEAR(g[i], w[i], tol * std::max(1.0, std::abs(w[i]))) << what << " element " << i;
    }
  }
}

double tol_of(DType dt) {
  return dt == DType::f32 ? 2e-5 : 1e-12;
}

TEST(EagerFusion, ForwardMatchesThePrimitiveOps) {
  manual_seed(7);
  for (DType dt : {DType::f32, DType::f64}) {
    for (const Case& c : cases()) {
      int k = 0;
      for (const Tensor& x : inputs(dt)) {
        Tensor fused, plain;
        {
          FusionScope on(true);
          fused = c.f(x);
        }
        {
          FusionScope off(false);
          plain = c.f(x);
        }
        expect_close(fused, plain, tol_of(dt), c.name + " input " + std::to_string(k++));
      }
    }
  }
}

TEST(EagerFusion, BackwardMatchesThePrimitiveOps) {
  manual_seed(8);
  for (DType dt : {DType::f32, DType::f64}) {
    for (const Case& c : cases()) {
      // Finite inputs only: gradients through inf/NaN are NaN in both forms.
      for (const Tensor& x0 : {cast(randn({6, 7}) * 2.0, dt), cast(randn({2, 3, 7}), dt),
                               cast(randn({7, 5}), dt).transpose(0, 1)}) {
        Tensor gy = cast(randn(x0.shape()), dt);
        auto run = [&](bool on) {
          FusionScope s(on);
          Tensor x = x0.detach().requires_grad_();
          Tensor y = c.f(x);
          y.backward(gy);
          return x.grad();
        };
        expect_close(run(true), run(false), dt == DType::f32 ? 1e-4 : 1e-10, c.name);
      }
    }
  }
}

TEST(EagerFusion, LayerNormWeightAndBiasGradients) {
  manual_seed(9);
  for (DType dt : {DType::f32, DType::f64}) {
    for (bool x_grad : {true, false}) {
      Tensor x0 = cast(randn({37, 3, 11}), dt), w0 = cast(randn({3, 11}), dt),
             b0 = cast(randn({3, 11}), dt), gy = cast(randn({37, 3, 11}), dt);
      auto run = [&](bool on) {
        FusionScope s(on);
        Tensor x = x0.detach().requires_grad_(x_grad), w = w0.detach().requires_grad_(),
               b = b0.detach().requires_grad_();
        layer_norm(x, {3, 11}, w, b, 1e-3).backward(gy);
        return std::vector<Tensor>{x.grad(), w.grad(), b.grad()};
      };
      auto f = run(true), p = run(false);
      const double tol = dt == DType::f32 ? 1e-4 : 1e-10;
      EXPECT_EQ(f[0].defined(), x_grad);
      if (x_grad) expect_close(f[0], p[0], tol, "x");
      expect_close(f[1], p[1], tol, "weight");
      expect_close(f[2], p[2], tol, "bias");
    }
  }
}

TEST(EagerFusion, GradcheckAndDoubleBackward) {
  manual_seed(10);
  FusionScope on(true);
  for (const Case& c : cases()) {
    Tensor x = (randn({3, 7}, DType::f64)).requires_grad_();
    EXPECT_EQ(
        gradcheck([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{c.f(in[0])}; },
                  {x}),
        "")
        << c.name;
    Tensor w = rand({3, 7}, DType::f64) - 0.5;
    EXPECT_EQ(gradcheck(
                  [&](const std::vector<Tensor>& in) {
                    GradModeGuard g(true);
                    return grad({c.f(in[0])}, {in[0]}, {w},
                                {.retain_graph = true, .create_graph = true});
                  },
                  {x}),
              "")
        << c.name << " (double backward)";
  }
  // layer_norm's weight and bias through gradcheck.
  Tensor x = randn({4, 5}, DType::f64).requires_grad_();
  Tensor w = randn({5}, DType::f64).requires_grad_(), b = randn({5}, DType::f64).requires_grad_();
  EXPECT_EQ(gradcheck(
                [](const std::vector<Tensor>& in) {
                  return std::vector<Tensor>{layer_norm(in[0], {5}, in[1], in[2], 1e-5)};
                },
                {x, w, b}),
            "");
}

TEST(EagerFusion, FusedCallIsOneTapeNode) {
  FusionScope on(true);
  Tensor x = randn({2, 7}).requires_grad_();
  EXPECT_EQ(softmax(x, -1).grad_fn()->name(), "SoftmaxBackward");
  EXPECT_EQ(log_softmax(x, 1).grad_fn()->name(), "LogSoftmaxBackward");
  EXPECT_EQ(layer_norm(x, {7}).grad_fn()->name(), "LayerNormBackward");
  EXPECT_EQ(gelu(x).grad_fn()->name(), "GeluBackward");
  EXPECT_EQ(silu(x).grad_fn()->name(), "SiluBackward");
  // Without grad, no node at all.
  EXPECT_EQ(softmax(x.detach(), -1).grad_fn(), nullptr);
}

TEST(EagerFusion, OtherCallsRunThePrimitiveOps) {
  FusionScope on(true);
  Tensor x = randn({3, 7}).requires_grad_();
  // Not the last dim, half precision, integer-free but mixed dtypes, fusion off.
  // (softmax over another dim runs the primitive ops forward and keeps
  // softmax's own backward, which reads only the output.)
  EXPECT_EQ(softmax(x, 0).grad_fn()->name(), "SoftmaxBackward");
  EXPECT_EQ(softmax(x, 0).grad_fn()->next_edges.size(), 1u);
  EXPECT_NE(gelu(cast(x, DType::f16)).grad_fn()->name(), "GeluBackward");
  EXPECT_NE(layer_norm(x, {7}, ones({7}, DType::f64)).grad_fn()->name(), "LayerNormBackward");
  {
    FusionScope off(false);
    EXPECT_NE(silu(x).grad_fn()->name(), "SiluBackward");
  }
  // softmax over dim 0 still gives the right values.
  Tensor y = softmax(x.detach(), 0), ref = exp(x.detach()) / sum(exp(x.detach()), {0}, true);
  EXPECT_TRUE(allclose(y, ref, 1e-5, 1e-6));
  // half precision results are unchanged: computed by the primitive ops.
  Tensor h = cast(randn({4, 9}), DType::bf16);
  Tensor hs = softmax(h, -1);
  EXPECT_EQ(hs.dtype(), DType::bf16);
  FusionScope off(false);
  EXPECT_TRUE(equal(hs, softmax(h, -1)));
}

TEST(EagerFusion, TracingRecordsThePrimitiveOps) {
  FusionScope on(true);
  Tensor x = randn({2, 7});
  kiln::testing::TraceScope t;
  Tensor y = softmax(x, -1);
  (void)y;
  EXPECT_GT(t.rec.ops.size(), 2u);  // amax, sub, exp, sum, div
  bool has_exp = false;
  for (OpId op : t.rec.ops) has_exp = has_exp || op == OpId::exp;
  EXPECT_TRUE(has_exp);
}

TEST(EagerFusion, InPlaceWriteOfWhatBackwardReadsIsAnError) {
  FusionScope on(true);
  Tensor x = randn({2, 7}).requires_grad_();
  Tensor y = softmax(x, -1);
  y.mul_(2.0);
  kiln::testing::expect_error([&] { sum(y).backward(); }, {"SoftmaxBackward", "in-place"});
  Tensor a = randn({2, 7}).requires_grad_();
  Tensor a2 = a * 1.0;
  Tensor g = gelu(a2);
  a2.add_(1.0);
  kiln::testing::expect_error([&] { sum(g).backward(); }, {"GeluBackward", "in-place"});
}

TEST(EagerFusion, LongRowsAndManyRows) {
  manual_seed(11);
  // Rows longer and shorter than the lane count, many rows over the thread pool.
  for (Dims shape : {Dims{3, 100003}, Dims{20000, 3}, Dims{1, 1}, Dims{5, 17}}) {
    Tensor x = randn(shape) * 4.0;
    for (auto f : {Fn([](const Tensor& t) { return softmax(t, -1); }),
                   Fn([](const Tensor& t) { return layer_norm(t, {t.size(-1)}); }),
                   Fn([](const Tensor& t) { return gelu(t, "tanh"); })}) {
      Tensor fused, plain;
      {
        FusionScope on(true);
        fused = f(x);
      }
      {
        FusionScope off(false);
        plain = f(x);
      }
      expect_close(fused, plain, 1e-4, "shape " + std::to_string(shape[0]));
    }
  }
}

// scaled_dot_product_attention's safe softmax runs fused in eager; outputs and
// gradients as the primitive form's, which carries the same output-only
// SoftmaxBackward node (not exp's and the division's); a fully masked query
// row gives zeros and zero gradients.
TEST(EagerFusion, AttentionSoftmaxRunsFused) {
  manual_seed(13);
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor q0 = randn({2, 3, 5, 4}, dt), k0 = randn({2, 3, 6, 4}, dt), v0 = randn({2, 3, 6, 4}, dt);
    // Query row 2 sees no key.
    Tensor mask = logical_and(rand({5, 6}).gt(0.3), unsqueeze(arange(5), 1).ne(2));
    Tensor gy = randn({2, 3, 5, 4}, dt);
    auto run = [&](bool fused) {
      FusionScope scope(fused);
      Tensor q = q0.detach().requires_grad_(), k = k0.detach().requires_grad_(),
             v = v0.detach().requires_grad_();
      Tensor y = scaled_dot_product_attention(q, k, v, mask);
      // Any SoftmaxBackward node in y's graph.
      bool found = false;
      std::vector<std::shared_ptr<Node>> todo{y.grad_fn()};
      while (!todo.empty() && !found) {
        std::shared_ptr<Node> n = todo.back();
        todo.pop_back();
        found = n->name() == "SoftmaxBackward";
        for (const Edge& e : n->next_edges)
          if (e.node) todo.push_back(e.node);
      }
      EXPECT_TRUE(found) << (fused ? "fused" : "primitive form");
      y.backward(gy);
      return std::vector<Tensor>{y, q.grad(), k.grad(), v.grad()};
    };
    std::vector<Tensor> f = run(true), p = run(false);
    for (size_t i = 0; i < f.size(); ++i)
      expect_close(f[i], p[i], dt == DType::f32 ? 1e-4 : 1e-10,
                   "output/gradient " + std::to_string(i));
    Tensor masked_row = select(f[0], 2, 2);
    EXPECT_TRUE(equal(masked_row, zeros_like(masked_row)));
    Tensor masked_q = select(f[1], 2, 2);
    EXPECT_TRUE(equal(masked_q, zeros_like(masked_q)));
  }
}

// The fused f32 GELU (erf form) runs the primitive erf's expansion (the shared
// math::erf_f32, as compiled kernels do), not libm's erff: its bits are
// x (erf(x / sqrt2) + 1) / 2 with erf from the primitive op.
// At every SIMD level this CPU runs.
TEST(EagerFusion, GeluErfUsesThePrimitiveErf) {
  manual_seed(13);
  FusionScope on(true);
  Tensor x = cat({randn({4099}) * 3.0, linspace(-6.0, 6.0, 997)}, 0);
  const float half_sqrt2 = static_cast<float>(std::sqrt(2.0) / 2.0);
  kiln::testing::at_every_cpu_level([&](const std::string&) {
    Tensor y = gelu(x);
    Tensor e = erf(x * static_cast<double>(half_sqrt2));
    for (int64_t i = 0; i < x.numel(); ++i) {
      const float v = x.data<float>()[i];
      const float want = v * (e.data<float>()[i] + 1.0f) * 0.5f;
      ASSERT_EQ(std::bit_cast<uint32_t>(y.data<float>()[i]), std::bit_cast<uint32_t>(want))
          << "element " << i << " x = " << v;
    }
  });
}

// The f32 softmax kernel's bits: e^(x - max) per element (the shared exp),
// summed in 16 lane partial sums added pairwise, then the tail; each term
// divided by the sum (log_softmax: (x - max) - log(sum)). Pins the explicit
// vector exp-and-sum pass to the per-element form it replaced.
TEST(EagerFusion, SoftmaxF32BitsFollowTheLaneOrder) {
  manual_seed(12);
  FusionScope on(true);
  for (int64_t n : {1, 15, 16, 17, 1037}) {
    Tensor x = randn({3, n}) * 8.0;
    Tensor y = softmax(x, -1), ly = log_softmax(x, -1);
    for (int64_t r = 0; r < 3; ++r) {
      const float* xr = x.data<float>() + r * n;
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t i = 0; i < n; ++i) m = xr[i] > m ? xr[i] : m;
      auto e = [&](int64_t i) { return ops::vec::exp_f32(xr[i] - m); };
      float acc[16] = {}, tail = 0.0f;
      int64_t i = 0;
      for (; i + 16 <= n; i += 16)
        for (int64_t j = 0; j < 16; ++j) acc[j] += e(i + j);
      for (; i < n; ++i) tail += e(i);
      for (int64_t w = 8; w > 0; w /= 2)
        for (int64_t j = 0; j < w; ++j) acc[j] += acc[j + w];
      const float s = acc[0] + tail;
      for (int64_t k = 0; k < n; ++k) {
        EXPECT_EQ(std::bit_cast<uint32_t>(y.data<float>()[r * n + k]),
                  std::bit_cast<uint32_t>(e(k) / s))
            << "softmax n = " << n << " row " << r << " element " << k;
        EXPECT_EQ(std::bit_cast<uint32_t>(ly.data<float>()[r * n + k]),
                  std::bit_cast<uint32_t>((xr[k] - m) - std::log(s)))
            << "log_softmax n = " << n << " row " << r << " element " << k;
      }
    }
  }
}

}  // namespace

namespace {

// Inside kiln::checkpoint the fused nodes' saved tensors are dropped and
// recomputed like any op's: the gradients equal the plain run's.
TEST(EagerFusion, CheckpointRecomputesWhatTheFusedBackwardsRead) {
  FusionScope on(true);
  manual_seed(12);
  Tensor x0 = randn({4, 9}), w0 = randn({9}), b0 = randn({9});
  auto body = [](const Tensor& x, const Tensor& w, const Tensor& b) {
    Tensor h = layer_norm(x, {9}, w, b, 1e-5);
    h = gelu(h, "tanh") + silu(h);
    return log_softmax(softmax(h, -1) * 3.0, -1);
  };
  auto run = [&](bool ck) {
    Tensor x = x0.detach().requires_grad_(), w = w0.detach().requires_grad_(),
           b = b0.detach().requires_grad_();
    Tensor y = ck ? checkpoint(
                        [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
                          return {body(in[0], in[1], in[2])};
                        },
                        {x, w, b})[0]
                  : body(x, w, b);
    sum(y * y).backward();
    return std::vector<Tensor>{x.grad(), w.grad(), b.grad()};
  };
  auto plain = run(false), ck = run(true);
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(equal(plain[i], ck[i])) << "input " << i;
}

}  // namespace
