// Internal: the one rule by which a compiled graph's matmul takes its bias add
// (and ReLU) as a GEMM epilogue on a device whose matmul has one (CUDA:
// cuBLASLt's CUBLASLT_EPILOGUE_BIAS / RELU_BIAS). Fusion plans the add (+ relu)
// as an epilogue group reading the matmul's output (passes/src/fuse.cpp); when
// that group is nothing else, the executor runs matmul + group as one matmul
// step with a bias input (executor_schedule.cpp) instead of a GEMM, a stored
// product and a kernel that reads it back.
#pragma once

#include <optional>

#include "kiln/ir/graph.h"
#include "kiln/passes/fuse.h"

namespace kiln::detail {

/// A fusion group that is a matmul's epilogue: out = relu?(matmul + bias).
struct GemmEpilogueMatch {
  const ir::Node* matmul = nullptr;
  const ir::Value* bias = nullptr;  ///< 1-D, the product's last dim (or 1) long, its dtype
  bool relu = false;
};

/// The match when `grp` is an epilogue group of exactly add(product, bias)
/// or that add then relu, where the product is a float matmul's output read by
/// nothing else (not a graph output), the bias 1-D with the product's dtype,
/// and the group's one output the last node's; else nullopt. The add is the
/// same IEEE sum as the epilogue's f32 (f64) addition, so results keep their bits.
std::optional<GemmEpilogueMatch> match_gemm_epilogue(const passes::FusionGroup& grp,
                                                     const ir::Graph& g);

}  // namespace kiln::detail
