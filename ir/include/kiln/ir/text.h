// IR text form: a printer and a parser that round-trip
// (structurally_equal(*parse(print(g)), g)), so tests and bug reports carry
// graphs as text. The grammar is documented at the top of ir/src/parser.cpp.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "kiln/ir/graph.h"

namespace kiln::ir {

/// The graph as text, values numbered in order (deterministic).
std::string print(const Graph& g);
/// Parses text made by print(). Malformed text raises kiln::Error with
/// "line L, column C" and what was expected; never crashes.
std::unique_ptr<Graph> parse(std::string_view text);

}  // namespace kiln::ir
