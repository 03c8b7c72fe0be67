// Verifies the Tensor methods that mirror functional.h (PyTorch's method
// spellings, argument order and defaults) give the free functions' results,
// plus var/std's `unbiased` spelling and embedding's F.embedding argument order.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/kiln.h"
#include "test_util.h"

using namespace kiln;

namespace {

using V = std::vector<double>;
V vals(const Tensor& t) {
  return t.to_vector<double>();
}
void same(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.dtype(), b.dtype());
  ASSERT_EQ(a.shape(), b.shape());
  V av = vals(a), bv = vals(b);
  for (size_t i = 0; i < av.size(); ++i)
    EXPECT_TRUE(av[i] == bv[i] || (std::isnan(av[i]) && std::isnan(bv[i]))) << "element " << i;
}

// Verifies each method equals its free function on the same arguments.
TEST(TensorMethods, EqualTheFreeFunctions) {
  Tensor x = from_vector<double>({0.5, -1.5, 2, 3, -0.25, 1}, {2, 3});
  Tensor y = from_vector<double>({1, 2, -1, 0.5, 0.5, 4}, {2, 3});
  Tensor m = from_vector<bool>({true, false, true, false, false, true}, {2, 3});
  same(x.neg(), neg(x));
  same(x.tanh(), tanh(x));
  same(x.sigmoid(), sigmoid(x));
  same(x.relu(), relu(x));
  same(x.abs().log1p(), log1p(abs(x)));
  same(x.abs().rsqrt(), rsqrt(abs(x)));
  same(x.sin().cos().erf(), erf(cos(sin(x))));
  same(x.sign(), sign(x));
  same(x.square(), square(x));
  same(x.reciprocal(), reciprocal(x));
  same(x.add(y, 2), x + y * 2);
  same(x.sub(y), x - y);
  same(x.mul(3), x * 3);
  same(x.div(y), x / y);
  same(x.pow(y.abs()), pow(x, abs(y)));
  same(x.maximum(y), maximum(x, y));
  same(x.minimum(y), minimum(x, y));
  same(x.gt(y), gt(x, y));
  same(x.le(0.5), le(x, 0.5));
  same(x.eq(y).logical_or(m), logical_or(eq(x, y), m));
  same(m.logical_not().logical_and(m), logical_and(logical_not(m), m));
  same(x.where(m, y), where(m, x, y));
  same(x.where(m, 0.0), where(m, x, 0.0));
  same(x.masked_fill(m, -9), masked_fill(x, m, -9));
  same(x.clamp(-1, 1), clamp(x, -1, 1));
  same(x.clamp_min(0), clamp_min(x, 0));
  same(x.amax(1), amax(x, {1}));
  same(x.sum(-1, true), sum(x, {-1}, true));
  same(x.mean(0), mean(x, {0}));
  same(x.amin(1), amin(x, {1}));
  same(x.logsumexp(1), logsumexp(x, {1}));
  same(x.var(1), var(x, {1}));
  same(x.std(0, 0), kiln::std(x, {0}, 0));
  same(sum(x, 1), sum(x, {1}));
  same(amax(x, -1, true), amax(x, {-1}, true));
  same(var(x, 0), var(x, {0}));
  same(x.amin({0}, true), amin(x, {0}, true));
  same(x.argmax(1), argmax(x, 1));
  same(x.argmin(), argmin(x));
  same(x.var({1}), var(x, {1}));
  same(x.std({1}, 0, true), kiln::std(x, {1}, 0, true));
  same(x.logsumexp({1}), logsumexp(x, {1}));
  same(x.softmax(-1), softmax(x, -1));
  same(x.log_softmax(0), log_softmax(x, 0));
  same(x.sum({1}, true), sum(x, {1}, true));
  same(x.mean(), mean(x));
  same(x.cumsum(1), cumsum(x, 1));
  same(x.argsort(1, true), argsort(x, 1, true));
  same(x.matmul(y.t()), matmul(x, y.t()));
  same(x.reshape({1, 2, 3}).bmm(y.reshape({1, 3, 2})),
       bmm(x.reshape({1, 2, 3}), y.reshape({1, 3, 2})));
  same(x.flatten().outer(y.flatten()), outer(x.flatten(), y.flatten()));
  Tensor idx = from_vector<int64_t>({2, 0, 1, 1, 0, 2}, {2, 3});
  same(x.gather(1, idx), gather(x, 1, idx));
  same(x.index_select(1, from_vector<int64_t>({2, 0})),
       index_select(x, 1, from_vector<int64_t>({2, 0})));
  same(x.scatter_add(1, idx, y), scatter_add(x, 1, idx, y));
  same(x.tril(), tril(x));
  same(x.triu(1), triu(x, 1));
  same(x.flip({0}), flip(x, {0}));
  same(x.tile({2}), tile(x, {2}));
  same(x.expand_as(zeros({4, 2, 3})), expand(x, {4, 2, 3}));
  same(x.reshape_as(zeros({3, 2})), reshape(x, {3, 2}));
  same(x.view_as(zeros({6})), reshape(x, {6}));
  same(x.type_as(zeros({1}, DType::f32)), cast(x, DType::f32));
  same(x.chunk(3, 1)[2], x.narrow(1, 2, 1));
  same(x.split_with_sizes({1, 2}, 1)[1], x.narrow(1, 1, 2));
  Tensor z = x.clone();
  z.masked_fill_(m, 0);
  same(z, masked_fill(x, m, 0));
}

// Verifies the `unbiased` spelling of var/std (a bool) selects correction 1 or 0,
// while an integer stays a correction.
TEST(TensorMethods, VarStdAcceptUnbiased) {
  Tensor x = from_vector<double>({1, 2, 4, 7}, {2, 2});
  same(var(x, {1}, false), var(x, {1}, int64_t{0}));
  same(var(x, {1}, true, true), var(x, {1}, int64_t{1}, true));
  same(var(x, false), var(x, Dims{}, int64_t{0}));
  same(kiln::std(x, {0}, false), kiln::std(x, {0}, int64_t{0}));
  same(x.var(false), var(x, Dims{}, int64_t{0}));
  same(x.std({1}, true), kiln::std(x, {1}, int64_t{1}));
  same(x.var({1}, 2), var(x, {1}, int64_t{2}));
}

// Verifies embedding takes (input, weight) like F.embedding, and an old-order
// call (weight first) is an error saying which argument is the index.
TEST(TensorMethods, EmbeddingTakesInputThenWeight) {
  Tensor w = from_vector<double>({0, 1, 10, 11, 20, 21}, {3, 2});
  Tensor i = from_vector<int64_t>({2, 0});
  EXPECT_EQ(vals(embedding(i, w)), (V{20, 21, 0, 1}));
  kiln::testing::expect_error([&] { embedding(w, i); },
                              {"[embedding]", "input", "integer tensor", "f64"});
}

}  // namespace
