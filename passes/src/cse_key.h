// Internal: CSE's canonical node key (cse.cpp), also used by remat's rule 9
// to find recomputed copies that compute the same value.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/ir/graph.h"

namespace kiln::passes {

using AttrItems = std::vector<const std::pair<const char*, AttrValue>*>;

/// Scratch buffers of make_key, reused across nodes.
struct KeyScratch {
  AttrItems items;
  std::vector<int> ids;
};

/// What make_key leaves out or maps: an attribute by name, and each input
/// replaced by another value (one that it stands for).
struct KeyOptions {
  const char* skip_attr = nullptr;
  std::function<const ir::Value*(const ir::Value*)> input;
};

/// The canonical key of `n` (op, attributes, symbolic attributes, input ids,
/// in sorted order where the op commutes exactly, output dtypes and shapes;
/// a small constant's bytes), or false if `n` must not be merged (random,
/// collective, a large constant).
bool make_key(const ir::Node* n, std::string& key, KeyScratch& scratch, const KeyOptions& opt = {});

}  // namespace kiln::passes
