// Dispatch's dense elementwise fast path (runtime/src/dense_dispatch.h)
// against the general path, which the same calls take with the fast path off:
// every elementwise op and dtype, and the calls at its boundaries (layouts,
// mixed dtypes, wrapped numbers, autograd, in-place ops, tracing, profiling).
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "dense_dispatch.h"
#include "kiln/kiln.h"
#include "kiln/profiler.h"
#include "symbolic_recorder.h"

namespace kiln {
namespace {

// The result of f, or the message of the kiln::Error it threw.
struct Outcome {
  Tensor t;
  std::string error;
};

// Runs f with the fast path on or off (restored afterwards).
Outcome run(bool fast, const std::function<Tensor()>& f) {
  const bool prev = detail::set_dense_fast_path(fast);
  Outcome o;
  try {
    o.t = f();
  } catch (const Error& e) {
    o.error = e.what();
  }
  detail::set_dense_fast_path(prev);
  return o;
}

// Both paths give the same error, or a result of the same dtype, shape, bytes
// (NaNs included) and autograd state; the fast path's result is contiguous.
void expect_same(const std::function<Tensor()>& f, const std::string& what) {
  const Outcome fast = run(true, f), general = run(false, f);
  ASSERT_EQ(fast.error, general.error) << what;
  if (!general.error.empty()) return;
  EXPECT_EQ(fast.t.dtype(), general.t.dtype()) << what;
  ASSERT_EQ(fast.t.shape(), general.t.shape()) << what;
  EXPECT_TRUE(fast.t.is_contiguous()) << what;
  EXPECT_EQ(fast.t.requires_grad(), general.t.requires_grad()) << what;
  ASSERT_EQ(fast.t.grad_fn() == nullptr, general.t.grad_fn() == nullptr) << what;
  if (general.t.grad_fn()) {
    EXPECT_EQ(fast.t.grad_fn()->name(), general.t.grad_fn()->name()) << what;
  }
  if (fast.t.dtype() != general.t.dtype()) return;
  const Tensor a = fast.t.detach().contiguous(), b = general.t.detach().contiguous();
  EXPECT_EQ(0, std::memcmp(a.data_ptr(), b.data_ptr(), a.numel() * a.element_size())) << what;
}

// Small values of every sign the dtype holds (u8: non-negative; bool: mixed),
// different per seed, a zero among them.
Tensor values(const Dims& shape, DType dt, int seed) {
  const int64_t n = numel_of(shape);
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double x = static_cast<double>((i * 7 + seed * 3) % 9) - 4;  // -4 .. 4
    if (dt == DType::u8) x += 4;
    if (dt == DType::b8) x = (i + seed) % 3 != 0;
    if (is_floating(dt)) x = x * 0.37 + 0.05 * seed;
    v[static_cast<size_t>(i)] = x;
  }
  return from_vector(v, shape).to(dt);
}

const DType kDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                         DType::i64, DType::i32, DType::u8,  DType::b8};

std::string name_of(OpId op, DType dt, const Dims& shape) {
  return str(op_name(op), " ", dt, " ", shape);
}

TEST(DenseDispatch, EveryElementwiseOpAndDtypeMatchesTheGeneralPath) {
  const Dims shapes[] = {{}, {0}, {5}, {2, 3}, {4, 1, 3}};
  int ops = 0;
  for (int i = 0; i < kNumOps; ++i) {
    const OpId op = static_cast<OpId>(i);
    const OpInfo& info = op_info(op);
    if (!info.has(kElementwise) || info.arity < 1 || info.arity > 2) continue;
    ++ops;
    for (DType dt : kDTypes)
      for (const Dims& shape : shapes) {
        const Tensor a = values(shape, dt, 1), b = values(shape, dt, 2);
        const std::string what = name_of(op, dt, shape);
        if (info.arity == 1) {
          expect_same([&] { return dispatch1(op, {a}); }, what);
          expect_same([&] { return detail::dispatch_elementwise(op, a); }, what);
          expect_same([&] { return dispatch(op, std::span<const Tensor>(&a, 1))[0]; }, what);
        } else {
          expect_same([&] { return dispatch1(op, {a, b}); }, what);
          expect_same([&] { return detail::dispatch_elementwise(op, a, b); }, what);
          expect_same([&] { return detail::dispatch_elementwise(op, a, a); }, what + " (a, a)");
        }
      }
  }
  EXPECT_GE(ops, 30);  // the unary and binary families
}

// Same shapes but layouts the fast path must not read as dense, and offsets it must.
TEST(DenseDispatch, LayoutsAtTheBoundary) {
  const Tensor m = values({4, 6}, DType::f32, 1), n = values({4, 6}, DType::f32, 2);
  const Tensor mt = values({6, 4}, DType::f32, 3).t();  // [4, 6], transposed
  const Tensor row = values({1, 6}, DType::f32, 4);
  const std::vector<std::pair<std::string, std::pair<Tensor, Tensor>>> cases = {
      {"transposed", {m, mt}},
      {"transposed first", {mt, m}},
      {"expanded (stride 0)", {row.expand({4, 6}), m}},
      {"column slice", {m.narrow(1, 1, 3), n.narrow(1, 2, 3)}},
      {"row slice (offset, contiguous)", {m.narrow(0, 1, 2), n.narrow(0, 2, 2)}},
      {"selected row (offset)", {m.select(0, 3), n.select(0, 1)}},
      {"size-1 dim with any stride", {as_strided(m, {4, 1}, {1, 99}, 2), n.narrow(1, 0, 1)}},
      {"broadcast", {m, row}},
      {"0-d and 1-d", {values({}, DType::f32, 1), values({6}, DType::f32, 2)}},
      {"0-size", {values({0, 6}, DType::f32, 1), values({0, 6}, DType::f32, 2)}},
      {"0-size non-contiguous", {values({6, 0}, DType::f32, 1).t(), values({0, 6}, DType::f32, 2)}},
  };
  for (const auto& [what, ab] : cases) {
    const auto& [a, b] = ab;
    expect_same([&] { return add(a, b); }, what);
    expect_same([&] { return mul(b, a); }, what);
    expect_same([&] { return lt(a, b); }, what);
    expect_same([&] { return exp(a); }, what);
    expect_same([&] { return neg(b); }, what);
  }
}

TEST(DenseDispatch, MixedDtypesTakeTheGeneralPath) {
  for (DType da : kDTypes)
    for (DType db : kDTypes) {
      const Tensor a = values({3, 2}, da, 1), b = values({3, 2}, db, 2);
      const std::string what = str(da, " with ", db);
      expect_same([&] { return add(a, b); }, what);
      expect_same([&] { return div(a, b); }, what);
      expect_same([&] { return maximum(b, a); }, what);
      expect_same([&] { return ge(a, b); }, what);
      expect_same([&] { return logical_or(a, b); }, what);
    }
}

// A Scalar operand (a wrapped 0-d number) on either side: the fast path takes
// it when it leaves the tensor's dtype as the result type, converted as the
// general path converts it.
TEST(DenseDispatch, WrappedScalars) {
  const Scalar scalars[] = {Scalar(2.5),  Scalar(int64_t{3}),  Scalar(true),
                            Scalar(-1.0), Scalar(int64_t{-2}), Scalar(1e300)};
  using Fn = std::function<Tensor(const Tensor&, const Scalar&)>;
  const std::vector<std::pair<const char*, Fn>> ops = {
      {"t + s", [](const Tensor& t, const Scalar& s) { return t + s; }},
      {"s - t", [](const Tensor& t, const Scalar& s) { return s - t; }},
      {"t * s", [](const Tensor& t, const Scalar& s) { return t * s; }},
      {"s / t", [](const Tensor& t, const Scalar& s) { return s / t; }},
      {"pow(t, s)", [](const Tensor& t, const Scalar& s) { return pow(t, s); }},
      {"maximum(s, t)", [](const Tensor& t, const Scalar& s) { return maximum(s, t); }},
      {"eq(t, s)", [](const Tensor& t, const Scalar& s) { return eq(t, s); }},
      {"lt(s, t)", [](const Tensor& t, const Scalar& s) { return lt(s, t); }},
      {"logical_and(t, s)", [](const Tensor& t, const Scalar& s) { return logical_and(t, s); }},
  };
  for (DType dt : kDTypes)
    for (const Dims& shape : {Dims{}, Dims{5}, Dims{0}})
      for (const Scalar& s : scalars) {
        if (dt == DType::u8 && s.to_double() < 0) continue;  // out of range: not this test's
        const Tensor t = values(shape, dt, 1);
        for (const auto& [name, f] : ops)
          expect_same([&] { return f(t, s); },
                      str(name, " ", dt, " ", shape, " s=", s.to_double()));
      }
  // Two wrapped numbers, and a wrapped number that is also the tensor operand.
  const Tensor w = scalar_tensor(Scalar(1.5));
  expect_same([&] { return add(w, scalar_tensor(Scalar(int64_t{2}))); }, "wrapped + wrapped");
  expect_same([&] { return add(w, w); }, "w + w");
  expect_same([&] { return exp(w); }, "exp(wrapped)");
}

TEST(DenseDispatch, AutogradMatchesTheGeneralPath) {
  for (bool fast : {true, false}) {
    SCOPED_TRACE(fast ? "fast path" : "general path");
    const bool prev = detail::set_dense_fast_path(fast);
    Tensor x = values({2, 3}, DType::f32, 1).requires_grad_();
    Tensor y = values({2, 3}, DType::f32, 2);
    Tensor z = (x * y + x * x - 1.0) / 2.0;  // y needs no gradient, x twice
    ASSERT_TRUE(z.requires_grad());
    EXPECT_EQ(z.grad_fn()->name(), "DivBackward");
    EXPECT_FALSE(lt(x, y).requires_grad());  // a bool result carries no gradient
    z.sum().backward();
    const Tensor want = (y + x.detach() * 2.0) / 2.0;
    EXPECT_TRUE(x.grad().allclose(want)) << x.grad() << " vs " << want;
    EXPECT_FALSE(y.grad().defined());
    {
      NoGradGuard ng;
      EXPECT_FALSE((x * y).requires_grad());
    }
    // Second order through the fast path's records.
    Tensor a = values({3}, DType::f64, 3).requires_grad_();
    Tensor g = grad({(a * a * a).sum()}, {a}, {}, {.create_graph = true})[0];  // 3a^2
    Tensor gg = grad({g.sum()}, {a})[0];                                       // 6a
    EXPECT_TRUE(gg.allclose(a.detach() * 6.0));
    detail::set_dense_fast_path(prev);
  }
  expect_same(
      [] {
        Tensor x = values({4}, DType::f32, 1).requires_grad_();
        return exp(x) * x + 2.0;
      },
      "forward with grad");
}

TEST(DenseDispatch, InPlaceOpsAndAliasing) {
  using Op = std::function<void(Tensor&, const Tensor&)>;
  const std::vector<std::pair<const char*, Op>> ops = {
      {"a.add_(b)", [](Tensor& a, const Tensor& b) { a.add_(b); }},
      {"a.sub_(b, 2)", [](Tensor& a, const Tensor& b) { a.sub_(b, 2); }},
      {"a.mul_(b)", [](Tensor& a, const Tensor& b) { a.mul_(b); }},
      {"a.div_(b)", [](Tensor& a, const Tensor& b) { a.div_(b); }},
      {"a.add_(a)", [](Tensor& a, const Tensor&) { a.add_(a); }},
      {"a.mul_(a)", [](Tensor& a, const Tensor&) { a.mul_(a); }},
      {"a.sub_(a.view)", [](Tensor& a, const Tensor&) { a.sub_(a.view(a.shape())); }},
      {"a.mul_(2.5)", [](Tensor& a, const Tensor&) { a.mul_(2.5); }},
      {"a.add_(1)", [](Tensor& a, const Tensor&) { a.add_(1); }},
      {"a.clamp_(-1, 1)", [](Tensor& a, const Tensor&) { a.clamp_(-1, 1); }},
  };
  for (DType dt : {DType::f32, DType::f64, DType::i64, DType::f16})
    for (const auto& [name, f] : ops) {
      const std::string what = str(name, " ", dt);
      expect_same(
          [&] {
            Tensor a = values({3, 4}, dt, 1), b = values({3, 4}, dt, 2);
            const uint32_t v = a.version();
            f(a, b);
            EXPECT_GT(a.version(), v) << what;
            return a;
          },
          what);
    }
  // The errors of in-place writes are the general path's.
  expect_same(
      [] {
        Tensor a = values({3}, DType::f32, 1).requires_grad_();
        a.add_(1.0);
        return a;
      },
      "leaf requiring grad");
  expect_same(
      [] {
        Tensor a = values({3}, DType::i64, 1);
        a.mul_(values({3}, DType::f32, 2));
        return a;
      },
      "float result into an integer tensor");
  // In place into a non-leaf that requires grad: the history moves to the
  // result (mul_ needs a's old value: the node keeps a copy of it).
  for (bool mul : {false, true})
    expect_same(
        [mul] {
          Tensor x = values({3}, DType::f32, 1).requires_grad_();
          Tensor a = x * 2.0;
          if (mul)
            a.mul_(x);
          else
            a.add_(x);
          return a;
        },
        "in place into a non-leaf");
}

// Above the grain, the fast path splits the work over the pool like the kernels.
TEST(DenseDispatch, LargeTensorsRunInChunks) {
  const Dims shape{3 * kDefaultGrain + 17};
  for (DType dt : {DType::f32, DType::i32, DType::f16}) {
    const Tensor a = values(shape, dt, 1), b = values(shape, dt, 2);
    const std::string what = str(dt);
    expect_same([&] { return add(a, b); }, what);
    expect_same([&] { return a * 3; }, what);
    expect_same([&] { return 1.5 - a; }, what);
    expect_same([&] { return gt(b, a); }, what);
    expect_same([&] { return abs(a); }, what);
  }
}

// While tracing, every call reaches the recorder; while profiling, every call
// is an op span.
TEST(DenseDispatch, TracingAndProfilingSeeEveryCall) {
  const Tensor a = values({4}, DType::f32, 1), b = values({4}, DType::f32, 2);
  {
    testing::TraceScope trace;
    Tensor c = add(a, b);
    Tensor d = exp(c) * 2.0;
    EXPECT_TRUE(c.is_symbolic());
    EXPECT_TRUE(d.is_symbolic());
    EXPECT_EQ(trace.rec.ops, (std::vector<OpId>{OpId::add, OpId::exp, OpId::mul}));
  }
  profiler::Profile p;
  Tensor c = sub(a, b);
  Tensor d = sqrt(abs(c));
  p.stop();
  std::vector<std::string> names;
  for (const profiler::Event& e : p.events())
    if (e.cat == "op") names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"sub", "abs", "sqrt"}));
}

}  // namespace
}  // namespace kiln
