// Verifies the autograd engine: accumulation, retain/create_graph, kiln::grad,
// hooks, version-counter checks, NoGradGuard, detach and checkpoint.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/kiln.h"

using namespace kiln;

namespace {
Tensor vec(std::vector<double> v) {
  return from_vector<double>(v);
}
void expect_values(const Tensor& t, std::vector<double> want, double tol = 1e-9) {
  auto got = t.to_vector<double>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}
}  // namespace

// Gradients of a small expression match the hand-derived values.
TEST(Autograd, SimpleChainRule) {
  Tensor x = vec({1, 2, 3}).requires_grad_();
  Tensor y = (x * x * 3.0 + x).sum();
  y.backward();
  expect_values(x.grad(), {7, 13, 19});
  EXPECT_TRUE(x.is_leaf());
  EXPECT_FALSE(y.is_leaf());
}

// A second backward accumulates into .grad.
TEST(Autograd, GradientsAccumulate) {
  Tensor x = vec({1, 2}).requires_grad_();
  (x * 2.0).sum().backward();
  (x * 3.0).sum().backward();
  expect_values(x.grad(), {5, 5});
}

// Broadcasting inputs get gradients summed back to their own shape.
TEST(Autograd, BroadcastReducesGradient) {
  Tensor a = ones({2, 3}, DType::f64).requires_grad_();
  Tensor b = vec({1, 2, 3}).requires_grad_();
  (a * b).sum().backward();
  EXPECT_EQ(b.grad().shape(), (Dims{3}));
  expect_values(b.grad(), {2, 2, 2});
  expect_values(a.grad(), {1, 2, 3, 1, 2, 3});
}

// Backward through a freed graph is an error; retain_graph keeps it.
TEST(Autograd, RetainGraph) {
  Tensor x = vec({1, 2}).requires_grad_();
  Tensor y = (x.exp()).sum();
  y.backward({}, /*retain_graph=*/true);
  y.backward();
  expect_values(x.grad(), {2 * std::exp(1.0), 2 * std::exp(2.0)}, 1e-9);
  try {
    y.backward();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("second time"), std::string::npos) << e.what();
  }
}

// create_graph gives a differentiable gradient (double backward).
TEST(Autograd, DoubleBackward) {
  Tensor x = vec({0.5, -1.0}).requires_grad_();
  Tensor y = (x * x * x).sum();
  auto g = grad({y}, {x}, {}, {.create_graph = true});
  expect_values(g[0], {0.75, 3.0});
  auto gg = grad({g[0].sum()}, {x});
  expect_values(gg[0], {3.0, -6.0});
}

// kiln::grad returns gradients without touching .grad, and checks unused inputs.
TEST(Autograd, GradFunction) {
  Tensor x = vec({1, 2}).requires_grad_();
  Tensor z = vec({5}).requires_grad_();
  Tensor y = (x * x).sum();
  auto g = grad({y}, {x}, {}, {.retain_graph = true});
  expect_values(g[0], {2, 4});
  EXPECT_FALSE(x.grad().defined());
  EXPECT_THROW(grad({y}, {z}, {}, {.retain_graph = true}), Error);
  auto g2 = grad({y}, {x, z}, {}, {.allow_unused = true});
  EXPECT_FALSE(g2[1].defined());
}

// Gradients w.r.t. a non-leaf intermediate.
TEST(Autograd, GradOfIntermediate) {
  Tensor x = vec({1, 2}).requires_grad_();
  Tensor h = x * 2.0;
  Tensor y = (h * h).sum();
  auto g = grad({y}, {h});
  expect_values(g[0], {4, 8});
}

// Non-scalar backward needs an explicit gradient.
TEST(Autograd, NonScalarNeedsGradient) {
  Tensor x = vec({1, 2}).requires_grad_();
  Tensor y = x * 2.0;
  try {
    y.backward();
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("[backward]"), std::string::npos);
    EXPECT_NE(m.find("[2]"), std::string::npos) << m;
  }
  y.backward(vec({1, 10}));
  expect_values(x.grad(), {2, 20});
}

// Tensor hooks see and may replace gradients; post-accumulate hooks run after .grad is set.
TEST(Autograd, Hooks) {
  Tensor x = vec({1, 2}).requires_grad_();
  Tensor h = x * 3.0;
  std::vector<double> seen;
  h.register_hook([&](const Tensor& g) {
    seen = g.to_vector<double>();
    return g * 2.0;
  });
  int post = 0;
  x.register_post_accumulate_grad_hook([&](const Tensor& p) {
    ++post;
    EXPECT_TRUE(p.grad().defined());
  });
  h.sum().backward();
  EXPECT_EQ(seen, (std::vector<double>{1, 1}));
  expect_values(x.grad(), {6, 6});
  EXPECT_EQ(post, 1);
}

// retain_grad keeps the gradient of a non-leaf.
TEST(Autograd, RetainGrad) {
  Tensor x = vec({1, 2}).requires_grad_();
  Tensor h = x * 3.0;
  h.retain_grad();
  (h * h).sum().backward();
  expect_values(h.grad(), {6, 12});
}

// Modifying a saved tensor in place makes backward fail with the op's name.
TEST(Autograd, ModifiedSavedTensorIsDetected) {
  Tensor x = vec({1, 2}).requires_grad_();
  Tensor h = x * 1.0;
  Tensor y = h.exp();  // exp saves its output
  y.add_(2.0);
  try {
    y.sum().backward();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("[exp]"), std::string::npos) << m;
    EXPECT_NE(m.find("version 1"), std::string::npos) << m;
  }
}

// In-place ops on a non-leaf keep a correct history.
TEST(Autograd, InPlaceOnNonLeaf) {
  Tensor x = vec({1, 2}).requires_grad_();
  Tensor h = x * 2.0;
  h.add_(1.0);
  h.mul_(vec({3, 4}));
  h.sum().backward();
  expect_values(x.grad(), {6, 8});
}

// An in-place op whose gradient needs self's old value (mul_ by a tensor that
// requires grad, mul_ by itself or a view of itself) gives PyTorch's gradients:
// the node keeps a copy of the old value. It used to fail backward with "a
// tensor saved for backward was modified by an in-place operation", and self
// and its node held each other (a leak when backward never ran).
TEST(Autograd, InPlaceKeepsTheOldValueItsGradientNeeds) {
  Tensor a = vec({1, 2}).requires_grad_();
  Tensor x = vec({3, 4}).requires_grad_();
  Tensor y = a * 2.0;  // [2, 4]
  y.mul_(x);
  y.sum().backward();
  expect_values(a.grad(), {6, 8});
  expect_values(x.grad(), {2, 4});

  Tensor b = vec({1, 2}).requires_grad_();
  Tensor z = b * 3.0;
  z.mul_(z);  // 9 b^2
  z.sum().backward();
  expect_values(b.grad(), {18, 36});

  Tensor c = vec({1, 2, 3, 4}).requires_grad_();
  Tensor m = (c * 1.0).reshape({2, 2});
  m.mul_(m.t());  // m[i][j] * m[j][i]
  m.sum().backward();
  // d/dc of sum_ij c_ij c_ji = 2 c_ji
  Tensor ct = c.detach().reshape({2, 2}).t().contiguous().reshape({4});
  EXPECT_TRUE(allclose(c.grad(), ct * 2.0));

  // Double backward through the kept value reaches self's old history.
  Tensor d = vec({2, 3}).requires_grad_();
  Tensor w = d * 1.0;
  w.mul_(d);                                                       // d^2
  Tensor g = grad({w.sum()}, {d}, {}, {.create_graph = true})[0];  // 2 d
  expect_values(g, {4, 6});
  g.sum().backward();
  expect_values(d.grad(), {2, 2});
}

TEST(Autograd, InPlaceOnNonLeafDoesNotKeepItselfAlive) {
  Tensor a = vec({1, 2}).requires_grad_();
  Tensor x = vec({3, 4}).requires_grad_();
  std::weak_ptr<TensorImpl> alive;
  {
    Tensor y = a * 2.0;
    y.mul_(x);  // never back-propagated
    alive = y.impl_ptr();
  }
  EXPECT_TRUE(alive.expired());
}

// In-place on a leaf that requires grad is refused.
TEST(Autograd, InPlaceOnLeafIsAnError) {
  Tensor x = vec({1, 2}).requires_grad_();
  EXPECT_THROW(x.add_(1.0), Error);
  {
    NoGradGuard ng;
    x.add_(1.0);  // allowed without grad mode, like an optimizer step
  }
  expect_values(x, {2, 3});
}

// NoGradGuard and detach stop recording.
TEST(Autograd, NoGradAndDetach) {
  Tensor x = vec({1, 2}).requires_grad_();
  {
    NoGradGuard ng;
    Tensor y = x * 2.0;
    EXPECT_FALSE(y.requires_grad());
  }
  Tensor d = x.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_EQ(d.data<double>(), x.data<double>());  // shares storage
}

// Integer results never require grad.
TEST(Autograd, IntegerResultsCarryNoGrad) {
  Tensor x = vec({1, 2}).requires_grad_();
  EXPECT_FALSE(gt(x, 1.0).requires_grad());
  EXPECT_FALSE(cast(x, DType::i64).requires_grad());
}

// checkpoint recomputes in backward and gives the same gradients.
TEST(Autograd, CheckpointMatchesPlain) {
  auto fn = [](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    return {sin(in[0].exp() * in[1])};
  };
  Tensor a = vec({0.1, 0.2, 0.3}).requires_grad_();
  Tensor b = vec({1.0, -2.0, 0.5}).requires_grad_();
  fn({a, b})[0].sum().backward();
  Tensor ga = a.grad().clone(), gb = b.grad().clone();
  a.set_grad({});
  b.set_grad({});
  int calls = 0;
  auto counted = [&](const std::vector<Tensor>& in) {
    ++calls;
    return fn(in);
  };
  auto out = checkpoint(counted, {a, b});
  EXPECT_EQ(calls, 1);
  out[0].sum().backward();
  EXPECT_EQ(calls, 2);
  expect_values(a.grad(), ga.to_vector<double>());
  expect_values(b.grad(), gb.to_vector<double>());
}

// checkpoint replays the RNG, so dropout-like randomness matches in recomputation.
TEST(Autograd, CheckpointReplaysRandomness) {
  auto fn = [](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    return {in[0] * rand_like(in[0])};
  };
  manual_seed(7);
  Tensor x = ones({16}, DType::f64).requires_grad_();
  auto out = checkpoint(fn, {x});
  out[0].sum().backward();
  // d/dx (x * r) = r, and r is exactly the forward's draw.
  expect_values(x.grad(), out[0].to_vector<double>());
}

// gradcheck accepts correct gradients and reports wrong ones.
TEST(Autograd, GradcheckDetectsWrongGradients) {
  Tensor x = vec({0.3, -0.7}).requires_grad_();
  auto ok = gradcheck(
      [](const std::vector<Tensor>& in) -> std::vector<Tensor> { return {in[0].exp() * in[0]}; },
      {x});
  EXPECT_EQ(ok, "");
  auto bad = gradcheck(
      [](const std::vector<Tensor>& in) -> std::vector<Tensor> {
        // A custom function with a deliberately wrong backward.
        Tensor y;
        {
          NoGradGuard ng;
          y = in[0] * 2.0;
        }
        return attach_function("Wrong", {in[0]}, {y}, [](const std::vector<Tensor>& g) {
          return std::vector<Tensor>{g[0] * 3.0};
        });
      },
      {x});
  EXPECT_NE(bad, "");
}
