// Shared by the random-program suites (random_graphs_test.cpp: compiled vs
// eager on the CPU; cuda/cuda_random_programs_test.cpp: compiled on CUDA vs
// eager on the CPU): how a program is compiled, the tolerances its results
// and gradients are compared at, and the loop over program seeds.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "codegen/compare.h"
#include "codegen/random_program.h"
#include "kiln/kiln.h"

namespace kiln::testing {

/// How a program is compiled.
enum class Mode {
  kArgs,         ///< every input is an argument
  kCaptured,     ///< some inputs are captured by reference (refilled in place between calls)
  kFrozen,       ///< some inputs are captured and frozen (CompileOptions::freeze)
  kGradForward,  ///< f64, args and captures require grad: gradients through the compiled forward
  kGradStep,     ///< f64, all inputs captured leaves; backward runs inside the compiled function
};

/// The mode as a failure report names it.
inline const char* mode_name(Mode m) {
  switch (m) {
    case Mode::kArgs:
      return "arguments";
    case Mode::kCaptured:
      return "captured inputs";
    case Mode::kFrozen:
      return "frozen captured inputs";
    case Mode::kGradForward:
      return "f64 gradients through the compiled forward";
    case Mode::kGradStep:
      return "whole step with backward inside";
  }
  return "?";
}

/// Tolerance (relative = absolute) per dtype: unfused nodes run the eager
/// kernels and fused ones their scalar definitions, so only a reordered sum
/// (gradient accumulation) changes last bits.
inline double program_tolerance(DType dt) {
  switch (dt) {
    case DType::f64:
      return 1e-12;
    case DType::f32:
      return 1e-5;
    case DType::f16:
    case DType::bf16:
      return 1e-2;
    default:
      return 0.0;
  }
}

/// diff_values of the compiled result `got` against the eager `want`, at the
/// tolerance of want's dtype or of `low` (the least precise float dtype the
/// program's values went through), whichever is larger.
inline std::string diff_at(const Tensor& want, const Tensor& got, DType low) {
  const double tol =
      want.defined() ? std::max(program_tolerance(want.dtype()), program_tolerance(low)) : 0.0;
  return diff_values(want, got, tol);
}

/// "" if the compiled gradients `got` (on any device) match the eager `want`
/// w.r.t. `inputs`, else the first that differs. An input the loss does not
/// depend on has no eager gradient: zeros are as good.
inline std::string diff_gradients(const std::vector<Tensor>& want, const std::vector<Tensor>& got,
                                  const std::vector<Tensor>& inputs, DType low) {
  for (size_t j = 0; j < want.size(); ++j) {
    const Tensor e = want[j].defined() ? want[j] : zeros_like(inputs[j]);
    const Tensor c = got[j].defined() ? got[j].cpu() : zeros_like(inputs[j]);
    if (std::string d = diff_at(e, c, low); !d.empty())
      return str("gradient of float input ", j, ": ", d);
  }
  return "";
}

/// What checking one program found.
struct Outcome {
  std::string failure;         ///< "" if the program passed or was skipped
  const char* skip = nullptr;  ///< why the program was skipped (a listed missing kernel)
};

/// The one program to run instead of a range (KILN_RANDOM_PROGRAM=<seed>).
inline std::optional<uint64_t> one_program() {
  const char* one = std::getenv("KILN_RANDOM_PROGRAM");
  if (!one) return std::nullopt;
  return std::strtoull(one, nullptr, 10);
}

/// Counts of a check_programs run.
struct ProgramCounts {
  int programs = 0, failed = 0, skipped = 0;
};

/// Checks programs [first, last) (just one_program() where it is set) with
/// `check(seed) -> Outcome`, eager fusion off (the compiled graph holds the
/// composites' primitive ops: so does the eager reference); adds a test
/// failure for each of the first `max_reports` failed programs and expects
/// none, and prints each skipped one.
template <typename Check>
ProgramCounts check_programs(uint64_t first, uint64_t last, int max_reports, Check check) {
  if (const std::optional<uint64_t> one = one_program()) {
    first = *one;
    last = first + 1;
  }
  struct Unfused {
    Unfused() { set_eager_fusion(false); }
    ~Unfused() { set_eager_fusion(true); }
  } unfused;
  ProgramCounts n;
  for (uint64_t seed = first; seed < last; ++seed, ++n.programs) {
    const Outcome o = check(seed);
    if (o.skip) {
      ++n.skipped;
      std::cout << "program " << seed << " skipped: " << o.skip << "\n";
    }
    if (o.failure.empty()) continue;
    if (++n.failed <= max_reports) ADD_FAILURE() << "program " << seed << ": " << o.failure;
  }
  EXPECT_EQ(n.failed, 0) << "programs failed in [" << first << ", " << last << ")";
  return n;
}

}  // namespace kiln::testing
