// Verifies indexing with tensors (ops/indexing.cpp): x[mask] / x.index({mask})
// against masked_select and a naive loop, x[idx] with integer tensors,
// x.index_put_({mask}, v) with scalars and tensors, gradients, the eager-only
// errors under tracing and shape errors; isclose / allclose / equal with
// PyTorch's semantics; the comparison and logical operators; where for every
// operand layout against a loop.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/kiln.h"
#include "symbolic_recorder.h"
#include "test_util.h"
#include "value_util.h"

using namespace kiln;

namespace {

using V = std::vector<double>;
using I = std::vector<int64_t>;
using kiln::testing::expect_error;
using kiln::testing::f64;
using kiln::testing::ints;
using kiln::testing::randv;
using kiln::testing::vals;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<bool> bools(const Tensor& t) {
  return t.to_vector<bool>();
}

Tensor symbolic(const Dims& shape, DType dt) {
  auto impl = std::make_shared<TensorImpl>();  // a traced tensor: shape, no data
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dt;
  return Tensor(impl);
}

}  // namespace

// A full-shape mask reads what masked_select reads; a mask over the leading
// dims picks whole rows (PyTorch's x[mask] on [N, D] with mask [N]).
TEST(TensorIndexing, BoolMaskReadsLikeMaskedSelect) {
  Tensor x = f64(randv(12, 3), {3, 4});
  Tensor mask = gt(x, 0.0);
  EXPECT_EQ(vals(x[mask]), vals(masked_select(x, mask)));
  EXPECT_EQ(vals(x.index({mask})), vals(masked_select(x, mask)));
  EXPECT_EQ(vals(index(x, {mask})), vals(masked_select(x, mask)));
  Tensor rows = from_vector<bool>({true, false, true});
  Tensor r = x[rows];
  ASSERT_EQ(r.shape(), (Dims{2, 4}));
  // The naive loop: the rows where the mask is true, in order.
  V want;
  const V xv = vals(x);
  for (int64_t i : {0, 2})
    for (int64_t j = 0; j < 4; ++j) want.push_back(xv[static_cast<size_t>(i * 4 + j)]);
  EXPECT_EQ(vals(r), want);
  // No true element: an empty [0, rest...] result; a 0-d mask adds a dim (x[True]).
  EXPECT_EQ(x[zeros({3}, DType::b8)].shape(), (Dims{0, 4}));
  EXPECT_EQ(x[full({}, true, DType::b8)].shape(), (Dims{1, 3, 4}));
  EXPECT_EQ(x[full({}, false, DType::b8)].shape(), (Dims{0, 3, 4}));
}

// The gradient of x[mask] scatters back to the selected elements (gradcheck too).
TEST(TensorIndexing, BoolMaskReadIsDifferentiable) {
  Tensor x = f64({1, -2, 3, -4, 5, -6}, {2, 3}).requires_grad_();
  Tensor mask = from_vector<bool>({true, false, true, false, true, true}, {2, 3});
  Tensor s = x[mask];
  EXPECT_EQ(vals(s), (V{1, 3, 5, -6}));
  (s * f64({1, 2, 3, 4}, {4})).sum().backward();
  EXPECT_EQ(vals(x.grad()), (V{1, 0, 2, 0, 3, 4}));
  Tensor rows = from_vector<bool>({false, true});
  auto f = [&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{in[0][mask], in[0].index({rows}) * 2.0};
  };
  EXPECT_EQ(gradcheck(f, {f64(randv(6, 5), {2, 3}).requires_grad_()}), "");
}

// Integer tensor indices pick along dim 0 (negative ones from the end), in
// the index's shape, differentiably.
TEST(TensorIndexing, IntegerIndexPicksAlongDimZero) {
  Tensor x = f64({0, 1, 10, 11, 20, 21}, {3, 2});
  Tensor idx = from_vector<int64_t>({2, -3, 1, 2}, {2, 2});
  Tensor r = x[idx];
  ASSERT_EQ(r.shape(), (Dims{2, 2, 2}));
  EXPECT_EQ(vals(r), (V{20, 21, 0, 1, 10, 11, 20, 21}));
  auto f = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0].index({idx})}; };
  EXPECT_EQ(gradcheck(f, {f64(randv(6, 9), {3, 2}).requires_grad_()}), "");
  expect_error([&] { x[from_vector<int64_t>({3})]; }, {"[index]", "index 3", "size 3"});
  expect_error([&] { x[from_vector<int64_t>({0, -4})]; }, {"[index]", "index -4", "size 3"});
  expect_error([&] { full({}, 1.0)[from_vector<int64_t>({0})]; }, {"[index]", "0-d"});
}

// x.index_put_({mask}, v): a scalar fills, a tensor of the selected count (or
// one that broadcasts to the selected shape) is written in row-major order.
TEST(TensorIndexing, IndexPutWithABoolMask) {
  Tensor x = f64({1, -2, 3, -4, 5, -6}, {2, 3});
  Tensor y = x.clone();
  y.index_put_({lt(y, 0.0)}, 0.0);
  EXPECT_EQ(vals(y), (V{1, 0, 3, 0, 5, 0}));
  y = x.clone();
  const uint32_t v0 = y.version();
  y.index_put_({y < 0}, f64({7, 8, 9}, {3}));
  EXPECT_EQ(vals(y), (V{1, 7, 3, 8, 5, 9}));
  EXPECT_GT(y.version(), v0);
  // A mask over rows; values broadcast to [count, 3].
  Tensor rows = from_vector<bool>({false, true});
  EXPECT_EQ(vals(x.index_put({rows}, f64({9, 8, 7}, {3}))), (V{1, -2, 3, 9, 8, 7}));
  EXPECT_EQ(vals(index_put(x, {rows}, -kInf)), (V{1, -2, 3, -kInf, -kInf, -kInf}));
  // Integer tensors get the values cast to their dtype; nothing selected is a copy.
  Tensor n = from_vector<int64_t>({1, 2, 3});
  n.index_put_({n > 1}, f64({5.0, 6.0}, {2}));
  EXPECT_EQ(ints(n), (I{1, 5, 6}));
  EXPECT_EQ(vals(x.index_put({zeros({2, 3}, DType::b8)}, f64({}, {0}))), vals(x));
}

// Both x and the values get gradients: x's is zero where it was overwritten.
TEST(TensorIndexing, IndexPutIsDifferentiable) {
  Tensor mask = from_vector<bool>({true, false, true, false, true, true}, {2, 3});
  auto f = [&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{index_put(in[0], {mask}, in[1]), index_put(in[0], {mask}, 2.0)};
  };
  EXPECT_EQ(gradcheck(f, {f64(randv(6, 1), {2, 3}).requires_grad_(),
                          f64(randv(4, 2), {4}).requires_grad_()}),
            "");
  Tensor rows = from_vector<bool>({true, false});
  auto g = [&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{index_put(in[0], {rows}, in[1])};
  };
  EXPECT_EQ(gradcheck(g, {f64(randv(6, 3), {2, 3}).requires_grad_(),
                          f64(randv(3, 4), {3}).requires_grad_()}),
            "");
  // In place on a non-leaf: the gradient flows through the unselected elements.
  Tensor a = f64({1, 2, 3}, {3}).requires_grad_();
  Tensor b = a * 3.0;
  b.index_put_({from_vector<bool>({false, true, false})}, 0.0);
  b.sum().backward();
  EXPECT_EQ(vals(a.grad()), (V{3, 0, 3}));
  // masked_fill_ likewise (it used to fail: where() saved the overwritten input).
  Tensor c = f64({1, 2, 3}, {3}).requires_grad_();
  Tensor d = c * 2.0;
  d.masked_fill_(from_vector<bool>({true, false, false}), 5.0);
  (d * d).sum().backward();
  EXPECT_EQ(vals(c.grad()), (V{0, 16, 24}));
}

// Shape mismatches and unsupported index lists are kiln::Errors naming the shapes.
TEST(TensorIndexing, BadIndicesAreErrors) {
  Tensor x = zeros({2, 3});
  expect_error([&] { x[zeros({3}, DType::b8)]; }, {"[index]", "[3]", "[2, 3]"});
  expect_error([&] { x[zeros({2, 3, 1}, DType::b8)]; }, {"[index]", "does not match"});
  expect_error(
      [&] {
        x.index_put_({zeros({2, 2}, DType::b8)}, 1.0);
      },
      {"[index_put]", "[2, 2]", "[2, 3]"});
  Tensor m = from_vector<bool>({true, true, false, false, false, true}, {2, 3});
  expect_error([&] { x.index_put_({m}, ones({2})); },
               {"[index_put]", "values of shape [2]", "selected shape [3]"});
  expect_error([&] { x.index({m, m}); }, {"[index]", "exactly one index tensor", "2"});
  expect_error([&] { x.index({zeros({2})}); }, {"[index]", "bool or integer", "f32"});
  expect_error([&] { x.index_put_({from_vector<int64_t>({0})}, 1.0); },
               {"[index_put]", "bool mask"});
  expect_error([&] { x.index({Tensor()}); }, {"[index]", "undefined"});
}

// Boolean masks have data-dependent shapes: under tracing they are errors
// naming the op (as masked_select); integer indices trace.
TEST(TensorIndexing, BoolMasksAreNotTraceable) {
  Tensor mask = from_vector<bool>({true, false, true});
  kiln::testing::TraceScope trace;
  Tensor sym = symbolic({3, 2}, DType::f32);
  expect_error([&] { sym[mask]; }, {"[index]", "not traceable", "data-dependent"});
  expect_error([&] { sym.index_put({mask}, 1.0); }, {"[index_put]", "not traceable"});
  expect_error([&] { sym.index_put_({mask}, ones({2})); }, {"[index_put]", "not traceable"});
  expect_error([&] { zeros({3, 2})[symbolic({3}, DType::b8)]; }, {"[index]", "not traceable"});
  EXPECT_EQ(sym[from_vector<int64_t>({2, 0})].shape(), (Dims{2, 2}));
}

// isclose against the formula (finite: |a - b| <= atol + rtol * |b|; equal
// infinities; NaN only with equal_nan), broadcast; allclose is its all().
TEST(TensorComparison, IscloseFollowsPyTorch) {
  Tensor a = f64({1.0, 1.0, 1.0, kInf, kInf, kNaN, 1.0, 0.0}, {8});
  Tensor b = f64({1.0, 1.0 + 1e-6, 1.1, kInf, -kInf, kNaN, kInf, 1e-9}, {8});
  EXPECT_EQ(bools(isclose(a, b)),
            (std::vector<bool>{true, true, false, true, false, false, false, true}));
  EXPECT_EQ(bools(a.isclose(b, 1e-5, 1e-8, true)),
            (std::vector<bool>{true, true, false, true, false, true, false, true}));
  EXPECT_EQ(bools(isclose(a, b, 0.2, 0.0)),
            (std::vector<bool>{true, true, true, true, false, false, false, false}));
  // Broadcast [2, 1] against [3]; integers compare by value.
  Tensor c = isclose(f64({1, 2}, {2, 1}), from_vector<int64_t>({1, 2, 3}));
  EXPECT_EQ(c.shape(), (Dims{2, 3}));
  EXPECT_EQ(bools(c), (std::vector<bool>{true, false, false, false, true, false}));
  // allclose: 1 is not close to inf however large rtol is (the old formula said so).
  EXPECT_FALSE(allclose(f64({1.0}, {1}), f64({kInf}, {1}), 1.0, 1.0));
  EXPECT_TRUE(allclose(f64({1, 2}, {2}), f64({1 + 1e-7, 2}, {2})));
  EXPECT_TRUE(f64({kNaN}, {1}).allclose(f64({kNaN}, {1}), 1e-5, 1e-8, true));
  EXPECT_FALSE(f64({kNaN}, {1}).allclose(f64({kNaN}, {1})));
  EXPECT_TRUE(allclose(ones({2, 3}), ones({3})));  // broadcasting
  expect_error([&] { isclose(a, b, -1.0); }, {"[isclose]", "non-negative"});
  expect_error([&] { allclose(ones({2}), ones({3})); }, {"[2]", "[3]"});
}

// equal: same shape and values, whatever the dtypes (torch.equal); NaN never.
TEST(TensorComparison, EqualFollowsPyTorch) {
  EXPECT_TRUE(equal(from_vector<int64_t>({1, 2, 3}), f64({1, 2, 3}, {3})));
  EXPECT_TRUE(from_vector<int32_t>({1, 2}).equal(from_vector<float>({1.f, 2.f})));
  EXPECT_FALSE(equal(f64({1, 2}, {2}), f64({1, 2}, {1, 2})));  // shapes differ
  EXPECT_FALSE(equal(ones({3}), ones({1})));                   // no broadcasting
  EXPECT_FALSE(equal(f64({1, kNaN}, {2}), f64({1, kNaN}, {2})));
  EXPECT_FALSE(equal(f64({1, 2}, {2}), f64({1, 3}, {2})));
  EXPECT_TRUE(equal(zeros({0, 2}), zeros({0, 2}, DType::i64)));
}

// a < b, a == 0, (a > 0) & (b < 1), ~m: the functional comparisons as operators.
TEST(TensorComparison, ComparisonAndLogicalOperators) {
  Tensor a = f64({-1, 0, 2}, {3}), b = f64({0, 0, 1}, {3});
  EXPECT_EQ(bools(a < b), bools(lt(a, b)));
  EXPECT_EQ(bools(a <= 0), (std::vector<bool>{true, true, false}));
  EXPECT_EQ(bools(1.0 > a), (std::vector<bool>{true, true, false}));
  EXPECT_EQ(bools(a >= b), bools(ge(a, b)));
  EXPECT_EQ(bools(a == b), (std::vector<bool>{false, true, false}));
  EXPECT_EQ(bools(a != 0), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(bools((a > -1) & (b < 1)), (std::vector<bool>{false, true, false}));
  EXPECT_EQ(bools((a > 1) | (b < 0)), (std::vector<bool>{false, false, true}));
  EXPECT_EQ(bools(~(a == 0)), (std::vector<bool>{true, false, true}));
  expect_error([&] { (void)(a & b); }, {"[operator&]", "bool", "f64"});
  expect_error([&] { (void)~a; }, {"[operator~]", "bool"});
}

// Gradchecks of issue 22's additions that had none of their own: where with
// scalars, stack, var/std's unbiased spelling, min along a dim, embedding in
// F.embedding's order, clip with tensor bounds, and the Tensor methods.
TEST(TensorIndexing, GradchecksOfIssue22Leftovers) {
  Tensor ids = from_vector<int64_t>({3, 0, 2, 2});
  auto f = [&](const std::vector<Tensor>& in) {
    const Tensor& x = in[0];
    auto [mn, mi] = x.min(1);
    return std::vector<Tensor>{where(x > 0.0, x, 0.5),
                               where(x > 0.0, -1.0, x),
                               stack({x, x * 2.0}, 2),
                               var(x, {1}, false),
                               x.std({0}, true, true),
                               mn,
                               embedding(ids, in[1]),
                               x.clip(x * 0.5, x.abs() + 1.0),
                               x.amax(1),
                               x.softmax(-1),
                               x.logsumexp(1),
                               x.masked_fill(x < 0.0, 0.0)};
  };
  EXPECT_EQ(gradcheck(f, {f64(randv(12, 21), {3, 4}).requires_grad_(),
                          f64(randv(12, 22), {4, 3}).requires_grad_()}),
            "");
}

// where against a naive loop for every operand layout its kernel tells apart:
// contiguous runs (value operands dense or one broadcast element, which take
// the vectorized path), a row broadcast along the outer dim, a transposed
// value and a transposed condition (the strided path), in several dtypes; the
// size spans thread chunks and is not a multiple of any vector width.
TEST(TensorComparison, WhereMatchesALoopForEveryLayout) {
  const int64_t r = 67, c = 1031;
  const Tensor cond = randn({r, c}) > 0.0;
  const Tensor cond_t = (randn({c, r}) > 0.0).transpose(0, 1);
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::i64, DType::b8}) {
    const Tensor a = cast(randn({r, c}) * 4.0, dt), b = cast(randn({r, c}) * 4.0, dt);
    const Tensor a_t = cast(randn({c, r}) * 4.0, dt).transpose(0, 1);
    const Tensor one = cast(full({}, 3.0), dt), row = cast(randn({1, c}) * 4.0, dt);
    struct Case {
      const char* name;
      Tensor m, x, y;
    };
    for (const Case& k :
         {Case{"dense", cond, a, b}, Case{"scalar a", cond, one, b}, Case{"scalar b", cond, a, one},
          Case{"both scalars", cond, one, one}, Case{"row b", cond, a, row},
          Case{"transposed a", cond, a_t, b}, Case{"transposed condition", cond_t, a, b}}) {
      const Tensor got = where(k.m, k.x, k.y);
      ASSERT_EQ(got.dtype(), dt) << k.name;
      const std::vector<bool> m = bools(k.m.contiguous());
      const V x = vals(cast(k.x.expand({r, c}).contiguous(), DType::f64));
      const V y = vals(cast(k.y.expand({r, c}).contiguous(), DType::f64));
      const V g = vals(cast(got, DType::f64));
      for (size_t i = 0; i < g.size(); ++i)
        ASSERT_EQ(g[i], m[i] ? x[i] : y[i]) << k.name << " " << dt << " at " << i;
    }
  }
}
