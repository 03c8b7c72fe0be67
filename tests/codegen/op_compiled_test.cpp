// Compiled vs eager on every op of the op table: each runtime conformance case
// (tests/runtime/op_cases_*.cpp) runs through kiln::dispatch eagerly and through
// kiln::compile (trace, passes, fusion, executor); outputs must agree, a second
// call must reuse the plan, gradients of differentiable ops must agree
// (compiled differentiable forward and a whole compiled step with backward
// inside), and calls that fail eagerly must fail compiled with kiln::Error.
// ForwardMatchesEager runs fused kernels as LLVM machine code (a few hundred
// distinct kernels, cached on disk); the other tests use the kernel IR
// interpreter, which has the same semantics and no compile cost.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "compare.h"
#include "kiln/compile.h"
#include "kiln/kiln.h"
#include "kiln/random.h"
#include "runtime/op_cases.h"

namespace kiln {
namespace {

using conformance::OpCase;

// Value tolerance (relative = absolute) per dtype. Fused kernels compute each
// op in eager's dtype with eager's scalar definitions (LLVM: vector math within
// 4 ulp), so results agree to the last bits; reductions may be reordered.
double tolerance(DType dt) {
  switch (dt) {
    case DType::f64:
      return 1e-12;
    case DType::f32:
      return 1e-6;
    case DType::f16:
      return 1e-3;
    case DType::bf16:
      return 8e-3;
    default:
      return 0.0;
  }
}

std::string diff(const Tensor& expect, const Tensor& actual, double tol = 0) {
  return testing::diff_values(expect, actual, std::max(tol, tolerance(expect.dtype())));
}

// Reassociated f32 sums accumulate in float vector lanes (eager: in double), so
// a sum with cancellation differs by a few float roundings of its partial sums.
double reduction_tolerance(OpId op, DType dt) {
  return op_info(op).has(kReduction) && dt == DType::f32 ? 1e-5 : 0.0;
}

void expect_same(const std::vector<Tensor>& eager, const std::vector<Tensor>& compiled,
                 const std::string& what, double tol = 0) {
  ASSERT_EQ(eager.size(), compiled.size()) << what << ": number of outputs";
  for (size_t k = 0; k < eager.size(); ++k) {
    const std::string d = diff(eager[k], compiled[k], tol);
    EXPECT_EQ(d, "") << what << ", output " << k;
  }
}

std::string describe(const Tensor& t) {
  std::ostringstream os;
  os << t.dtype() << t.shape();
  if (!t.is_contiguous()) os << " strides " << t.strides();
  return os.str();
}

std::string describe_call(OpId op, const OpCase& c) {
  std::ostringstream os;
  os << op_name(op) << " case '" << c.name << "' (" << conformance::kind_name(c.kind)
     << "), inputs:";
  for (const Tensor& t : c.inputs) os << " " << describe(t);
  if (!c.attrs.empty()) os << ", attrs " << c.attrs;
  return os.str();
}

// The compiled function of one call: the inputs are its arguments.
auto compile_op(OpId op, const Attrs& attrs, bool interpret = true) {
  return compile([op, attrs](const std::vector<Tensor>& in) { return dispatch(op, in, attrs); },
                 {.warmup = 0, .name = op_name(op), .interpret_kernels = interpret});
}

// The second call's data: floating inputs x become new contiguous tensors
// 0.5 * x + 0.25 (same dtype and shape, other values and strides); others and
// wrapped numbers stay.
std::vector<Tensor> perturbed(const std::vector<Tensor>& in) {
  NoGradGuard ng;
  std::vector<Tensor> out;
  for (const Tensor& t : in) {
    const bool change = conformance::is_float_dt(t.dtype()) && !t.impl()->wrapped_number;
    out.push_back(change ? (t * 0.5 + 0.25).contiguous() : t);
  }
  return out;
}

// Sets the default generator to the seed of a random op's attrs (compiled
// random nodes take the generator's seed; offsets stay relative to it).
void seed_like(OpId op, const Attrs& attrs) {
  if (op_info(op).has(kRandom)) manual_seed(static_cast<uint64_t>(attrs.i("seed")));
}

// Fixed upstream weights, one per output (undefined for non-floating outputs).
std::vector<Tensor> weights_for(const std::vector<Tensor>& outs) {
  std::vector<Tensor> w;
  for (size_t k = 0; k < outs.size(); ++k)
    w.push_back(
        conformance::is_float_dt(outs[k].dtype())
            ? conformance::from_doubles(conformance::gen_values(outs[k].numel(), {-1, 1}, 99 + k),
                                        outs[k].shape(), outs[k].dtype())
            : Tensor());
  return w;
}

class CompiledOps : public ::testing::TestWithParam<int> {
 protected:
  OpId op() const { return static_cast<OpId>(GetParam()); }
};
class CompiledDiffOps : public CompiledOps {};     // ops without kNonDiff
class CompiledNonDiffOps : public CompiledOps {};  // ops with kNonDiff

// The ops with (or without) the kNonDiff trait. Collectives have side effects
// and no conformance cases; tests/runtime/collective_test.cpp covers them.
std::vector<int> ops_where_nondiff_is(bool nondiff) {
  std::vector<int> ids;
  for (int i = 0; i < kNumOps; ++i)
    if (op_info(static_cast<OpId>(i)).has(kNonDiff) == nondiff &&
        !op_info(static_cast<OpId>(i)).has(kCollective))
      ids.push_back(i);
  return ids;
}
std::vector<int> table_ops() {
  std::vector<int> ids;
  for (int i = 0; i < kNumOps; ++i)
    if (!op_info(static_cast<OpId>(i)).has(kCollective)) ids.push_back(i);
  return ids;
}

std::string param_name(const ::testing::TestParamInfo<int>& p) {
  return op_name(static_cast<OpId>(p.param));
}

// Verifies compiled outputs equal eager ones for every case; one trace, a second call (new data)
// served by the plan.
TEST_P(CompiledOps, ForwardMatchesEager) {
  const OpId id = op();
  std::vector<OpCase> cases = conformance::op_cases(id);
  ASSERT_FALSE(cases.empty()) << op_name(id) << " has no conformance case";
  for (const OpCase& c : cases) {
    const std::string what = describe_call(id, c);
    std::vector<Tensor> eager;
    std::string eager_error;
    seed_like(id, c.attrs);
    try {
      eager = dispatch(id, c.inputs, c.attrs);
    } catch (const Error& e) {
      eager_error = e.what();
    }
    auto f = compile_op(id, c.attrs, false);
    if (!eager_error.empty()) {
      seed_like(id, c.attrs);
      EXPECT_THROW(f(c.inputs), Error) << what << ": eager threw " << eager_error;
      continue;
    }
    std::vector<Tensor> before;
    for (const Tensor& t : c.inputs) before.push_back(t.clone());
    for (int call = 1; call <= 2; ++call) {
      const std::vector<Tensor> ins = call == 1 ? c.inputs : perturbed(c.inputs);
      if (call == 2) {
        seed_like(id, c.attrs);
        eager = dispatch(id, ins, c.attrs);
      }
      seed_like(id, c.attrs);
      std::vector<Tensor> outs;
      try {
        outs = f(ins);
      } catch (const std::exception& e) {
        ADD_FAILURE() << what << ": compiled call " << call << " threw " << e.what();
        break;
      }
      expect_same(eager, outs, str(what, ", call ", call),
                  outs.empty() ? 0.0 : reduction_tolerance(id, outs[0].dtype()));
      for (const Tensor& o : outs) EXPECT_FALSE(o.requires_grad()) << what;
      EXPECT_EQ(f.stats().traces, 1) << what;
      EXPECT_EQ(f.stats().compiled_calls, call) << what;
      if (::testing::Test::HasFailure()) {
        ADD_FAILURE() << "compiled graph of " << what << ":\n" << f.graph_text();
        return;
      }
    }
    for (size_t i = 0; i < c.inputs.size(); ++i)
      EXPECT_EQ(diff(before[i], c.inputs[i]), "") << what << ": input " << i << " was modified";
  }
}

// Verifies captured inputs (read by reference) and frozen ones (folded to constants) match eager.
TEST_P(CompiledOps, CapturedAndFrozenInputsMatchEager) {
  const OpId id = op();
  for (const OpCase& c : conformance::op_cases(id)) {
    const std::string what = describe_call(id, c);
    seed_like(id, c.attrs);
    const std::vector<Tensor> eager = dispatch(id, c.inputs, c.attrs);
    const std::vector<Tensor>& ins = c.inputs;
    const Attrs& attrs = c.attrs;
    for (bool frozen : {false, true}) {
      auto f =
          compile([&] { return dispatch(id, ins, attrs); },
                  {.freeze = frozen, .warmup = 0, .name = op_name(id), .interpret_kernels = true});
      for (int call = 1; call <= 2; ++call) {
        seed_like(id, attrs);
        expect_same(eager, f(), str(what, frozen ? ", frozen" : ", captured", ", call ", call));
      }
      EXPECT_EQ(f.stats().traces, 1) << what << ", last miss: " << f.stats().last_miss;
      if (::testing::Test::HasFailure()) {
        ADD_FAILURE() << "compiled graph of " << what << ":\n" << f.graph_text();
        return;
      }
    }
  }
}

// Verifies a non-differentiable op's compiled outputs never require grad, even from grad inputs.
TEST_P(CompiledNonDiffOps, OutputsDoNotRequireGrad) {
  const OpId id = op();
  for (OpCase& c : conformance::op_cases(id)) {
    const std::string what = describe_call(id, c);
    for (Tensor& t : c.inputs)
      if (conformance::is_float_dt(t.dtype())) t.requires_grad_();
    seed_like(id, c.attrs);
    const std::vector<Tensor> eager = dispatch(id, c.inputs, c.attrs);
    auto f = compile_op(id, c.attrs);
    seed_like(id, c.attrs);
    const std::vector<Tensor> outs = f(c.inputs);
    expect_same(eager, outs, what);
    for (const Tensor& o : outs) EXPECT_FALSE(o.requires_grad()) << what;
  }
}

// The inputs of a gradient case that take a gradient (floating, not nondiff).
std::vector<size_t> diff_inputs(OpId id, const OpCase& c) {
  std::vector<size_t> wrt;
  const OpInfo& info = op_info(id);
  for (size_t i = 0; i < c.inputs.size(); ++i)
    if (conformance::is_float_dt(c.inputs[i].dtype()) && !((info.nondiff_inputs >> i) & 1u))
      wrt.push_back(i);
  return wrt;
}

// Verifies gradients through a compiled differentiable forward equal eager gradients (grad cases).
TEST_P(CompiledDiffOps, GradientsMatchEager) {
  const OpId id = op();
  int checked = 0;
  for (OpCase& c : conformance::op_cases(id)) {
    if (!c.grad) continue;
    const std::string what = describe_call(id, c);
    const std::vector<size_t> wrt = diff_inputs(id, c);
    auto f = compile_op(id, c.attrs);
    for (int call = 1; call <= 2; ++call) {
      std::vector<Tensor> ins = call == 1 ? c.inputs : perturbed(c.inputs), xs;
      for (size_t i : wrt) {
        ins[i] = ins[i].detach().requires_grad_();
        xs.push_back(ins[i]);
      }
      const std::vector<Tensor> eager = dispatch(id, ins, c.attrs);
      const std::vector<Tensor> w = weights_for(eager);
      Tensor eloss = testing::weighted_loss(eager, w);
      ASSERT_TRUE(eloss.defined()) << what << ": no output requires grad";
      const std::vector<Tensor> eg = grad({eloss}, xs, {}, {.allow_unused = true});
      std::vector<Tensor> outs = f(ins);
      expect_same(eager, outs, str(what, ", call ", call));
      ASSERT_EQ(outs.size(), eager.size());
      for (size_t k = 0; k < outs.size(); ++k)
        EXPECT_EQ(outs[k].requires_grad(), eager[k].requires_grad()) << what << ", output " << k;
      Tensor closs = testing::weighted_loss(outs, w);
      ASSERT_TRUE(closs.defined()) << what << ": no compiled output requires grad";
      std::vector<Tensor> cg = grad({closs}, xs, {}, {.allow_unused = true});
      ASSERT_EQ(cg.size(), eg.size());
      for (size_t j = 0; j < eg.size(); ++j)
        EXPECT_EQ(diff(eg[j], cg[j]), "")
            << what << ", call " << call << ", gradient of input " << wrt[j];
      if (::testing::Test::HasFailure()) {
        ADD_FAILURE() << "compiled forward graph of " << what << ":\n" << f.graph_text();
        return;
      }
    }
    EXPECT_EQ(f.stats().traces, 1) << what;
    EXPECT_EQ(f.stats().compiled_calls, 2) << what;
    ++checked;
  }
  EXPECT_GT(checked, 0) << op_name(id) << " is differentiable but has no gradient case";
}

// True if t has a stride-0 (expanded) dim: in-place writes would overlap.
bool has_zero_stride(const Tensor& t) {
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.stride(d) == 0 && t.size(d) > 1) return true;
  return false;
}

// Verifies a compiled whole step (forward, loss, backward on captured leaves) sets eager's .grad.
TEST_P(CompiledDiffOps, WholeStepGradsMatchEager) {
  const OpId id = op();
  for (OpCase& c : conformance::op_cases(id)) {
    if (!c.grad) continue;
    const std::string what = describe_call(id, c);
    const std::vector<size_t> wrt = diff_inputs(id, c);
    // Two sets of leaves sharing the case's data (and layout): eager and compiled.
    std::vector<Tensor> eleaves, cleaves;
    for (const Tensor& t : c.inputs) {
      eleaves.push_back(t.detach());
      cleaves.push_back(t.detach());
    }
    for (size_t i : wrt) {
      eleaves[i].requires_grad_();
      cleaves[i].requires_grad_();
    }
    const Attrs attrs = c.attrs;
    const std::vector<Tensor> w = weights_for(dispatch(id, c.inputs, attrs));
    auto step = [id, &attrs, &w](const std::vector<Tensor>& leaves) {
      Tensor loss = testing::weighted_loss(dispatch(id, leaves, attrs), w);
      loss.backward();
      return loss;
    };
    auto f = compile([&] { return step(cleaves); },
                     {.warmup = 0, .name = op_name(id), .interpret_kernels = true});
    for (int call = 1; call <= 2; ++call) {
      if (call == 2) {
        // New data, written in place (the captures keep their identity); both
        // leaf sets share the case's storage, so eager sees it too.
        NoGradGuard ng;
        for (size_t i : wrt)
          if (!has_zero_stride(cleaves[i])) cleaves[i].copy_(cleaves[i] * 0.5 + 0.25);
      }
      for (Tensor& t : eleaves) t.set_grad(Tensor());
      Tensor eloss = step(eleaves);
      for (Tensor& t : cleaves) t.set_grad(Tensor());
      Tensor closs;
      try {
        closs = f();
      } catch (const std::exception& e) {
        ADD_FAILURE() << what << ": compiled step threw " << e.what();
        return;
      }
      EXPECT_EQ(diff(eloss.detach(), closs), "") << what << ", loss, call " << call;
      for (size_t i : wrt)
        EXPECT_EQ(diff(eleaves[i].grad(), cleaves[i].grad()), "")
            << what << ", call " << call << ", .grad of input " << i;
      if (::testing::Test::HasFailure()) {
        ADD_FAILURE() << "compiled step graph of " << what << ":\n" << f.graph_text();
        return;
      }
    }
    EXPECT_EQ(f.stats().traces, 1) << what << ", last miss: " << f.stats().last_miss;
    EXPECT_EQ(f.stats().compiled_calls, 2) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(OpTable, CompiledOps, ::testing::ValuesIn(table_ops()), param_name);
INSTANTIATE_TEST_SUITE_P(OpTable, CompiledDiffOps, ::testing::ValuesIn(ops_where_nondiff_is(false)),
                         param_name);
INSTANTIATE_TEST_SUITE_P(OpTable, CompiledNonDiffOps,
                         ::testing::ValuesIn(ops_where_nondiff_is(true)), param_name);

// ---------------- calls that fail ----------------

struct BadCall {
  const char* name;
  OpId op;
  std::vector<Tensor> inputs;
  Attrs attrs;
};

Tensor idx(std::vector<int64_t> v) {
  return from_vector<int64_t>(v);
}

std::vector<BadCall> bad_calls() {
  std::vector<BadCall> b;
  b.push_back({"add broadcast", OpId::add, {zeros({2, 3}), zeros({4})}, {}});
  b.push_back({"matmul shapes", OpId::matmul, {zeros({2, 3}), zeros({4, 5})}, {}});
  b.push_back({"matmul dtypes", OpId::matmul, {zeros({2, 2}), zeros({2, 2}, DType::f64)}, {}});
  b.push_back({"where non-bool", OpId::where, {zeros({2}), zeros({2}), zeros({2})}, {}});
  b.push_back({"reshape count", OpId::reshape, {zeros({2, 3})}, Attrs().set("shape", Dims{4})});
  b.push_back({"permute rank", OpId::permute, {zeros({2, 3})}, Attrs().set("dims", Dims{0})});
  b.push_back(
      {"sum dim", OpId::sum, {zeros({2, 3})}, Attrs().set("dims", Dims{2}).set("keepdim", false)});
  b.push_back({"cat shapes", OpId::cat, {zeros({2, 3}), zeros({2, 4})}, Attrs().set("dim", 0)});
  b.push_back({"conv2d rank",
               OpId::conv2d,
               {zeros({3, 4}), zeros({1, 1, 1, 1})},
               Attrs()
                   .set("stride", Dims{1, 1})
                   .set("padding", Dims{0, 0})
                   .set("dilation", Dims{1, 1})
                   .set("groups", 1)});
  b.push_back({"expand", OpId::expand, {zeros({2, 3})}, Attrs().set("shape", Dims{4, 3})});
  b.push_back({"slice dim",
               OpId::slice,
               {zeros({2, 3})},
               Attrs().set("dim", 5).set("start", 0).set("end", 1).set("step", 1)});
  // Value-dependent: the rule accepts these, the kernel rejects the index values.
  b.push_back(
      {"index_select range", OpId::index_select, {zeros({3}), idx({3})}, Attrs().set("dim", 0)});
  b.push_back({"gather range", OpId::gather, {zeros({3}), idx({0, 7})}, Attrs().set("dim", 0)});
  b.push_back({"scatter_add range",
               OpId::scatter_add,
               {zeros({3}), idx({-9}), ones({1})},
               Attrs().set("dim", 0)});
  return b;
}

// Verifies calls that raise kiln::Error eagerly raise kiln::Error compiled (same message), twice.
TEST(CompiledOpErrors, EagerErrorsAreCompiledErrors) {
  for (BadCall& b : bad_calls()) {
    std::string eager;
    try {
      dispatch(b.op, b.inputs, b.attrs);
    } catch (const Error& e) {
      eager = e.what();
    }
    ASSERT_NE(eager, "") << b.name << ": the eager call did not fail";
    auto f = compile_op(b.op, b.attrs);
    for (int call = 1; call <= 2; ++call) {
      std::string compiled;
      try {
        f(b.inputs);
      } catch (const Error& e) {
        compiled = e.what();
      }
      EXPECT_NE(compiled.find(eager), std::string::npos)
          << b.name << ", call " << call << ": eager: " << eager << "\ncompiled: " << compiled;
    }
  }
}

// Verifies a plan whose kernel fails on one call's index values raises kiln::Error and still works.
TEST(CompiledOpErrors, KernelErrorLeavesThePlanUsable) {
  auto f = compile_op(OpId::gather, Attrs().set("dim", 0));
  const Tensor x = from_vector<double>({1, 2, 3});
  EXPECT_TRUE(equal(f(std::vector<Tensor>{x, idx({2, 0})})[0], from_vector<double>({3, 1})));
  EXPECT_THROW(f(std::vector<Tensor>{x, idx({2, 3})}), Error);
  EXPECT_TRUE(equal(f(std::vector<Tensor>{x, idx({1, 1})})[0], from_vector<double>({2, 2})));
  EXPECT_EQ(f.stats().traces, 1);
  EXPECT_EQ(f.stats().compiled_calls, 3);
}

// ---------------- random ops through the default generator ----------------

// Verifies rand/randn in a compiled function give eager's draws and advance the generator alike.
TEST(CompiledRandom, GeneratorDrawsMatchEager) {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    auto fn = [dt](const Tensor& x) {
      return std::vector<Tensor>{x + rand({3, 5}, dt), randn({7}, dt) * 2, rand({2}, dt)};
    };
    auto f = compile(fn, {.warmup = 0});
    const Tensor x = ones({3, 5}, dt);
    manual_seed(2024);
    std::vector<std::vector<Tensor>> eager;
    for (int i = 0; i < 3; ++i) eager.push_back(fn(x));
    const uint64_t eager_offset = default_generator().offset;
    manual_seed(2024);
    for (int i = 0; i < 3; ++i) expect_same(eager[static_cast<size_t>(i)], f(x), str("call ", i));
    EXPECT_EQ(default_generator().offset, eager_offset);
    EXPECT_EQ(f.stats().traces, 1);
    EXPECT_EQ(f.stats().compiled_calls, 3);
  }
}

// A random primitive dispatched with an explicit seed attribute (not the
// generator's): eager draws from that seed; the tracer replaces the seed by the
// generator's at each call (tracer.cpp, record()), so the compiled draws
// differ. Disabled: a tracer limitation reported to its owner.
TEST(FixedBugs, ExplicitSeedAttributeIsKept) {
  Attrs at;
  at.set("shape", Dims{4}).set("dtype", DType::f32).set("seed", AttrValue(int64_t{42}));
  at.set("offset", AttrValue(int64_t{0}));
  manual_seed(7);
  std::vector<Tensor> eager = dispatch(OpId::rand_uniform, {}, at);
  auto f = compile_op(OpId::rand_uniform, at);
  manual_seed(7);
  expect_same(eager, f(std::vector<Tensor>{}), "rand_uniform seed 42 under manual_seed(7)");
}

}  // namespace
}  // namespace kiln
