// The memory model shared by the remat pass (remat.cpp) and the peak
// functions of remat.h (remat_model.cpp). Internal to kiln_passes.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kiln/ir/graph.h"
#include "kiln/passes/remat.h"

namespace kiln::passes::detail {

constexpr int64_t kNominalDim = 64;  // a symbolic dim's size in the model

/// Bytes of v with symbolic dims evaluated at `syms`.
int64_t bytes_of(const ir::Value* v, std::span<const int64_t> syms);

/// Rule 1's simulation of g in node order.
struct Model {
  std::vector<ir::Node*> nodes;  // in order
  std::vector<int> root;         // by value id: the value owning its buffer, -1: not counted
  std::vector<int64_t> bytes;    // by value id
  std::vector<int> birth, last;  // by root id: position made, last position alive
  std::vector<char> output;      // by value id: a graph output
  int64_t peak = 0;
  int at = 0;  // earliest position of the peak
};

/// The simulation; `writes` are RematOptions::writes (outputs written into the
/// buffer of the input they replace: not counted where the executor can do it).
Model simulate(const ir::Graph& g, std::span<const StateWrite> writes);

/// What the buffers alive at m's peak are (gradients, other graph outputs,
/// values read after the peak, the working set), one line.
std::string peak_composition(const ir::Graph& g, const Model& m);

}  // namespace kiln::passes::detail
