// Hostile inputs found by outside testing (issue "Hardening"): sizes that
// overflow, in-place writes through overlapping memory, and values an op must
// refuse. Each case is a kiln::Error naming the op (or a correct result) —
// never a crash, a hang or a silent wrong answer. Also run under ASan+UBSan.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/kiln.h"
#include "kiln/nn/nn.h"

using namespace kiln;

namespace {

constexpr int64_t kBig = int64_t{1} << 31;
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
const double kNan = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

// Runs f and returns the kiln::Error message ("" if nothing was thrown).
template <typename F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// f throws a kiln::Error whose message contains every part.
template <typename F>
void expect_error(F&& f, std::initializer_list<const char*> parts) {
  const std::string m = message_of(f);
  ASSERT_FALSE(m.empty()) << "expected a kiln::Error containing " << *parts.begin();
  for (const char* p : parts) EXPECT_NE(m.find(p), std::string::npos) << m;
}

std::vector<float> values(const Tensor& t) {
  return t.contiguous().to_vector<float>();
}

// ---------------- sizes ----------------

// Broadcasting two large expanded views: the result shape [2^31, 2^31] has 2^62
// elements (2^64 bytes of f32: the byte count wrapped to 0 and the kernel wrote
// past a 0-byte buffer).
TEST(HostileSizes, BroadcastResultTooLarge) {
  Tensor a = ones({1, 1}).expand({kBig, 1}), b = ones({1, 1}).expand({1, kBig});
  expect_error([&] { add(a, b); }, {"[add] result shape [2147483648, 2147483648] is too large",
                                    "2^60", "input shapes [[2147483648, 1], [1, 2147483648]]"});
  expect_error([&] { mul(a, b); }, {"[mul]"});
  expect_error([&] { ones({1}).expand({kBig, kBig, 4}); }, {"[expand]", "too large"});
  // Big but addressable views still work, and reductions of them too.
  Tensor v = ones({1}).expand({int64_t{1} << 40});
  EXPECT_EQ(v.numel(), int64_t{1} << 40);
}

// conv2d with padding 2^31 - 1 gave a 2^32 x 2^32 output over 0 bytes; padding
// near 2^62 overflowed the size arithmetic itself.
TEST(HostileSizes, ConvAndPoolGeometry) {
  Tensor x = ones({1, 1, 2, 2}), w = ones({1, 1, 1, 1});
  expect_error(
      [&] {
        conv2d(x, w, {}, {.padding = {kBig - 1, kBig - 1}});
      },
      {"[conv2d]", "too large"});
  expect_error(
      [&] {
        conv2d(x, w, {}, {.padding = {int64_t{1} << 62, 0}});
      },
      {"[conv2d] size arithmetic overflows"});
  expect_error(
      [&] {
        conv2d(x, ones({1, 1, 2, 2}), {}, {.dilation = {kMax, 1}});
      },
      {"[conv2d] size arithmetic overflows"});
  expect_error(
      [&] {
        conv2d(ones({1, 2, 2, 2}), ones({1, 1, 1, 1}), {}, {.groups = kMax});
      },
      {"[conv2d]"});
  expect_error(
      [&] {
        max_pool2d(x, {.kernel_size = {2, 2}, .dilation = {kMax, 1}});
      },
      {"[max_pool2d]"});
  expect_error([&] { avg_pool2d(x, {.kernel_size = {kMax, 2}}); }, {"[avg_pool2d]"});
}

// pad, cat, reshape's -1, narrow and slice compute sizes from user numbers.
TEST(HostileSizes, MovementArithmetic) {
  Tensor x = ones({4});
  expect_error([&] { pad(x, {kMax, 1}); }, {"[pad] size arithmetic overflows"});
  expect_error([&] { pad(x, {int64_t{1} << 61, 0}); }, {"[pad]", "too large"});
  Tensor huge = ones({1}).expand({int64_t{1} << 60});
  expect_error([&] { cat({huge, huge}); }, {"[cat]", "too large"});
  std::vector<Tensor> many(9, huge);
  expect_error([&] { cat(many); }, {"[cat]"});
  expect_error([&] { reshape(x, {-1, kBig, kBig, kBig}); }, {"[reshape]"});
  expect_error([&] { reshape(zeros({0}), {-1, 0}); }, {"[reshape]", "is invalid"});
  expect_error([&] { narrow(x, 0, 1, kMax); }, {"[narrow]", "exceeds dimension 0 of size 4"});
  expect_error([&] { narrow(x, 0, kMax, 1); }, {"[narrow]"});
  // A step past the end keeps one element; no stride overflow.
  Tensor r = arange(0, 4).to(DType::f32);
  EXPECT_EQ(values(r.slice(0, 1, 4, kMax)), std::vector<float>{1});
  EXPECT_EQ(values(r.slice(0, 0, 4, 3)), (std::vector<float>{0, 3}));
}

// Factories and views of user-given shapes.
TEST(HostileSizes, Factories) {
  expect_error([&] { zeros({kBig, kBig}); }, {"[full]", "too large"});
  expect_error([&] { empty({kBig, kBig, kBig}); }, {"[empty]", "too large"});
  expect_error([&] { empty({-1}); }, {"[empty] negative dimension -1"});
  expect_error([&] { zeros({0, int64_t{1} << 40, int64_t{1} << 40}); }, {"[full]", "too large"});
  float f = 0;
  expect_error([&] { from_blob(&f, {kBig, kBig}, DType::f32); }, {"[from_blob]", "too large"});
  expect_error([&] { arange(0, 1e30); }, {"[arange]"});
}

// ---------------- overlapping memory ----------------

// copy_ between overlapping views reads every source element before writing.
TEST(HostileOverlap, CopyThroughOverlappingViews) {
  Tensor w = arange(0, 9).to(DType::f32).reshape({3, 3});
  const std::vector<float> wt = values(w.t());
  w.copy_(w.t());
  EXPECT_EQ(values(w), wt);

  Tensor a = arange(0, 6).to(DType::f32);
  a.slice(0, 1, 6).copy_(a.slice(0, 0, 5));  // a[1:] = a[:5]
  EXPECT_EQ(values(a), (std::vector<float>{0, 0, 1, 2, 3, 4}));
  Tensor b = arange(0, 6).to(DType::f32);
  b.slice(0, 0, 5).copy_(b.slice(0, 1, 6));  // b[:5] = b[1:]
  EXPECT_EQ(values(b), (std::vector<float>{1, 2, 3, 4, 5, 5}));
  Tensor c = arange(0, 6).to(DType::f32);
  c.copy_(c);  // the same elements: nothing to do
  EXPECT_EQ(values(c), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  // A cast between overlapping views of different widths (f32 -> i32 bytes).
  Tensor d = arange(0, 4).to(DType::f32);
  d.slice(0, 1, 4).copy_(d.slice(0, 0, 3));
  EXPECT_EQ(values(d), (std::vector<float>{0, 0, 1, 2}));
}

// load_state_dict with a checkpoint tensor that aliases the parameter itself.
TEST(HostileOverlap, LoadStateDictFromAnAliasOfTheParameter) {
  nn::Linear lin(3, 3);
  const std::vector<float> wt = values(lin.weight.t());
  StateDict sd = lin.state_dict();
  sd.set("weight", lin.weight.detach().t());
  lin.load_state_dict(sd);
  EXPECT_EQ(values(lin.weight), wt);
}

// In-place ops on a view where several elements share one memory location.
TEST(HostileOverlap, InPlaceOnStrideZeroViewIsRefused) {
  Tensor e = ones({1}).expand({4});
  const char* msg = "more than one element of the written-to tensor";
  expect_error([&] { e.add_(1); }, {"[add_] unsupported operation", msg});
  expect_error([&] { e.fill_(2); }, {"[fill_]", msg});
  expect_error([&] { e.copy_(arange(0, 4).to(DType::f32)); }, {"[copy_]", msg});
  expect_error([&] { ones({3, 1}).expand({3, 2}).mul_(2); }, {"[mul_]", "strides [1, 0]"});
  Tensor base = ones({1});
  EXPECT_EQ(values(base), std::vector<float>{1});  // nothing was written
  Tensor one = ones({1, 1}).expand({1, 1});        // stride 0 over a size-1 dim is fine
  one.add_(1);
  EXPECT_EQ(values(one), std::vector<float>{2});
}

// ---------------- values ----------------

// Class targets and indices must lie in [0, size): -1 no longer means the last one.
TEST(HostileValues, NegativeIndicesAreOutOfRange) {
  Tensor logits = zeros({2, 3});
  expect_error(
      [&] {
        cross_entropy(logits, from_vector<int64_t>({-1, 0}));
      },
      {"index -1 is out of bounds for dimension 1 with size 3"});
  expect_error([&] { cross_entropy(logits, from_vector<int64_t>({3, 0})); }, {"index 3"});
  // The ignored target (-100 by default) is still skipped.
  EXPECT_NO_THROW(cross_entropy(logits, from_vector<int64_t>({-100, 0})));
  expect_error([&] { nll_loss(logits, from_vector<int64_t>({0, -2})); }, {"index -2"});
  Tensor w = ones({4, 2});
  expect_error(
      [&] {
        embedding(from_vector<int64_t>({0, -1}), w);
      },
      {"[index_select] index -1 is out of bounds for dimension 0 with size 4"});
  Tensor x = ones({2, 3});
  expect_error(
      [&] {
        gather(x, 1, from_vector<int64_t>({-1, 0}).reshape({2, 1}));
      },
      {"[gather] index -1"});
  expect_error([&] { index_select(x, 0, from_vector<int64_t>({-2})); },
               {"[index_select] index -2"});
  expect_error(
      [&] {
        scatter_add(x, 0, from_vector<int64_t>({-1, 0, 0}).reshape({1, 3}), ones({1, 3}));
      },
      {"[scatter_add] index -1"});
}

// fill_ and masked_fill check the value against the dtype like full does.
TEST(HostileValues, FillValuesMustFitTheDtype) {
  Tensor i = zeros({3}, DType::i64);
  expect_error([&] { i.fill_(1e20); }, {"[fill_] value 1e+20 cannot be converted to i64"});
  expect_error([&] { i.fill_(kNan); }, {"[fill_] value nan cannot be converted to i64"});
  expect_error([&] { zeros({2}, DType::i32).fill_(int64_t{3} << 31); }, {"[fill_]", "i32"});
  expect_error([&] { zeros({2}, DType::f16).fill_(1e6); }, {"[fill_]", "f16"});
  expect_error([&] { masked_fill(i, ones({3}, DType::b8), 1e20); }, {"[masked_fill]"});
  expect_error([&] { full({2}, kInf, DType::i32); }, {"[full]"});
  i.fill_(2.9);  // truncates, as PyTorch does
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{2, 2, 2}));
  Tensor f = zeros({2});
  f.fill_(kInf);  // non-finite values are fine for floats
  EXPECT_TRUE(std::isinf(f.to_vector<float>()[0]));
}

// bernoulli's probabilities and linspace/arange's ends must be meaningful.
TEST(HostileValues, ProbabilitiesAndRanges) {
  expect_error(
      [&] {
        bernoulli(from_vector<float>({0.5f, 1.5f}));
      },
      {"[bernoulli] p must hold probabilities in [0, 1], got 1.5 at flat index 1"});
  expect_error([&] { bernoulli(from_vector<float>({-0.1f})); }, {"[bernoulli]", "-0.1"});
  expect_error([&] { bernoulli(from_vector<double>({0.2, kNan})); }, {"[bernoulli]", "nan"});
  Tensor ok = bernoulli(from_vector<float>({0.0f, 1.0f}));
  EXPECT_EQ(values(ok), (std::vector<float>{0, 1}));
  expect_error([&] { linspace(0, kInf, 5); }, {"[linspace] start and end must be finite"});
  expect_error([&] { linspace(kNan, 1, 5); }, {"[linspace]"});
  expect_error([&] { arange(0, kInf); }, {"[arange]"});
  expect_error([&] { arange(kNan, 3); }, {"[arange]"});
}

}  // namespace
