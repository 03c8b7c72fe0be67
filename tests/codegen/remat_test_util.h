// Helpers shared by the compiled remat tests (remat_compiled_test.cpp,
// remat_partition_test.cpp): a random program's loss weights and its inputs
// as fresh leaves.
#pragma once

#include <vector>

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

}  // namespace kiln::testing
