// Helpers shared by the compiled remat tests (remat_compiled_test.cpp,
// remat_partition_test.cpp): a random program's loss weights, its inputs
// as fresh leaves, and the loop over the random programs.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <vector>

#include <gtest/gtest.h>

#include "compare.h"
#include "kiln/kiln.h"
#include "random_program.h"

namespace kiln::testing {

/// One random weight per floating output of `p` run on its inputs (undefined
/// for the others), drawn from `rng`: weighted_loss's weights.
inline std::vector<Tensor> loss_weights(const Program& p, Rng& rng) {
  std::vector<Tensor> w;
  for (const Tensor& o : p.run(p.inputs))
    w.push_back(is_floating(o.dtype()) ? random_tensor(rng, o.dtype(), o.shape()) : Tensor());
  return w;
}

/// p's inputs as detached copies, the floating ones requiring grad.
inline std::vector<Tensor> grad_leaves(const Program& p) {
  std::vector<Tensor> leaves;
  for (const Tensor& t : p.inputs) {
    Tensor l = t.detach().clone();
    if (is_floating(l.dtype())) l.requires_grad_();
    leaves.push_back(l);
  }
  return leaves;
}

/// How many random programs the remat suites check: 40, or
/// KILN_RANDOM_PROGRAMS=<n> (the harder check: 400).
inline uint64_t random_program_count() {
  const char* n = std::getenv("KILN_RANDOM_PROGRAMS");
  return n ? std::strtoull(n, nullptr, 10) : 40;
}

/// Calls fn(p, w, rng) for each random program p of seeds 1..random_program_count()
/// (only KILN_RANDOM_PROGRAM=<seed> where that is set) that generates without
/// errors (printed as the failure trace), with its loss weights w drawn from rng first. Eager
/// fusion is off meanwhile: the compiled graph holds the composites' primitive ops, whose eager
/// reference is the same primitives (the fused composites are checked against those in
/// tests/runtime/eager_fusion_test.cpp).
template <typename Fn>
void for_each_random_program(Fn fn) {
  struct Unfused {
    Unfused() { set_eager_fusion(false); }
    ~Unfused() { set_eager_fusion(true); }
  } unfused;
  const char* one = std::getenv("KILN_RANDOM_PROGRAM");
  const uint64_t first = one ? std::strtoull(one, nullptr, 10) : 1;
  const uint64_t last = one ? first : random_program_count();
  for (uint64_t seed = first; seed <= last; ++seed) {
    const Program p = generate_program(seed, true);
    if (!p.gen_errors.empty()) continue;
    SCOPED_TRACE(p.print());
    Rng rng(seed);
    const std::vector<Tensor> w = loss_weights(p, rng);
    fn(p, w, rng);
  }
}

}  // namespace kiln::testing
