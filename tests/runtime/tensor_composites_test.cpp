// Verifies the layout and value composites (ops/tensor_composites.cpp): flip,
// roll, repeat/tile, split/chunk/unbind, one_hot, nonzero/masked_select, clamp
// with tensor bounds, isnan/isinf/isfinite, nan_to_num and max/min along a dim,
// against naive references, with gradchecks and error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "kiln/kiln.h"
#include "symbolic_recorder.h"
#include "test_util.h"
#include "value_util.h"

using namespace kiln;

namespace {

using V = std::vector<double>;
using kiln::testing::f64;
using kiln::testing::ints;
using kiln::testing::randv;
using kiln::testing::vals;
using I = std::vector<int64_t>;
using kiln::testing::expect_error;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string check1(const std::function<Tensor(const Tensor&)>& f, const Tensor& x) {
  return gradcheck([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in[0])}; },
                   {x.detach().requires_grad_()});
}
Tensor iota(const Dims& shape) {
  return arange(0.0, static_cast<double>(numel_of(shape)), 1.0, DType::f64).reshape(shape);
}

// Verifies flip and roll against index arithmetic, with gradients.
TEST(TensorComposites, FlipAndRoll) {
  Tensor x = iota({2, 3});
  EXPECT_EQ(vals(flip(x, {1})), (V{2, 1, 0, 5, 4, 3}));
  EXPECT_EQ(vals(flip(x, {0, -1})), (V{5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(vals(x.roll({1}, {1})), (V{2, 0, 1, 5, 3, 4}));
  EXPECT_EQ(vals(roll(x, {-1, 4}, {0, 1})), (V{5, 3, 4, 2, 0, 1}));
  EXPECT_EQ(vals(roll(x, {2})), (V{4, 5, 0, 1, 2, 3}));
  expect_error([&] { flip(x, {1, 1}); }, {"[flip]", "multiple times"});
  expect_error([&] { roll(x, {1, 2}, {0}); }, {"[roll]", "same length"});
  Tensor r = f64(randv(6, 1), {2, 3});
  EXPECT_EQ(check1([](const Tensor& t) { return flip(t, {0, 1}); }, r), "");
  EXPECT_EQ(check1([](const Tensor& t) { return roll(t, {1, 2}, {0, 1}); }, r), "");
}

// Verifies repeat/tile (torch semantics: whole blocks repeat), with gradients.
TEST(TensorComposites, RepeatAndTile) {
  Tensor x = iota({2});
  EXPECT_EQ(vals(x.repeat({2, 2})), (V{0, 1, 0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(x.repeat({3, 1, 2}).shape(), (Dims{3, 1, 4}));
  Tensor m = iota({2, 2});
  EXPECT_EQ(vals(tile(m, {2})), (V{0, 1, 0, 1, 2, 3, 2, 3}));
  EXPECT_EQ(tile(m, {2, 1, 1}).shape(), (Dims{2, 2, 2}));
  EXPECT_EQ(repeat(m, {0, 2}).shape(), (Dims{0, 4}));
  expect_error([&] { repeat(m, {2}); }, {"[repeat]", "cannot be smaller"});
  EXPECT_EQ(check1(
                [](const Tensor& t) {
                  return repeat(t, {2, 1, 3});
                },
                f64(randv(4, 2), {2, 2})),
            "");
}

// Verifies split (sizes and lists), chunk and unbind return the right views.
TEST(TensorComposites, SplitChunkUnbind) {
  Tensor x = iota({5, 2});
  auto parts = split(x, 2);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[2].shape(), (Dims{1, 2}));
  EXPECT_EQ(vals(parts[1]), (V{4, 5, 6, 7}));
  auto sized = x.split(Dims{1, 4}, 0);
  ASSERT_EQ(sized.size(), 2u);
  EXPECT_EQ(sized[1].shape(), (Dims{4, 2}));
  EXPECT_EQ(split_with_sizes(x, {2}, 1)[0].shape(), (Dims{5, 2}));
  auto ch = chunk(x, 2, 0);
  ASSERT_EQ(ch.size(), 2u);
  EXPECT_EQ(ch[0].shape(), (Dims{3, 2}));
  auto rows = x.unbind(1);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(vals(rows[1]), (V{1, 3, 5, 7, 9}));
  expect_error([&] { split(x, Dims{2, 2}); }, {"[split]", "sum to 4", "size 5"});
  expect_error([&] { split(x, 0); }, {"[split]", "positive"});
  expect_error([&] { chunk(x, 0); }, {"[chunk]", "positive"});
  expect_error([&] { unbind(scalar_tensor(1.0)); }, {"[unbind]", "0-d"});
}

// Verifies one_hot rows, the inferred class count and out-of-range errors.
TEST(TensorComposites, OneHot) {
  Tensor i = from_vector<int64_t>({2, 0, 1, 2}, {2, 2});
  Tensor o = one_hot(i);
  EXPECT_EQ(o.shape(), (Dims{2, 2, 3}));
  EXPECT_EQ(o.dtype(), DType::i64);
  EXPECT_EQ(ints(o), (I{0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 1}));
  EXPECT_EQ(one_hot(from_vector<int32_t>({1}), 4).shape(), (Dims{1, 4}));
  expect_error([] { one_hot(from_vector<int64_t>({0, 3}), 3); }, {"[one_hot]", "3", "num_classes"});
  expect_error([] { one_hot(from_vector<int64_t>({-1}), 3); }, {"[one_hot]", "-1"});
  expect_error([] { one_hot(from_vector<double>({1.0}), 3); }, {"[one_hot]", "integer"});
}

// Verifies nonzero and masked_select (row-major order, gradient into x) and that
// both refuse symbolic (traced) tensors with a "not traceable" error.
TEST(TensorComposites, NonzeroAndMaskedSelect) {
  Tensor x = from_vector<double>({0, 1.5, 0, -2, 3, 0}, {2, 3});
  EXPECT_EQ(ints(nonzero(x)), (I{0, 1, 1, 0, 1, 1}));
  EXPECT_EQ(nonzero(x).shape(), (Dims{3, 2}));
  EXPECT_EQ(nonzero(zeros({2, 2})).shape(), (Dims{0, 2}));
  Tensor l = x.clone().requires_grad_();
  Tensor mask = from_vector<bool>({true, false, true});
  Tensor s = masked_select(l, mask);  // mask broadcasts over rows
  EXPECT_EQ(vals(s), (V{0, 0, -2, 0}));
  (s * f64({1, 2, 3, 4}, {4})).sum().backward();
  EXPECT_EQ(vals(l.grad()), (V{1, 0, 2, 3, 0, 4}));
  expect_error([&] { masked_select(x, ones({3})); }, {"[masked_select]", "bool"});
  kiln::testing::TraceScope trace;
  auto impl = std::make_shared<TensorImpl>();  // a traced tensor: shape, no data
  impl->shape = {2, 3};
  impl->strides = contiguous_strides(impl->shape);
  impl->dtype = DType::f64;
  Tensor sym(impl);
  expect_error([&] { nonzero(sym); }, {"[nonzero]", "not traceable"});
  expect_error([&] { masked_select(sym, mask); }, {"[masked_select]", "not traceable"});
}

// Verifies clamp/clip with tensor bounds (broadcast, one-sided) and gradients.
TEST(TensorComposites, ClampWithTensorBounds) {
  Tensor x = from_vector<double>({-3, 0.5, 4, 1}, {2, 2});
  Tensor lo = from_vector<double>({-1, 1}), hi = from_vector<double>({2, 3});
  EXPECT_EQ(vals(clamp(x, lo, hi)), (V{-1, 1, 2, 1}));
  EXPECT_EQ(vals(x.clip(lo, hi)), (V{-1, 1, 2, 1}));
  EXPECT_EQ(vals(clamp_min(x, lo)), (V{-1, 1, 4, 1}));
  EXPECT_EQ(vals(x.clamp_max(hi)), (V{-3, 0.5, 2, 1}));
  EXPECT_EQ(vals(clip(x, 0, 1)), (V{0, 0.5, 1, 1}));
  expect_error([&] { clamp(x, Tensor(), Tensor()); }, {"[clamp]", "at least one"});
  EXPECT_EQ(check1([&](const Tensor& t) { return clamp(t, lo, hi); },
                   from_vector<double>({-3, 0.5, 4, 1.5}, {2, 2})),
            "");
}

// Verifies isnan/isinf/isfinite (floats and integers) and nan_to_num's defaults.
TEST(TensorComposites, NanInfPredicatesAndNanToNum) {
  Tensor x = from_vector<double>({1, kNaN, kInf, -kInf, 0});
  EXPECT_EQ(x.isnan().to_vector<bool>(), (std::vector<bool>{false, true, false, false, false}));
  EXPECT_EQ(isinf(x).to_vector<bool>(), (std::vector<bool>{false, false, true, true, false}));
  EXPECT_EQ(isfinite(x).to_vector<bool>(), (std::vector<bool>{true, false, false, false, true}));
  Tensor n = from_vector<int64_t>({1, 2});
  EXPECT_EQ(isfinite(n).to_vector<bool>(), (std::vector<bool>{true, true}));
  EXPECT_EQ(isnan(n).dtype(), DType::b8);
  const double big = std::numeric_limits<double>::max();
  EXPECT_EQ(vals(nan_to_num(x)), (V{1, 0, big, -big, 0}));
  EXPECT_EQ(vals(x.nan_to_num(5.0, 7.0, -7.0)), (V{1, 5, 7, -7, 0}));
  Tensor f = from_vector<float>({std::numeric_limits<float>::infinity()});
  EXPECT_EQ(vals(nan_to_num(f)), (V{std::numeric_limits<float>::max()}));
  Tensor l = x.clone().requires_grad_();
  nan_to_num(l).sum().backward();
  EXPECT_EQ(vals(l.grad()), (V{1, 0, 0, 0, 1}));
}

// Verifies max/min along a dim return (values, indices), the gradient going to
// the first extreme only (as torch.max(x, dim)).
TEST(TensorComposites, MaxMinAlongDim) {
  Tensor x = from_vector<double>({1, 5, 5, 2, -1, 0}, {2, 3});
  auto [v, i] = x.max(1);
  EXPECT_EQ(vals(v), (V{5, 2}));
  EXPECT_EQ(ints(i), (I{1, 0}));
  auto [mv, mi] = min(x, 0, true);
  EXPECT_EQ(mv.shape(), (Dims{1, 3}));
  EXPECT_EQ(vals(mv), (V{1, -1, 0}));
  EXPECT_EQ(ints(mi), (I{0, 1, 1}));
  Tensor l = x.clone().requires_grad_();
  std::get<0>(l.max(1)).sum().backward();
  EXPECT_EQ(vals(l.grad()), (V{0, 1, 0, 1, 0, 0}));
  EXPECT_EQ(vals(x.max(from_vector<double>({3, 3, 3}))), (V{3, 5, 5, 3, 3, 3}));
}

// Verifies gradcheck on the differentiable composites not checked above (split,
// chunk, unbind, tile, masked_select, nan_to_num, max/min along a dim).
TEST(TensorComposites, GradchecksOfTheRest) {
  Tensor x = f64(randv(12, 9), {3, 4});
  auto cat_all = [](const std::vector<Tensor>& ts) {
    std::vector<Tensor> flat;
    for (const Tensor& t : ts) flat.push_back(t.reshape({-1}));
    return cat(flat);
  };
  EXPECT_EQ(check1([&](const Tensor& t) { return cat_all(split(t, Dims{1, 3}, 1)) * 2.0; }, x), "");
  EXPECT_EQ(check1([&](const Tensor& t) { return cat_all(chunk(t, 2, 0)).square(); }, x), "");
  EXPECT_EQ(check1([&](const Tensor& t) { return unbind(t, 1)[2] * 3.0; }, x), "");
  EXPECT_EQ(check1([](const Tensor& t) { return tile(t, {2, 1, 2}); }, x), "");
  Tensor mask = from_vector<bool>({true, false, false, true});
  EXPECT_EQ(check1([&](const Tensor& t) { return masked_select(t, mask); }, x), "");
  EXPECT_EQ(check1([](const Tensor& t) { return nan_to_num(t); }, x), "");
  EXPECT_EQ(check1([](const Tensor& t) { return std::get<0>(t.max(1)); }, x), "");
  EXPECT_EQ(check1([](const Tensor& t) { return std::get<0>(min(t, 0, true)); }, x), "");
}

}  // namespace
