// Compiled vs eager on 8000 seeded random programs (random_program.h):
// elementwise ops with broadcasting, where, casts, reductions, movement, matmul,
// softmax / log_softmax / layer_norm, constants, identity chains, repeated and
// commuted steps and random draws, over 1-4 small inputs (some strided). Each
// program runs eagerly and through kiln::compile twice (the traced call, then a
// planned call on fresh data), with its inputs as arguments, captured, or
// captured and frozen; every 4th program (f64) compares gradients w.r.t. its
// inputs instead, through the compiled differentiable forward or as a whole
// step with backward inside the compiled function (.grad of captured leaves).
//
// Fused kernels run through the kernel IR interpreter (exact eager semantics,
// no compile cost), except every 61st program (all modes), which runs through
// the LLVM JIT with eager's reduction order (CompileOptions::reassociate =
// false) so values still compare exactly; KILN_RANDOM_LLVM=1 sends every
// program through LLVM.
//
// A failure prints the program, its seed, the mode and the compiled graph. To
// rerun one program: KILN_RANDOM_PROGRAM=<seed> ./codegen_tests
// --gtest_filter='*RandomPrograms*'
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <sstream>

#include "codegen/random_check.h"
#include "kiln/compile.h"
#include "kiln/kiln.h"

namespace kiln::testing {
namespace {

constexpr int kShards = 8;
#ifdef KILN_TEST_SANITIZED
constexpr int kProgramsPerShard = 400;  // 3200 under ASan+UBSan (the Release run does 8000)
#else
constexpr int kProgramsPerShard = 1000;  // 8000 programs in all
#endif
constexpr int kMaxReportsPerShard = 3;

// Every 4th program checks gradients (a third of those as a whole step).
Mode mode_of(uint64_t seed) {
  if (seed % 4 == 3) return (seed / 4) % 3 == 0 ? Mode::kGradStep : Mode::kGradForward;
  switch ((seed / 4) % 4) {
    case 2:
      return Mode::kCaptured;
    case 3:
      return Mode::kFrozen;
    default:
      return Mode::kArgs;
  }
}

// One program under one mode: which inputs are captured, eager and compiled runs.
class Harness {
 public:
  Harness(const Program& p, Mode mode) : p_(p), mode_(mode), low_(p.lowest_float()) {
    Rng rng(p.seed + 31);
    for (size_t k = 0; k < p.inputs.size(); ++k) {
      bool c = false;
      if (mode == Mode::kGradStep)
        c = true;
      else if (mode != Mode::kArgs)
        c = rng.chance(0.5);
      captured_.push_back(c);
    }
    NoGradGuard ng;
    std::vector<Tensor> outs = p.run(p.inputs);
    Rng wr(p.seed + 977);
    for (const Tensor& o : outs)
      w_.push_back(is_floating(o.dtype()) ? random_tensor(wr, o.dtype(), o.shape()) : Tensor());
  }

  // Runs call `call` (1: the generator's data, 2: fresh data) eagerly and
  // compiled; "" if they agree.
  template <typename F>
  std::string compare(F& f, int call) {
    set_data(call == 1 ? p_.inputs : p_.other_inputs(static_cast<uint64_t>(call)));
    auto [eager, eager_err] =
        run([&] { return mode_ == Mode::kGradStep ? step(eleaves_) : p_.run(eleaves_); });
    if (!eager_err.empty()) return str("the eager run threw: ", eager_err);
    auto [compiled, err] =
        run([&] { return mode_ == Mode::kGradStep ? f(std::vector<Tensor>{}) : f(args_); });
    if (!err.empty()) return str("the compiled run threw: ", err);
    if (eager.size() != compiled.size())
      return str("eager returned ", eager.size(), " outputs, compiled ", compiled.size());
    for (size_t k = 0; k < eager.size(); ++k) {
      std::string d = diff_at(eager[k], compiled[k], low_);
      if (!d.empty()) return str("output ", k, ": ", d);
      if (eager[k].requires_grad() != compiled[k].requires_grad())
        return str("output ", k, ": requires_grad is ", eager[k].requires_grad(), " eagerly, ",
                   compiled[k].requires_grad(), " compiled");
    }
    if (mode_ == Mode::kGradStep) {
      for (size_t k = 0; k < eleaves_.size(); ++k) {
        if (!eleaves_[k].requires_grad()) continue;
        std::string d = diff_at(eleaves_[k].grad(), cleaves_[k].grad(), low_);
        if (!d.empty()) return str(".grad of input ", k, ": ", d);
      }
    }
    if (mode_ == Mode::kGradForward) return compare_grads(eager, compiled);
    return "";
  }

  // The function to compile.
  auto body() {
    return [this](const std::vector<Tensor>& args) {
      if (mode_ == Mode::kGradStep) return step(cleaves_);
      std::vector<Tensor> in = cleaves_;
      for (size_t k = 0, a = 0; k < in.size(); ++k)
        if (!captured_[k]) in[k] = args[a++];
      return p_.run(in);
    };
  }
  bool frozen() const { return mode_ == Mode::kFrozen; }
  std::string captured_text() const {
    std::string s;
    for (size_t k = 0; k < captured_.size(); ++k)
      if (captured_[k]) s += str(" x", k);
    return s.empty() ? "" : str(", captured:", s);
  }

 private:
  const Program& p_;
  Mode mode_;
  DType low_;
  std::vector<bool> captured_;
  std::vector<Tensor> w_;
  std::vector<Tensor> eleaves_;  // the eager run's inputs
  std::vector<Tensor> cleaves_;  // captured tensors of the compiled run (the same impls every call)
  std::vector<Tensor> args_;     // arguments of the compiled run

  bool grad_mode() const { return mode_ == Mode::kGradForward || mode_ == Mode::kGradStep; }

  // Fills the inputs with `data`: captures keep their identity (copy_), except
  // frozen ones, which keep their first data too.
  void set_data(const std::vector<Tensor>& data) {
    const bool first = cleaves_.empty();
    args_.clear();
    for (size_t k = 0; k < data.size(); ++k) {
      const bool leaf = grad_mode() && is_floating(data[k].dtype());
      if (first) {
        eleaves_.push_back(data[k].detach());
        cleaves_.push_back(captured_[k] ? data[k].clone() : data[k].detach());
        if (leaf) {
          eleaves_[k].requires_grad_();
          cleaves_[k].requires_grad_();
        }
      } else {
        NoGradGuard ng;
        if (captured_[k] && !frozen()) cleaves_[k].copy_(data[k]);
        if (!captured_[k]) {
          cleaves_[k] = data[k].detach();
          if (leaf) cleaves_[k].requires_grad_();
        }
        eleaves_[k] = cleaves_[k].detach().clone();
        if (!captured_[k]) eleaves_[k] = cleaves_[k].detach();
        if (leaf) eleaves_[k].requires_grad_();
      }
      if (mode_ == Mode::kGradStep) {
        eleaves_[k].set_grad(Tensor());
        cleaves_[k].set_grad(Tensor());
      }
      if (!captured_[k]) args_.push_back(cleaves_[k]);
    }
  }

  // The whole step: forward, weighted loss, backward into the leaves' .grad.
  std::vector<Tensor> step(const std::vector<Tensor>& leaves) {
    std::vector<Tensor> outs = p_.run(leaves);
    Tensor loss = testing::weighted_loss(outs, w_);
    if (loss.defined()) loss.backward();
    std::vector<Tensor> r;
    for (const Tensor& o : outs) r.push_back(o.requires_grad() ? o.detach() : o);
    if (loss.defined()) r.push_back(loss.detach());
    return r;
  }

  template <typename G>
  std::pair<std::vector<Tensor>, std::string> run(G g) {
    if (p_.uses_rng) manual_seed(p_.seed);
    try {
      return {g(), ""};
    } catch (const std::exception& e) {
      return {{}, e.what()};
    }
  }

  std::string compare_grads(const std::vector<Tensor>& eager, const std::vector<Tensor>& compiled) {
    Tensor eloss = testing::weighted_loss(eager, w_), closs = testing::weighted_loss(compiled, w_);
    if (!eloss.defined()) return "";
    if (!closs.defined()) return "no compiled output requires grad";
    std::vector<Tensor> ex, cx;
    for (size_t k = 0; k < eleaves_.size(); ++k)
      if (eleaves_[k].requires_grad()) {
        ex.push_back(eleaves_[k]);
        cx.push_back(cleaves_[k]);
      }
    auto [eg, eerr] = run([&] { return grad({eloss}, ex, {}, {.allow_unused = true}); });
    if (!eerr.empty()) return str("eager backward threw: ", eerr);
    auto [cg, cerr] = run([&] { return grad({closs}, cx, {}, {.allow_unused = true}); });
    if (!cerr.empty()) return str("compiled backward threw: ", cerr);
    return diff_gradients(eg, cg, ex, low_);
  }
};

// Generates, runs and compares program `seed`.
Outcome check_program(uint64_t seed) {
  const Mode mode = mode_of(seed);
  const Program p = generate_program(seed, mode == Mode::kGradForward || mode == Mode::kGradStep);
  if (!p.gen_errors.empty())
    return {str("kiln rejected a generated step eagerly: ", p.gen_errors.front(), "\n", p.print())};
  Harness h(p, mode);
  const bool llvm = seed % 61 == 0 || std::getenv("KILN_RANDOM_LLVM") != nullptr;
  auto f = compile(h.body(), {.freeze = h.frozen(),
                              .warmup = 0,
                              .name = str("program", seed),
                              .interpret_kernels = !llvm,
                              .reassociate = false});
  std::string what;
  for (int call = 1; call <= 2 && what.empty(); ++call) {
    what = h.compare(f, call);
    if (!what.empty()) what = str("call ", call, ", ", what);
  }
  if (what.empty() && (f.stats().traces != 1 || f.stats().compiled_calls != 2))
    what = str("expected 1 trace and 2 compiled calls, got ", f.stats().traces, " and ",
               f.stats().compiled_calls, " (last miss: ", f.stats().last_miss, ")");
  if (what.empty()) return {};
  return {str(what, "\nmode: ", mode_name(mode), h.captured_text(),
              llvm ? ", fused kernels by LLVM" : ", fused kernels interpreted", "\n", p.print(),
              "compiled graph:\n", f.graph_text(), "rerun: KILN_RANDOM_PROGRAM=", seed,
              " ./codegen_tests --gtest_filter='*RandomPrograms*'\n")};
}

class RandomPrograms : public ::testing::TestWithParam<int> {};

// Verifies 1000 random programs per shard give eager's outputs (and gradients) when compiled.
TEST_P(RandomPrograms, CompiledMatchesEager) {
  if (one_program() && GetParam() != 0) return;  // shard 0 runs just that program
  const uint64_t first = static_cast<uint64_t>(GetParam()) * kProgramsPerShard;
  // Unfused references: the fused eager composites are checked against their
  // primitives in tests/runtime/eager_fusion_test.cpp.
  check_programs(first, first + kProgramsPerShard, kMaxReportsPerShard, check_program);
}

INSTANTIATE_TEST_SUITE_P(Shard, RandomPrograms, ::testing::Range(0, kShards));

// ---------------- reproducers of bugs outside passes/ ----------------

// Bug in kiln::grad (runtime/src/autograd.cpp): a leaf that is both an output
// and an input of grad() and feeds no live node gets no gradient. grad() looks
// inputs up by their AccumulateGrad node, which the leaf holds only weakly: the
// node made for the lookup dies with its Edge, and the root edge then creates a
// new one that is not in the lookup table. PyTorch returns the grad_output.
TEST(FixedBugs, GradOfAFreshLeafWithRespectToItself) {
  Tensor x = ones({2}, DType::f64).requires_grad_();
  std::vector<Tensor> g;
  ASSERT_NO_THROW(g = grad({x}, {x}, {full({2}, 10.0, DType::f64)}));
  EXPECT_TRUE(equal(g[0], full({2}, 10.0, DType::f64)));
}

// The same bug seen through compile: a compiled differentiable forward that
// returns an argument unchanged (or after an eager no-op such as expand to the
// same shape) drops that result's gradient silently, because the traced
// backward (kiln::grad on the symbolic tensors) has no gradient for it.
TEST(FixedBugs, CompiledForwardReturningAnArgumentKeepsItsGradient) {
  auto fn = [](const Tensor& x, const Tensor& y) {
    return std::vector<Tensor>{x * 2, y, x.expand({2})};
  };
  auto f = compile(fn, {.warmup = 0});
  Tensor x = ones({2}, DType::f64).requires_grad_();
  Tensor y = ones({2}, DType::f64).requires_grad_();
  std::vector<Tensor> out = f(x, y);
  Tensor loss = sum(out[0]) + sum(out[1] * 3.0) + sum(out[2] * 5.0);
  std::vector<Tensor> g = grad({loss}, {x, y}, {}, {.allow_unused = true});
  ASSERT_TRUE(g[0].defined() && g[1].defined());
  EXPECT_TRUE(equal(g[0], full({2}, 7.0, DType::f64))) << g[0];  // eager: 2 + 5
  EXPECT_TRUE(equal(g[1], full({2}, 3.0, DType::f64))) << g[1];
}

// Bug in tracing (ir/src/tracer.cpp with Tensor::detach in runtime/src/tensor.cpp):
// detach() of a captured tensor inside a compiled function is a new TensorImpl
// born while tracing, so the tracer bakes the capture's data at trace time into
// the graph as a constant instead of reading the capture at each call. The
// compiled function then silently keeps using stale data (e.g. an EMA update
// reading p.detach(), or returning a parameter's detached value).
TEST(FixedBugs, DetachOfACapturedTensorReadsItsCurrentValue) {
  Tensor w = ones({2});
  auto f = compile([&](const Tensor& x) { return x + w.detach(); }, {.warmup = 0});
  EXPECT_TRUE(equal(f(zeros({2})), ones({2})));
  w.copy_(full({2}, 3.0));
  EXPECT_TRUE(equal(f(zeros({2})), full({2}, 3.0))) << f.graph_text();  // compiled: still 1
}

// Bug in codegen (codegen/driver/plan.cpp, run_plan): when the passes reduce a
// result to a graph input (x*1, neg(neg(x)), a permute and its inverse), the
// compiled function returns the argument's (or capture's) TensorImpl itself.
// Eagerly the result is a new tensor: here an in-place write to the result
// changes the argument, and a parameter's requires_grad/.grad leak into it.
TEST(FixedBugs, ResultSimplifiedToAnArgumentIsANewTensor) {
  auto f = compile([](const Tensor& x) { return neg(neg(x)) * 1.0; }, {.warmup = 0});
  Tensor x = ones({2});
  Tensor r = f(x);
  EXPECT_FALSE(r.is_same(x));
  r.add_(1.0);
  EXPECT_TRUE(equal(x, ones({2}))) << "the argument changed: " << x;
  Tensor p = ones({2}).requires_grad_();
  auto step = compile(
      [&] {
        Tensor y = neg(neg(p));
        sum(y).backward();
        return y.detach();
      },
      {.warmup = 0});
  Tensor q = step();
  EXPECT_FALSE(q.is_same(p));
  EXPECT_FALSE(q.requires_grad());
}

// Bug in tracing (ir/src/tracer.cpp, codegen/driver/compile.cpp): backward inside
// a compiled function reaching an *argument* that requires grad accumulates
// into the symbolic stand-in's .grad, which nothing binds back: the real
// argument's .grad silently stays undefined (eager: 2x). Captured leaves work.
TEST(FixedBugs, BackwardInsideReachesArgumentGrads) {
  Tensor x = from_vector<double>({1, 2, 3}).requires_grad_();
  auto f = compile(
      [](const Tensor& a) {
        Tensor loss = sum(a * a);
        loss.backward();
        return loss.detach();
      },
      {.warmup = 0});
  f(x);
  ASSERT_TRUE(x.grad().defined()) << "x.grad was not written";
  EXPECT_TRUE(equal(x.grad(), from_vector<double>({2, 4, 6})));
}

// Bug in tracing (ir/src/tracer.cpp, Tracer::add_arg) and guards
// (codegen/driver/plan.cpp, ArgSig): a wrapped-number argument (a 0-d tensor made
// from a C++ number, scalar_tensor(Scalar)) becomes a non-wrapped symbolic
// input, so the trace promotes as if it were a 0-d tensor. With a f32 0-d and a
// wrapped f64: eagerly a + b is f32 and cast(..., f64) a real cast; the trace
// thinks a + b is f64, drops the cast as a no-op, and the interpreter (running
// the kernel on the real wrapped input) returns f32. The guards also ignore the
// flag, so a plan traced for a wrapped argument serves a non-wrapped one.
TEST(FixedBugs, WrappedNumberArgumentPromotesLikeEager) {
  auto fn = [](const Tensor& a, const Tensor& b) { return cast(a + b, DType::f64); };
  auto f = compile(fn, {.warmup = 0});
  const Tensor a = full({}, 2.0f), b = scalar_tensor(Scalar(1.5));
  EXPECT_EQ(fn(a, b).dtype(), DType::f64);
  EXPECT_EQ(f(a, b).dtype(), DType::f64) << f.graph_text();  // compiled: f32
}

}  // namespace
}  // namespace kiln::testing
