// Verifies movement ops: views share storage, copies do not, values and
// gradients of reshape/permute/expand/slice/pad/cat/gather/index_select/scatter_add.
#include <gtest/gtest.h>

#include "kiln/kiln.h"

using namespace kiln;

namespace {
Tensor iota(const Dims& shape, DType dt = DType::f64) {
  return reshape(arange(0, numel_of(shape), 1, dt), shape);
}
std::vector<double> vals(const Tensor& t) {
  return t.to_vector<double>();
}
using V = std::vector<double>;
std::string check(const std::function<Tensor(const Tensor&)>& f, const Tensor& x) {
  Tensor xi = x.detach().clone().requires_grad_();
  return gradcheck([&](const std::vector<Tensor>& in) -> std::vector<Tensor> { return {f(in[0])}; },
                   {xi});
}
}  // namespace

// reshape of a contiguous tensor is a view; of a transposed one, a copy.
TEST(Movement, ReshapeViewsWhenPossible) {
  Tensor x = iota({2, 3});
  Tensor v = x.reshape({3, 2});
  EXPECT_EQ(v.data_ptr(), x.data_ptr());
  EXPECT_EQ(vals(v), (V{0, 1, 2, 3, 4, 5}));
  Tensor t = x.t();
  EXPECT_EQ(vals(t), (V{0, 3, 1, 4, 2, 5}));
  Tensor r = t.reshape({6});
  EXPECT_NE(r.data_ptr(), x.data_ptr());
  EXPECT_EQ(vals(r), (V{0, 3, 1, 4, 2, 5}));
  EXPECT_THROW(t.view({6}), Error);
  EXPECT_EQ(x.reshape({-1, 2}).shape(), (Dims{3, 2}));
  EXPECT_THROW(x.reshape({4, -1}), Error);
}

// Writing through a view changes the base, and bumps the shared version.
TEST(Movement, ViewsShareStorageAndVersion) {
  Tensor x = zeros({2, 3}, DType::f64);
  Tensor row = x.select(0, 1);
  uint32_t v0 = x.version();
  row.fill_(7);
  EXPECT_EQ(vals(x), (V{0, 0, 0, 7, 7, 7}));
  EXPECT_GT(x.version(), v0);
  Tensor col = x.slice(1, 0, 3, 2);
  col.add_(1.0);
  EXPECT_EQ(vals(x), (V{1, 0, 1, 8, 7, 8}));
}

// squeeze/unsqueeze/flatten/transpose/narrow/select shapes and values.
TEST(Movement, ShapeHelpers) {
  Tensor x = iota({2, 1, 3});
  EXPECT_EQ(x.squeeze().shape(), (Dims{2, 3}));
  EXPECT_EQ(x.squeeze(1).shape(), (Dims{2, 3}));
  EXPECT_EQ(x.squeeze(0).shape(), (Dims{2, 1, 3}));
  EXPECT_EQ(x.unsqueeze(-1).shape(), (Dims{2, 1, 3, 1}));
  EXPECT_EQ(x.flatten().shape(), (Dims{6}));
  EXPECT_EQ(x.flatten(1).shape(), (Dims{2, 3}));
  EXPECT_EQ(vals(x.narrow(2, 1, 2)), (V{1, 2, 4, 5}));
  EXPECT_EQ(vals(x.select(2, -1)), (V{2, 5}));
  EXPECT_EQ(vals(x[1]), (V{3, 4, 5}));
  EXPECT_EQ(transpose(x, 0, 2).shape(), (Dims{3, 1, 2}));
  EXPECT_THROW(x.select(0, 2), Error);
  EXPECT_THROW(x.narrow(2, 2, 2), Error);
}

// Python-style slicing: negative bounds, clamping, steps.
TEST(Movement, SliceSemantics) {
  Tensor x = iota({6});
  EXPECT_EQ(vals(x.slice(0, -2, 100)), (V{4, 5}));
  EXPECT_EQ(vals(x.slice(0, 1, 6, 2)), (V{1, 3, 5}));
  EXPECT_EQ(x.slice(0, 4, 2).numel(), 0);
  EXPECT_THROW(x.slice(0, 0, 6, 0), Error);
}

// expand broadcasts with stride 0 and its gradient sums back.
TEST(Movement, Expand) {
  Tensor x = iota({3, 1});
  Tensor e = x.expand({2, 3, 4});
  EXPECT_EQ(e.shape(), (Dims{2, 3, 4}));
  EXPECT_EQ(e.stride(0), 0);
  EXPECT_EQ(e.stride(2), 0);
  EXPECT_EQ(vals(e.select(0, 1).select(1, 3)), (V{0, 1, 2}));
  EXPECT_THROW(x.expand({3, 2, 4}).numel(), Error);
  EXPECT_EQ(check([](const Tensor& t) { return t.expand({2, 3, 4}) * 1.0; }, x), "");
}

// contiguous and clone copy; copy_ broadcasts and casts.
TEST(Movement, CopyAndContiguous) {
  Tensor x = iota({2, 3});
  Tensor c = x.t().contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(vals(c), (V{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(x.contiguous().data_ptr(), x.data_ptr());
  EXPECT_NE(x.clone().data_ptr(), x.data_ptr());
  Tensor d = zeros({2, 3}, DType::f32);
  d.copy_(from_vector<int64_t>({1, 2, 3}));
  EXPECT_EQ(vals(d), (V{1, 2, 3, 1, 2, 3}));
  EXPECT_THROW(d.copy_(zeros({2})), Error);
}

// pad with positive and negative (cropping) pads, and its gradient.
TEST(Movement, Pad) {
  Tensor x = iota({2, 2});
  Tensor p = pad(x, {1, 0, 0, 1}, -1.0);
  EXPECT_EQ(p.shape(), (Dims{3, 3}));
  EXPECT_EQ(vals(p), (V{-1, 0, 1, -1, 2, 3, -1, -1, -1}));
  EXPECT_EQ(vals(pad(x, {-1, 0})), (V{1, 3}));
  EXPECT_THROW(pad(x, {-3, 0}), Error);
  EXPECT_EQ(check([](const Tensor& t) { return pad(t, {1, -1, 2, 0}, 3.0); }, x), "");
}

// pad against a naive reference for pads of every sign on up to three dims of a
// 3-d input (the kernel fills only the border, then copies the interior), a
// transposed input, f32 and i64, and a pad that crops a dim away.
TEST(Movement, PadMatchesAReference) {
  const Tensor base = iota({3, 4, 5});
  const std::vector<Dims> cases = {{2, 1},         {0, 3},
                                   {-1, 2},        {2, -2},
                                   {1, 1, 2, 0},   {0, 0, -1, 1},
                                   {-2, -1, 3, 1}, {1, 2, 1, 2, 1, 2},
                                   {0, 0, 0, 0},   {-1, 0, 2, -1, 1, -2}};
  for (DType dt : {DType::f32, DType::i64})
    for (bool transposed : {false, true}) {
      const Tensor x =
          cast(transposed ? base.transpose(0, 2).contiguous().transpose(0, 2) : base, dt);
      for (const Dims& pads : cases) {
        const Tensor got = pad(x, pads, 7.0);
        const Dims& in = x.shape();
        Dims lo{0, 0, 0}, shape = in;
        for (size_t k = 0; k < pads.size() / 2; ++k) {
          lo[2 - k] = pads[2 * k];
          shape[2 - k] = in[2 - k] + pads[2 * k] + pads[2 * k + 1];
        }
        ASSERT_EQ(got.shape(), shape) << pads;
        const V xv = vals(x.contiguous()), gv = vals(got);
        size_t at = 0;
        for (int64_t i = 0; i < shape[0]; ++i)
          for (int64_t j = 0; j < shape[1]; ++j)
            for (int64_t l = 0; l < shape[2]; ++l, ++at) {
              const int64_t a = i - lo[0], b = j - lo[1], c = l - lo[2];
              const bool inside = a >= 0 && a < in[0] && b >= 0 && b < in[1] && c >= 0 && c < in[2];
              const double want = inside ? xv[static_cast<size_t>((a * in[1] + b) * in[2] + c)] : 7;
              ASSERT_EQ(gv[at], want) << "pads " << pads << " at " << i << "," << j << "," << l;
            }
      }
    }
  EXPECT_EQ(pad(base, {-5, 2}, 1.0).shape(), (Dims{3, 4, 2}));  // the input cropped away
  EXPECT_EQ(vals(pad(base, {-5, 2}, 1.0)), V(24, 1.0));
}

// cat and stack along any dim, with mixed dtypes promoted.
TEST(Movement, CatStack) {
  Tensor a = iota({2, 2});
  Tensor b = iota({2, 1}) + 10.0;
  EXPECT_EQ(vals(cat({a, b}, 1)), (V{0, 1, 10, 2, 3, 11}));
  EXPECT_EQ(vals(cat({a, a}, 0)), (V{0, 1, 2, 3, 0, 1, 2, 3}));
  EXPECT_EQ(cat({zeros({2}, DType::i64), ones({1}, DType::f32)}).dtype(), DType::f32);
  EXPECT_EQ(stack({a, a}, 1).shape(), (Dims{2, 2, 2}));
  EXPECT_THROW(cat({a, b}, 0), Error);
  Tensor bi = b.detach().clone().requires_grad_();
  Tensor ai = a.detach().clone().requires_grad_();
  EXPECT_EQ(gradcheck(
                [](const std::vector<Tensor>& in) -> std::vector<Tensor> {
                  return {cat({in[0], in[1]}, -1)};
                },
                {ai, bi}),
            "");
}

// gather, index_select and scatter_add values, bounds errors and gradients.
TEST(Movement, Indexing) {
  Tensor x = iota({3, 3});
  Tensor idx = from_vector<int64_t>({2, 0, 1, 1}, {2, 2});
  EXPECT_EQ(vals(gather(x, 1, idx)), (V{2, 0, 4, 4}));
  EXPECT_EQ(vals(index_select(x, 0, from_vector<int64_t>({2, 0}))), (V{6, 7, 8, 0, 1, 2}));
  Tensor s = scatter_add(zeros({2, 3}, DType::f64), 1, from_vector<int64_t>({0, 0, 2, 1}, {2, 2}),
                         ones({2, 2}, DType::f64));
  EXPECT_EQ(vals(s), (V{2, 0, 0, 0, 1, 1}));
  try {
    gather(x, 1, from_vector<int64_t>({3}, {1, 1}));
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("[gather] index 3 is out of bounds"), std::string::npos) << m;
  }
  EXPECT_THROW(index_select(x, 0, from_vector<double>({1.0})), Error);
  EXPECT_EQ(check([&](const Tensor& t) { return gather(t, 1, idx); }, x), "");
  EXPECT_EQ(check(
                [&](const Tensor& t) {
                  return index_select(t, 0, from_vector<int64_t>({2, 2}));
                },
                x),
            "");
}

// Large gather/scatter_add along every dim (lines run in parallel): equal to
// a naive loop, repeated indices summed in index order, any thread count.
TEST(Movement, LargeGatherScatterMatchNaiveLoops) {
  const Dims xs{6, 50, 40}, is{6, 30, 40};
  const int before = num_threads();
  for (int64_t d = 0; d < 3; ++d) {
    manual_seed(static_cast<uint64_t>(7 + d));
    Dims ids = is;
    ids[0] = d == 0 ? 9 : 6;
    Tensor idx = randint(0, xs[static_cast<size_t>(d)], ids);
    Tensor src = randn(ids, DType::f32);
    Tensor x = randn(xs, DType::f32);
    std::vector<float> want_s(static_cast<size_t>(numel_of(xs)), 0.f), want_g;
    const auto iv = idx.to_vector<int64_t>();
    const auto sv = src.to_vector<float>();
    const auto xv = x.to_vector<float>();
    for (int64_t i = 0; i < ids[0]; ++i)
      for (int64_t j = 0; j < ids[1]; ++j)
        for (int64_t k = 0; k < ids[2]; ++k) {
          const int64_t e = (i * ids[1] + j) * ids[2] + k, v = iv[static_cast<size_t>(e)];
          const int64_t c[3] = {d == 0 ? v : i, d == 1 ? v : j, d == 2 ? v : k};
          const int64_t o = (c[0] * xs[1] + c[1]) * xs[2] + c[2];
          want_s[static_cast<size_t>(o)] += sv[static_cast<size_t>(e)];
          want_g.push_back(xv[static_cast<size_t>(o)]);
        }
    for (int n : {1, 2, 3}) {
      set_num_threads(n);
      EXPECT_EQ(scatter_add(zeros(xs, DType::f32), d, idx, src).to_vector<float>(), want_s)
          << "dim " << d << " threads " << n;
      EXPECT_EQ(gather(x, d, idx).to_vector<float>(), want_g) << "dim " << d;
    }
  }
  set_num_threads(before);
}

// tril/triu keep the right triangle.
TEST(Movement, TrilTriu) {
  Tensor x = iota({3, 3}) + 1.0;
  EXPECT_EQ(vals(tril(x)), (V{1, 0, 0, 4, 5, 0, 7, 8, 9}));
  EXPECT_EQ(vals(triu(x, 1)), (V{0, 2, 3, 0, 0, 6, 0, 0, 0}));
}

// Gradients of views through strided slices and permutes.
TEST(Movement, ViewGradients) {
  Tensor x = iota({3, 4});
  EXPECT_EQ(check(
                [](const Tensor& t) {
                  return t.slice(1, 1, 4, 2).permute({1, 0}) * 2.0;
                },
                x),
            "");
  EXPECT_EQ(check([](const Tensor& t) { return sin(t.t().reshape({-1})); }, x), "");
}
