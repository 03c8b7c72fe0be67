// The random-program generator (tests/codegen/random_program.h) on CUDA: each
// program is compiled with its inputs on the device (as arguments, captured,
// or captured and frozen; every 4th with f64 gradients through the compiled
// forward) and compared, call by call, with the same program run eagerly on
// the CPU, at the CPU random-graph suite's tolerances. On the emulated device
// in CI: PoCL compiles each new kernel at its first launch, so the sample is
// small (the CPU suite runs 8000 programs).
//
// Ops with no CUDA kernel are skipped only when listed in kNoCudaKernel with
// the reason; any other error is a failure. To rerun one program:
// KILN_RANDOM_PROGRAM=<seed> ./cuda_tests --gtest_filter='CudaRandomPrograms.*'
#include <array>

#include "codegen/random_check.h"
#include "kiln/compile.h"
#include "kiln/cuda.h"

namespace kiln::testing {
namespace {

#ifdef KILN_TEST_SANITIZED
constexpr uint64_t kPrograms = 12;
#else
constexpr uint64_t kPrograms = 40;
#endif
constexpr int kMaxReports = 3;

// Ops the generator may emit that have no CUDA kernel yet, with the reason.
// A program whose compiled run raises "[op] is not implemented for CUDA" for
// an op listed here is skipped (and counted); for any other op it fails.
struct NoKernel {
  const char* op;
  const char* reason;
};
// (None at present: every op the generator emits runs on CUDA.)
constexpr std::array<NoKernel, 0> kNoCudaKernel{};

// The listed reason if `error` is a listed op's "not implemented for CUDA".
const char* skip_reason(const std::string& error) {
  if (error.find("is not implemented for CUDA") == std::string::npos) return nullptr;
  for (const NoKernel& k : kNoCudaKernel)
    if (error.rfind(str("[", k.op, "]"), 0) == 0) return k.reason;
  return nullptr;
}

// Modes as on the CPU (random_check.h), but no whole step with backward inside.
Mode mode_of(uint64_t seed) {
  if (seed % 4 == 3) return Mode::kGradForward;
  return seed % 4 == 0 ? Mode::kArgs : (seed % 4 == 1 ? Mode::kCaptured : Mode::kFrozen);
}

// `t` on the device with its layout: a transposed view stays one there.
Tensor to_device(const Tensor& t) {
  if (t.is_contiguous() || t.dim() < 2 || !t.transpose(-1, -2).is_contiguous()) return t.cuda();
  return t.transpose(-1, -2).cuda().transpose(-1, -2);
}

// One program: the CPU's eager results and gradients against the compiled
// run on the device, for two calls (the traced one, then fresh data).
class DeviceHarness {
 public:
  DeviceHarness(const Program& p, Mode mode) : p_(p), mode_(mode), low_(p.lowest_float()) {
    for (size_t k = 0; k < p.inputs.size(); ++k)
      captured_.push_back(mode != Mode::kArgs && mode != Mode::kGradForward && (p.seed + k) % 2);
  }

  // The function compiled: the device inputs, captured ones by reference.
  auto body() {
    return [this](const std::vector<Tensor>& args) {
      std::vector<Tensor> in = dev_;
      for (size_t k = 0, a = 0; k < in.size(); ++k)
        if (!captured_[k]) in[k] = args[a++];
      return p_.run(in);
    };
  }

  // Call `call` (1: the generator's data, 2: fresh data, kept in frozen captures).
  template <typename F>
  Outcome compare(F& f, int call) {
    const std::vector<Tensor> data =
        call == 1 ? p_.inputs : p_.other_inputs(static_cast<uint64_t>(call));
    std::vector<Tensor> cpu(data.size()), args;
    for (size_t k = 0; k < data.size(); ++k) {
      const bool frozen_keeps = captured_[k] && mode_ == Mode::kFrozen && call > 1;
      cpu[k] = frozen_keeps ? p_.inputs[k].clone() : data[k].clone();
      if (dev_.size() <= k) {
        dev_.push_back(to_device(data[k]));
      } else if (!frozen_keeps) {
        NoGradGuard ng;
        if (captured_[k])
          dev_[k].copy_(data[k]);  // a capture keeps its identity
        else
          dev_[k] = to_device(data[k]);
      }
      if (grad_input(k)) {
        cpu[k].requires_grad_();
        if (!dev_[k].requires_grad()) dev_[k] = dev_[k].detach().requires_grad_();
      }
      if (!captured_[k]) args.push_back(dev_[k]);
    }
    std::vector<Tensor> want, got;
    if (std::string e = run([&] { want = p_.run(cpu); }); !e.empty())
      return {str("the eager CPU run threw: ", e)};
    if (std::string e = run([&] { got = f(args); }); !e.empty()) {
      if (const char* why = skip_reason(e)) return {"", why};
      return {str("the compiled CUDA run threw: ", e)};
    }
    if (want.size() != got.size())
      return {str("eager returned ", want.size(), " outputs, compiled ", got.size())};
    for (size_t k = 0; k < want.size(); ++k) {
      if (got[k].device() != Device::cuda())
        return {str("output ", k, " is on ", got[k].device(), ", not on the device")};
      if (std::string d = diff_at(want[k], got[k].detach().cpu(), low_); !d.empty())
        return {str("output ", k, ": ", d)};
    }
    return mode_ == Mode::kGradForward ? compare_grads(cpu, want, got) : Outcome{};
  }

 private:
  const Program& p_;
  Mode mode_;
  DType low_;
  std::vector<bool> captured_;
  std::vector<Tensor> dev_;  // the device inputs (captures keep their identity)

  bool grad_input(size_t k) const {
    return mode_ == Mode::kGradForward && is_floating(p_.inputs[k].dtype());
  }
  template <typename G>
  std::string run(G g) {
    if (p_.uses_rng) manual_seed(p_.seed);  // a CUDA draw equals the CPU's
    try {
      g();
      return "";
    } catch (const std::exception& e) {
      return e.what();
    }
  }

  // Gradients of sum(out * w) w.r.t. the float inputs, eager CPU vs compiled CUDA.
  Outcome compare_grads(const std::vector<Tensor>& cpu, const std::vector<Tensor>& want,
                        const std::vector<Tensor>& got) {
    Rng wr(p_.seed + 977);
    std::vector<Tensor> w, wd;
    for (const Tensor& o : want) {
      w.push_back(is_floating(o.dtype()) ? random_tensor(wr, o.dtype(), o.shape()) : Tensor());
      wd.push_back(w.back().defined() ? w.back().cuda() : Tensor());
    }
    const Tensor el = weighted_loss(want, w), cl = weighted_loss(got, wd);
    if (!el.defined()) return {};
    if (!cl.defined()) return {"no compiled output requires grad"};
    std::vector<Tensor> ex, cx, eg, cg;
    for (size_t k = 0; k < cpu.size(); ++k)
      if (grad_input(k)) {
        ex.push_back(cpu[k]);
        cx.push_back(dev_[k]);
      }
    if (std::string e = run([&] { eg = grad({el}, ex, {}, {.allow_unused = true}); }); !e.empty())
      return {str("eager backward threw: ", e)};
    if (std::string e = run([&] { cg = grad({cl}, cx, {}, {.allow_unused = true}); }); !e.empty())
      return {str("compiled backward threw: ", e)};
    return {diff_gradients(eg, cg, ex, low_)};
  }
};

Outcome check_program(uint64_t seed) {
  const Mode mode = mode_of(seed);
  const Program p = generate_program(seed, mode == Mode::kGradForward);
  if (!p.gen_errors.empty())
    return {str("kiln rejected a generated step eagerly: ", p.gen_errors.front(), "\n", p.print())};
  DeviceHarness h(p, mode);
  auto f = compile(h.body(), {.freeze = mode == Mode::kFrozen,
                              .warmup = 0,
                              .name = str("cuda_program", seed),
                              .reassociate = false});
  Outcome out;
  for (int call = 1; call <= 2 && out.failure.empty() && !out.skip; ++call) {
    out = h.compare(f, call);
    if (!out.failure.empty()) out.failure = str("call ", call, ", ", out.failure);
  }
  if (out.failure.empty() && !out.skip && f.stats().traces != 1)
    out.failure =
        str("expected 1 trace, got ", f.stats().traces, " (last miss: ", f.stats().last_miss, ")");
  if (!out.failure.empty())
    out.failure = str(out.failure, "\nmode: ", mode_name(mode), "\n", p.print(),
                      "compiled graph:\n", f.graph_text(), "rerun: KILN_RANDOM_PROGRAM=", seed,
                      " ./cuda_tests --gtest_filter='CudaRandomPrograms.*'\n");
  return out;
}

// Compiled on the device, random programs give the CPU's eager results.
TEST(CudaRandomPrograms, CompiledOnTheDeviceMatchesEagerOnTheCpu) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  const ProgramCounts n = check_programs(0, kPrograms, kMaxReports, check_program);
  EXPECT_LE(n.skipped, n.programs / 4) << "most programs were skipped";
}

}  // namespace
}  // namespace kiln::testing
