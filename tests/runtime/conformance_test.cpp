// The op-table conformance suite: one parameterized test per primitive
// (0..kNumOps-1, named after the op) comparing kiln::dispatch against naive
// references (op_cases_*.cpp), gradchecking differentiable ops, plus the
// statistical and determinism checks of the random ops.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "op_cases.h"

using namespace kiln;
using namespace kiln::conformance;

namespace {

// Value tolerance per output dtype (relative, absolute); integers are exact.
void tolerance(DType dt, double scale, double& rtol, double& atol) {
  switch (dt) {
    case DType::f64:
      rtol = 1e-10;
      atol = 1e-10;
      break;
    case DType::f32:
      rtol = 1e-5;
      atol = 1e-5;
      break;
    case DType::f16:
      rtol = 2e-3;
      atol = 2e-3;
      break;
    case DType::bf16:
      rtol = 1e-2;
      atol = 1e-2;
      break;
    default:
      rtol = 0;
      atol = 0;
      return;
  }
  rtol *= scale;
  atol *= scale;
}

bool same_value(double e, double a, double rtol, double atol) {
  if (std::isnan(e) || std::isnan(a)) return std::isnan(e) && std::isnan(a);
  if (std::isinf(e) || std::isinf(a)) return e == a;
  return std::abs(a - e) <= atol + rtol * std::abs(e);
}

std::string describe(const Tensor& t) {
  std::ostringstream os;
  os << t.dtype() << t.shape();
  if (!t.is_contiguous()) os << " strides " << t.strides();
  return os.str();
}

std::string describe_call(const OpCase& c) {
  std::ostringstream os;
  os << "case '" << c.name << "' (" << kind_name(c.kind) << "), inputs:";
  for (const Tensor& t : c.inputs) os << " " << describe(t);
  if (!c.attrs.empty()) os << ", attrs " << c.attrs;
  return os.str();
}

template <typename V>
std::string head(const V& v, size_t n = 12) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < v.size() && i < n; ++i) os << (i ? ", " : "") << v[i];
  if (v.size() > n) os << ", ... (" << v.size() << " values)";
  return os.str() + "]";
}

// Compares one output with its reference: dtype and shape exactly, values
// within the dtype's tolerance (NaN matches NaN, infinities must be equal).
void expect_matches(const Ref& expect, const Tensor& actual, double scale,
                    const std::string& what) {
  EXPECT_EQ(actual.dtype(), expect.dtype) << what;
  ASSERT_EQ(actual.shape(), expect.shape) << what;
  std::vector<double> got = actual.to_vector<double>();
  double rtol, atol;
  tolerance(actual.dtype(), scale, rtol, atol);
  int bad = 0;
  std::ostringstream msg;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = convert(expect.v[i], actual.dtype());
    if (same_value(e, got[i], rtol, atol)) continue;
    if (++bad <= 5)
      msg << "\n  at " << head(unravel(static_cast<int64_t>(i), expect.shape)) << ": expected " << e
          << ", got " << got[i];
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " values differ" << msg.str()
                    << "\n  expected " << head(expect.v) << "\n  actual   " << head(got);
}

class OpTable : public ::testing::TestWithParam<int> {
 protected:
  OpId op() const { return static_cast<OpId>(GetParam()); }
  bool has_rules() const {
    const OpInfo& info = op_info(op());
    return info.infer != nullptr && info.kernel != nullptr;
  }
};

// Verifies each case's outputs (dtype, shape, values) equal the reference; inputs stay unchanged.
TEST_P(OpTable, MatchesReference) {
  ASSERT_TRUE(has_rules()) << op_name(op()) << " has no infer/kernel rule";
  std::vector<OpCase> cases = op_cases(op());
  ASSERT_FALSE(cases.empty()) << op_name(op()) << " has no conformance case";
  for (const OpCase& c : cases) {
    const std::string what = describe_call(c);
    SCOPED_TRACE(what);
    std::vector<Ref> in;
    for (const Tensor& t : c.inputs) in.push_back(to_ref(t));
    if (c.kind == Kind::kStrided) {
      bool any = false;
      for (const Tensor& t : c.inputs) any = any || !t.is_contiguous();
      EXPECT_TRUE(any) << "a strided case needs a non-contiguous input";
    }
    std::vector<Ref> expect = c.ref(in);
    std::vector<Tensor> outs;
    try {
      outs = dispatch(op(), c.inputs, c.attrs);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "dispatch threw: " << e.what();
      continue;
    }
    ASSERT_EQ(outs.size(), expect.size());
    for (size_t k = 0; k < outs.size(); ++k)
      expect_matches(expect[k], outs[k], c.tol_scale, "output " + std::to_string(k));
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      std::vector<double> now = c.inputs[i].to_vector<double>();
      bool same = now.size() == in[i].v.size();
      for (size_t j = 0; same && j < now.size(); ++j)
        same = now[j] == in[i].v[j] || (std::isnan(now[j]) && std::isnan(in[i].v[j]));
      EXPECT_TRUE(same) << "input " << i << " was modified";
    }
  }
}

// Verifies gradcheck passes on the f64 cases; kNonDiff ops' outputs never require grad.
TEST_P(OpTable, Gradients) {
  ASSERT_TRUE(has_rules()) << op_name(op()) << " has no infer/kernel rule";
  const OpInfo& info = op_info(op());
  std::vector<OpCase> cases = op_cases(op());
  const OpId id = op();
  if (info.has(kNonDiff)) {
    for (OpCase& c : cases) {
      SCOPED_TRACE(describe_call(c));
      for (Tensor& t : c.inputs)
        if (is_float_dt(t.dtype())) t.requires_grad_();
      std::vector<Tensor> outs;
      try {
        outs = dispatch(id, c.inputs, c.attrs);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "dispatch threw: " << e.what();
        continue;
      }
      for (const Tensor& o : outs) EXPECT_FALSE(o.requires_grad());
    }
    return;
  }
  int checked = 0;
  for (OpCase& c : cases) {
    if (!c.grad) continue;
    const std::string what = describe_call(c);
    SCOPED_TRACE(what);
    bool any = false;
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      Tensor& t = c.inputs[i];
      if (!is_float_dt(t.dtype())) continue;
      ASSERT_EQ(t.dtype(), DType::f64) << "gradcheck cases must use f64 inputs";
      if ((info.nondiff_inputs >> i) & 1u) continue;
      t.requires_grad_();
      any = true;
    }
    ASSERT_TRUE(any) << "no differentiable input";
    const Attrs attrs = c.attrs;
    auto fn = [id, attrs](const std::vector<Tensor>& in) { return dispatch(id, in, attrs); };
    std::string report;
    try {
      report = gradcheck(fn, c.inputs);
    } catch (const std::exception& e) {
      report = std::string("threw: ") + e.what();
    }
    EXPECT_EQ(report, "") << what;
    // A differentiable op's floating outputs require grad when an input does.
    for (const Tensor& o : fn(c.inputs)) {
      if (is_float_dt(o.dtype())) {
        EXPECT_TRUE(o.requires_grad());
      }
    }
    ++checked;
  }
  EXPECT_GT(checked, 0) << op_name(op()) << " is differentiable but has no gradcheck case";
}

// Every op but the collectives (side effects; tests/runtime/collective_test.cpp).
std::vector<int> table_ops() {
  std::vector<int> ids;
  for (int i = 0; i < kNumOps; ++i)
    if (!op_info(static_cast<OpId>(i)).has(kCollective)) ids.push_back(i);
  return ids;
}

INSTANTIATE_TEST_SUITE_P(Conformance, OpTable, ::testing::ValuesIn(table_ops()),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return std::string(op_name(static_cast<OpId>(p.param)));
                         });

// The differentiable ops (no kNonDiff trait), for the second-order suite.
std::vector<int> differentiable_ops() {
  std::vector<int> ids;
  for (int i = 0; i < kNumOps; ++i)
    if (!op_info(static_cast<OpId>(i)).has(kNonDiff) &&
        !op_info(static_cast<OpId>(i)).has(kCollective))
      ids.push_back(i);
  return ids;
}

class DiffOpTable : public OpTable {};

// Verifies second derivatives: gradcheck of kiln::grad(op, create_graph) on 2 f64 cases per op.
TEST_P(DiffOpTable, SecondOrderGradients) {
  ASSERT_TRUE(has_rules()) << op_name(op()) << " has no infer/kernel rule";
  const OpInfo& info = op_info(op());
  const OpId id = op();
  int checked = 0;
  for (OpCase& c : op_cases(id)) {
    if (!c.grad || checked >= 2) continue;
    const std::string what = describe_call(c);
    SCOPED_TRACE(what);
    std::vector<size_t> wrt;
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      if (c.inputs[i].dtype() != DType::f64 || ((info.nondiff_inputs >> i) & 1u)) continue;
      c.inputs[i].requires_grad_();
      wrt.push_back(i);
    }
    // Fixed upstream gradients (weights) for the floating outputs.
    std::vector<Tensor> weights;
    for (const Tensor& o : dispatch(id, c.inputs, c.attrs))
      weights.push_back(is_float_dt(o.dtype())
                            ? from_doubles(gen_values(o.numel(), {-1, 1}, 99), o.shape(), o.dtype())
                            : Tensor());
    const Attrs attrs = c.attrs;
    auto first = [id, attrs, wrt, weights](const std::vector<Tensor>& in) {
      GradModeGuard g(true);
      std::vector<Tensor> outs = dispatch(id, in, attrs), ys, ws, xs;
      for (size_t k = 0; k < outs.size(); ++k) {
        if (!weights[k].defined() || !outs[k].requires_grad()) continue;
        ys.push_back(outs[k]);
        ws.push_back(weights[k]);
      }
      for (size_t i : wrt) xs.push_back(in[i]);
      if (ys.empty()) return std::vector<Tensor>(xs.size());
      return grad(ys, xs, ws, {.retain_graph = true, .create_graph = true, .allow_unused = true});
    };
    std::string report;
    try {
      report = gradcheck(first, c.inputs);
    } catch (const std::exception& e) {
      report = std::string("threw: ") + e.what();
    }
    EXPECT_EQ(report, "") << what;
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

INSTANTIATE_TEST_SUITE_P(Conformance, DiffOpTable, ::testing::ValuesIn(differentiable_ops()),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return std::string(op_name(static_cast<OpId>(p.param)));
                         });

// ---------------- random ops ----------------

Tensor random_op(bool normal, const Dims& shape, DType dt, int64_t seed, int64_t offset) {
  Attrs at;
  at.set("shape", shape).set("dtype", dt).set("seed", AttrValue(seed));
  at.set("offset", AttrValue(offset));
  return dispatch1(normal ? OpId::rand_normal : OpId::rand_uniform, std::span<const Tensor>(), at);
}

void moments(const std::vector<double>& v, double& mean, double& var) {
  mean = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  var = 0;
  for (double x : v) var += (x - mean) * (x - mean);
  var /= static_cast<double>(v.size() - 1);
}

// Verifies rand_uniform draws lie in [0, 1) with the mean and variance of U(0, 1), per dtype.
TEST(ConformanceRandom, UniformStatistics) {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    std::vector<double> v = random_op(false, {20000}, dt, 1234, 0).to_vector<double>();
    for (double x : v) ASSERT_TRUE(x >= 0.0 && x < 1.0) << x;
    double mean, var;
    moments(v, mean, var);
    EXPECT_NEAR(mean, 0.5, 0.01);
    EXPECT_NEAR(var, 1.0 / 12.0, 0.004);
  }
}

// Verifies rand_normal draws are finite with the mean and variance of N(0, 1), per dtype.
TEST(ConformanceRandom, NormalStatistics) {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    std::vector<double> v = random_op(true, {20000}, dt, 99, 0).to_vector<double>();
    for (double x : v) ASSERT_TRUE(std::isfinite(x)) << x;
    double mean, var;
    moments(v, mean, var);
    EXPECT_NEAR(mean, 0.0, 0.03);
    EXPECT_NEAR(var, 1.0, 0.05);
  }
}

// Verifies random ops are pure in (seed, offset); an offset of k words shifts the stream by k.
TEST(ConformanceRandom, Determinism) {
  for (bool normal : {false, true}) {
    SCOPED_TRACE(normal ? "rand_normal" : "rand_uniform");
    auto a = random_op(normal, {64}, DType::f32, 5, 0).to_vector<double>();
    auto b = random_op(normal, {64}, DType::f32, 5, 0).to_vector<double>();
    auto c = random_op(normal, {64}, DType::f32, 6, 0).to_vector<double>();
    EXPECT_EQ(a, b);
    EXPECT_NE(a, c);
    // f32 uniform uses 1 word per element, normal 2: offset 8 skips 8 / W elements.
    const size_t w = normal ? 2 : 1;
    auto s = random_op(normal, {64}, DType::f32, 5, 8).to_vector<double>();
    for (size_t i = 0; i + 8 / w < a.size(); ++i) EXPECT_EQ(s[i], a[i + 8 / w]) << i;
  }
}

// Verifies rand()/randn() follow manual_seed and advance the default generator's offset.
TEST(ConformanceRandom, DefaultGenerator) {
  manual_seed(77);
  std::vector<double> a = rand({10}).to_vector<double>();
  std::vector<double> b = rand({10}).to_vector<double>();
  std::vector<double> n = randn({3}, DType::f64).to_vector<double>();
  EXPECT_NE(a, b);
  for (int64_t i = 0; i < 10; ++i) {
    EXPECT_EQ(a[static_cast<size_t>(i)], random_reference(false, DType::f32, 77, 0, i)) << i;
    EXPECT_EQ(b[static_cast<size_t>(i)], random_reference(false, DType::f32, 77, 12, i)) << i;
  }
  for (int64_t i = 0; i < 3; ++i)
    EXPECT_NEAR(n[static_cast<size_t>(i)], random_reference(true, DType::f64, 77, 24, i), 1e-12);
  manual_seed(77);
  EXPECT_EQ(rand({10}).to_vector<double>(), a);
}

}  // namespace
