// Conformance cases of the conv family: conv2d and its two gradient
// primitives, max_pool2d, avg_pool2d and avg_pool2d_grad.
#include <cmath>
#include <limits>

#include "op_cases.h"

namespace kiln::conformance {
namespace {

using D = DType;
using L = Layout;
const Values kV{-2, 2};

// ---------------- convolution ----------------
struct ConvSpec {
  Dims xs, ws;  // [N, C, H, W], [O, C/groups, kH, kW]
  Dims stride{1, 1}, pad{0, 0}, dil{1, 1};
  int64_t groups = 1;

  int64_t out(int i) const {
    const size_t k = static_cast<size_t>(i);
    return (xs[2 + k] + 2 * pad[k] - dil[k] * (ws[2 + k] - 1) - 1) / stride[k] + 1;
  }
  Dims ys() const { return {xs[0], ws[0], out(0), out(1)}; }
  Attrs attrs() const {
    Attrs a;
    a.set("stride", stride).set("padding", pad).set("dilation", dil).set("groups", groups);
    return a;
  }
  // Calls f(x_lin, w_lin, y_lin) for every product term of the convolution.
  template <typename F>
  void each(F f) const {
    const Dims y = ys();
    const int64_t Cg = ws[1], Og = ws[0] / groups;
    for (int64_t n = 0; n < y[0]; ++n)
      for (int64_t o = 0; o < y[1]; ++o)
        for (int64_t oh = 0; oh < y[2]; ++oh)
          for (int64_t ow = 0; ow < y[3]; ++ow)
            for (int64_t c = 0; c < Cg; ++c)
              for (int64_t ki = 0; ki < ws[2]; ++ki)
                for (int64_t kj = 0; kj < ws[3]; ++kj) {
                  const int64_t ih = oh * stride[0] - pad[0] + ki * dil[0];
                  const int64_t iw = ow * stride[1] - pad[1] + kj * dil[1];
                  if (ih < 0 || ih >= xs[2] || iw < 0 || iw >= xs[3]) continue;
                  const int64_t ci = (o / Og) * Cg + c;
                  const int64_t xl = ((n * xs[1] + ci) * xs[2] + ih) * xs[3] + iw;
                  const int64_t wl = ((o * Cg + c) * ws[2] + ki) * ws[3] + kj;
                  const int64_t yl = ((n * y[1] + o) * y[2] + oh) * y[3] + ow;
                  f(static_cast<size_t>(xl), static_cast<size_t>(wl), static_cast<size_t>(yl));
                }
  }
};

// The geometries every conv primitive is tested with.
struct Geo {
  const char* name;
  ConvSpec s;
};
std::vector<Geo> geometries() {
  return {
      {"basic", {{1, 2, 5, 5}, {3, 2, 3, 3}}},
      {"stride(2,1) pad(1,0)", {{2, 2, 5, 4}, {2, 2, 3, 2}, {2, 1}, {1, 0}}},
      {"dilation(2,2) pad(2,1)", {{1, 1, 6, 6}, {2, 1, 2, 3}, {1, 1}, {2, 1}, {2, 2}}},
      {"groups 2 stride 2", {{1, 4, 5, 4}, {4, 2, 2, 2}, {2, 2}, {0, 0}, {1, 1}, 2}},
      {"1x1 direct", {{2, 3, 3, 2}, {4, 3, 1, 1}}},
      {"stride 3 > kernel 2", {{1, 2, 7, 8}, {2, 2, 2, 2}, {3, 3}}},
      {"depthwise groups 3 pad 1", {{2, 3, 4, 4}, {3, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 3}},
      {"kernel 5 pad 2 on 3x3", {{1, 1, 3, 3}, {2, 1, 5, 5}, {1, 1}, {2, 2}}},
      {"groups 2 stride(2,1) pad(1,2) dilation(2,1)",
       {{1, 4, 7, 6}, {6, 2, 2, 3}, {2, 1}, {1, 2}, {2, 1}, 2}},
  };
}

std::vector<OpCase> conv_family(OpId op) {
  std::vector<OpCase> cs;
  // Input shapes of the op (in its argument order) for a geometry.
  auto shapes = [op](const ConvSpec& s) -> std::pair<Dims, Dims> {
    if (op == OpId::conv2d) return {s.xs, s.ws};
    if (op == OpId::conv2d_grad_input) return {s.ys(), s.ws};
    return {s.xs, s.ys()};
  };
  auto add = [&](std::string name, Kind k, const ConvSpec& s, Tensor a, Tensor b, bool g) {
    Attrs at = s.attrs();
    if (op == OpId::conv2d_grad_input) at.set("input_shape", s.xs);
    if (op == OpId::conv2d_grad_weight) at.set("weight_shape", s.ws);
    RefFn ref = [op, s](const std::vector<Ref>& in) {
      const DType dt = in[0].dtype;
      Ref o;
      if (op == OpId::conv2d) {
        o = make_ref(dt, s.ys());
        s.each([&](size_t x, size_t w, size_t y) { o.v[y] += in[0].v[x] * in[1].v[w]; });
      } else if (op == OpId::conv2d_grad_input) {
        o = make_ref(dt, s.xs);
        s.each([&](size_t x, size_t w, size_t y) { o.v[x] += in[0].v[y] * in[1].v[w]; });
      } else {
        o = make_ref(dt, s.ws);
        s.each([&](size_t x, size_t w, size_t y) { o.v[w] += in[0].v[x] * in[1].v[y]; });
      }
      return std::vector<Ref>{o};
    };
    OpCase c = make_case(std::move(name), k, {a, b}, at, ref, g);
    c.tol_scale = 4;
    cs.push_back(std::move(c));
  };
  uint64_t seed = 1;
  const std::vector<Geo> geos = geometries();
  for (const Geo& g : geos) {
    auto [sa, sb] = shapes(g.s);
    add(std::string("f64 ") + g.name, Kind::kContiguous, g.s, make_input(sa, D::f64, kV, seed),
        make_input(sb, D::f64, kV, seed + 1), true);
    seed += 2;
  }
  for (const Geo& g : {geos[0], geos[1], geos[3]}) {
    auto [sa, sb] = shapes(g.s);
    add(std::string("f32 ") + g.name, Kind::kContiguous, g.s, make_input(sa, D::f32, kV, seed),
        make_input(sb, D::f32, kV, seed + 1), false);
    add(std::string("f64 strided ") + g.name, Kind::kStrided, g.s,
        make_input(sa, D::f64, kV, seed + 2, L::kTransposed),
        make_input(sb, D::f64, kV, seed + 3, L::kSliced), true);
    seed += 4;
  }
  {
    const ConvSpec& s = geos[1].s;
    auto [sa, sb] = shapes(s);
    add("f16 stride(2,1) pad(1,0)", Kind::kContiguous, s, make_input(sa, D::f16, kV, 40),
        make_input(sb, D::f16, kV, 41), false);
    add("bf16 stride(2,1) pad(1,0)", Kind::kContiguous, s, make_input(sa, D::bf16, kV, 42),
        make_input(sb, D::bf16, kV, 43), false);
    add("f32 expanded stride(2,1) pad(1,0)", Kind::kStrided, s,
        make_input(sa, D::f32, kV, 44, L::kExpanded), make_input(sb, D::f32, kV, 45), false);
    add("f64 offset stride(2,1) pad(1,0)", Kind::kOther, s,
        make_input(sa, D::f64, kV, 48, L::kOffset), make_input(sb, D::f64, kV, 49, L::kOffset),
        true);
  }
  for (const ConvSpec& s :
       {ConvSpec{{0, 2, 4, 4}, {3, 2, 3, 3}}, ConvSpec{{1, 2, 4, 4}, {0, 2, 3, 3}}}) {
    auto [sa, sb] = shapes(s);
    add(s.xs[0] == 0 ? "f32 N=0" : "f32 O=0", Kind::kZeroSize, s, make_input(sa, D::f32, kV, 46),
        make_input(sb, D::f32, kV, 47), false);
  }
  return cs;
}

// ---------------- pooling ----------------
struct PoolSpec {
  Dims xs;  // [N, C, H, W] or [C, H, W]
  Dims k, stride, pad{0, 0}, dil{1, 1};
  bool count_pad = true;

  Dims st() const { return stride.empty() ? k : stride; }
  int64_t H() const { return xs[xs.size() - 2]; }
  int64_t W() const { return xs[xs.size() - 1]; }
  int64_t out(int i) const {
    const size_t j = static_cast<size_t>(i);
    const int64_t n = i == 0 ? H() : W();
    return (n + 2 * pad[j] - dil[j] * (k[j] - 1) - 1) / st()[j] + 1;
  }
  int64_t planes() const { return numel_of(Dims(xs.begin(), xs.end() - 2)); }
  Dims ys() const {
    Dims y(xs.begin(), xs.end() - 2);
    y.push_back(out(0));
    y.push_back(out(1));
    return y;
  }
  Attrs attrs(bool is_max) const {
    Attrs a;
    a.set("kernel_size", k).set("stride", stride).set("padding", pad);
    if (is_max)
      a.set("dilation", dil);
    else
      a.set("count_include_pad", AttrValue(count_pad));
    return a;
  }
};

std::vector<OpCase> max_pool_cases() {
  std::vector<OpCase> cs;
  auto add = [&](std::string name, Kind kd, const PoolSpec& s, Tensor x, bool g = false) {
    RefFn ref = [s](const std::vector<Ref>& in) {
      const Ref& x = in[0];
      Ref y = make_ref(x.dtype, s.ys()), yi = make_ref(D::i64, s.ys());
      const int64_t H = s.H(), W = s.W(), Ho = s.out(0), Wo = s.out(1);
      const Dims st = s.st();
      for (int64_t p = 0; p < s.planes(); ++p)
        for (int64_t oh = 0; oh < Ho; ++oh)
          for (int64_t ow = 0; ow < Wo; ++ow) {
            double best = 0;
            int64_t bi = -1;
            for (int64_t ki = 0; ki < s.k[0]; ++ki)
              for (int64_t kj = 0; kj < s.k[1]; ++kj) {
                const int64_t ih = oh * st[0] - s.pad[0] + ki * s.dil[0];
                const int64_t iw = ow * st[1] - s.pad[1] + kj * s.dil[1];
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                const double v = x.v[static_cast<size_t>((p * H + ih) * W + iw)];
                if (bi >= 0 && std::isnan(best)) continue;  // the first NaN wins
                if (bi < 0 || v > best || std::isnan(v)) {
                  best = v;
                  bi = ih * W + iw;
                }
              }
            const size_t o = static_cast<size_t>((p * Ho + oh) * Wo + ow);
            y.v[o] = best;
            yi.v[o] = static_cast<double>(bi);
          }
      return std::vector<Ref>{y, yi};
    };
    cs.push_back(make_case(std::move(name), kd, {x}, s.attrs(true), ref, g));
  };
  const Values dv{-2, 2, 0, false, true};  // distinct: no ties for gradcheck
  PoolSpec basic{{1, 2, 4, 4}, {2, 2}, {2, 2}};
  PoolSpec padded{{2, 1, 5, 5}, {3, 3}, {2, 2}, {1, 1}};
  PoolSpec dilated{{1, 2, 5, 6}, {2, 2}, {1, 1}, {1, 0}, {2, 2}};
  PoolSpec unbatched{{2, 4, 5}, {2, 3}, {1, 2}};
  PoolSpec dflt{{1, 1, 4, 6}, {2, 3}, {}};
  add("f32 k2 s2", Kind::kContiguous, basic, make_input(basic.xs, D::f32, dv, 1));
  add("f64 k3 s2 p1", Kind::kContiguous, padded, make_input(padded.xs, D::f64, dv, 2), true);
  add("f64 k2 dilation 2 p(1,0)", Kind::kContiguous, dilated, make_input(dilated.xs, D::f64, dv, 3),
      true);
  add("f64 [C,H,W] k(2,3) s(1,2)", Kind::kContiguous, unbatched,
      make_input(unbatched.xs, D::f64, dv, 4), true);
  add("f64 empty stride = kernel", Kind::kContiguous, dflt, make_input(dflt.xs, D::f64, dv, 5),
      true);
  add("f64 transposed k3 s2 p1", Kind::kStrided, padded,
      make_input(padded.xs, D::f64, dv, 6, L::kTransposed), true);
  add("f64 sliced [C,H,W]", Kind::kStrided, unbatched,
      make_input(unbatched.xs, D::f64, dv, 7, L::kSliced), true);
  add("f32 expanded k2 s2", Kind::kStrided, PoolSpec{{3, 2, 4, 4}, {2, 2}, {2, 2}},
      make_input({3, 2, 4, 4}, D::f32, dv, 8, L::kExpanded));
  add("f64 offset k3 s2 p1", Kind::kOther, padded,
      make_input(padded.xs, D::f64, dv, 13, L::kOffset), true);
  add("i64 ties k2 s1", Kind::kOther, PoolSpec{{1, 1, 4, 4}, {2, 2}, {1, 1}},
      make_input({1, 1, 4, 4}, D::i64, {-2, 2, 0, true}, 9));
  add("f16 k3 s2 p1", Kind::kContiguous, padded, make_input(padded.xs, D::f16, kV, 10));
  add("bf16 k2 s2", Kind::kContiguous, basic, make_input(basic.xs, D::bf16, kV, 11));
  {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    std::vector<double> v(16, 0.0);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i % 5);
    v[5] = nan;
    add("f32 NaN propagates", Kind::kOther, PoolSpec{{1, 1, 4, 4}, {2, 2}, {2, 2}},
        from_doubles(v, {1, 1, 4, 4}, D::f32));
  }
  add("f32 N=0", Kind::kZeroSize, PoolSpec{{0, 2, 4, 4}, {2, 2}, {2, 2}},
      make_input({0, 2, 4, 4}, D::f32, kV, 12));
  return cs;
}

// avg_pool2d window of (oh, ow): clipped bounds and divisor (PyTorch's rule).
struct Win {
  int64_t h0, h1, w0, w1, div;
};
Win avg_window(const PoolSpec& s, int64_t oh, int64_t ow) {
  const Dims st = s.st();
  int64_t h0 = oh * st[0] - s.pad[0], w0 = ow * st[1] - s.pad[1];
  int64_t h1 = std::min(h0 + s.k[0], s.H() + s.pad[0]);
  int64_t w1 = std::min(w0 + s.k[1], s.W() + s.pad[1]);
  const int64_t padded = (h1 - h0) * (w1 - w0);
  h0 = std::max<int64_t>(h0, 0);
  w0 = std::max<int64_t>(w0, 0);
  h1 = std::min(h1, s.H());
  w1 = std::min(w1, s.W());
  return {h0, h1, w0, w1, s.count_pad ? padded : (h1 - h0) * (w1 - w0)};
}

std::vector<OpCase> avg_family(bool grad_op) {
  std::vector<OpCase> cs;
  auto add = [&](std::string name, Kind kd, const PoolSpec& s, DType dt, uint64_t seed,
                 Layout l = Layout::kContiguous, bool g = false) {
    Attrs at = s.attrs(false);
    if (grad_op) at.set("input_shape", s.xs);
    Tensor in = make_input(grad_op ? s.ys() : s.xs, dt, kV, seed, l);
    RefFn ref = [s, grad_op](const std::vector<Ref>& in) {
      const Ref& a = in[0];
      Ref o = make_ref(a.dtype, grad_op ? s.xs : s.ys());
      const int64_t H = s.H(), W = s.W(), Ho = s.out(0), Wo = s.out(1);
      for (int64_t p = 0; p < s.planes(); ++p)
        for (int64_t oh = 0; oh < Ho; ++oh)
          for (int64_t ow = 0; ow < Wo; ++ow) {
            const Win w = avg_window(s, oh, ow);
            const size_t yl = static_cast<size_t>((p * Ho + oh) * Wo + ow);
            for (int64_t ih = w.h0; ih < w.h1; ++ih)
              for (int64_t iw = w.w0; iw < w.w1; ++iw) {
                const size_t xl = static_cast<size_t>((p * H + ih) * W + iw);
                if (grad_op)
                  o.v[xl] += a.v[yl] / static_cast<double>(w.div);
                else
                  o.v[yl] += a.v[xl] / static_cast<double>(w.div);
              }
          }
      return std::vector<Ref>{o};
    };
    cs.push_back(make_case(std::move(name), kd, {in}, at, ref, g));
  };
  PoolSpec basic{{1, 2, 4, 4}, {2, 2}, {2, 2}};
  PoolSpec padded{{2, 1, 5, 5}, {3, 3}, {2, 2}, {1, 1}};
  PoolSpec excl = padded;
  excl.count_pad = false;
  PoolSpec uneven{{1, 2, 5, 7}, {2, 3}, {2, 2}, {1, 1}};
  uneven.count_pad = false;
  PoolSpec unbatched{{2, 4, 5}, {2, 3}, {1, 2}};
  PoolSpec dflt{{1, 1, 4, 6}, {2, 3}, {}};
  add("f32 k2 s2", Kind::kContiguous, basic, D::f32, 1);
  add("f64 k3 s2 p1 count_include_pad", Kind::kContiguous, padded, D::f64, 2, L::kContiguous, true);
  add("f64 k3 s2 p1 exclude pad", Kind::kContiguous, excl, D::f64, 3, L::kContiguous, true);
  add("f64 k(2,3) s2 p1 exclude pad", Kind::kContiguous, uneven, D::f64, 4, L::kContiguous, true);
  add("f64 [C,H,W] k(2,3) s(1,2)", Kind::kContiguous, unbatched, D::f64, 5, L::kContiguous, true);
  add("f64 empty stride = kernel", Kind::kContiguous, dflt, D::f64, 6, L::kContiguous, true);
  add("f64 transposed k3 s2 p1", Kind::kStrided, padded, D::f64, 7, L::kTransposed, true);
  add("f64 sliced exclude pad", Kind::kStrided, uneven, D::f64, 8, L::kSliced, true);
  add("f32 expanded", Kind::kStrided, PoolSpec{{3, 2, 4, 4}, {2, 2}, {2, 2}}, D::f32, 9,
      L::kExpanded);
  add("f16 k3 s2 p1", Kind::kContiguous, padded, D::f16, 10);
  add("f64 offset k3 s2 p1", Kind::kOther, padded, D::f64, 13, L::kOffset, true);
  add("f64 k3 s1 p1 on 3x3 exclude pad", Kind::kContiguous,
      PoolSpec{{1, 2, 3, 3}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, false}, D::f64, 14, L::kContiguous,
      true);
  add("bf16 k2 s2", Kind::kContiguous, basic, D::bf16, 11);
  add("f32 N=0", Kind::kZeroSize, PoolSpec{{0, 2, 4, 4}, {2, 2}, {2, 2}}, D::f32, 12);
  return cs;
}

}  // namespace

std::vector<OpCase> conv_cases(OpId op) {
  switch (op) {
    case OpId::conv2d:
    case OpId::conv2d_grad_input:
    case OpId::conv2d_grad_weight:
      return conv_family(op);
    case OpId::max_pool2d:
      return max_pool_cases();
    case OpId::avg_pool2d:
      return avg_family(false);
    case OpId::avg_pool2d_grad:
      return avg_family(true);
    default:
      return {};
  }
}

}  // namespace kiln::conformance
