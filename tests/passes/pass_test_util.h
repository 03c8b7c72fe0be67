// Helpers shared by the pass tests: a pass test is a before/after pair of IR
// text (parse, run the pass, verify, compare the printed result), plus a few
// graph builders for what text cannot say directly.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "kiln/functional.h"
#include "kiln/ir/graph.h"
#include "kiln/ir/text.h"
#include "kiln/ir/verify.h"
#include "kiln/passes/pass_manager.h"

namespace kiln::passes::testing {

/// Drops the newline that starts a raw string literal written on its own line.
inline std::string_view trim_leading_newline(std::string_view s) {
  return !s.empty() && s.front() == '\n' ? s.substr(1) : s;
}

/// Parses `before`, runs `pass`, and expects `changed`, a result that passes
/// ir::verify and prints exactly as `after` (the printer's canonical form).
inline void expect_pass(PassFn pass, std::string_view before, std::string_view after,
                        bool changed) {
  std::unique_ptr<ir::Graph> g = ir::parse(trim_leading_newline(before));
  ASSERT_NO_THROW(ir::verify(*g)) << "the test's input graph is invalid";
  EXPECT_EQ(pass(*g), changed);
  EXPECT_NO_THROW(ir::verify(*g));
  EXPECT_EQ(ir::print(*g), trim_leading_newline(after));
}

/// Expects `pass` to leave the graph unchanged (returning false).
inline void expect_unchanged(PassFn pass, std::string_view text) {
  std::unique_ptr<ir::Graph> g = ir::parse(trim_leading_newline(text));
  ASSERT_NO_THROW(ir::verify(*g)) << "the test's input graph is invalid";
  std::string canonical = ir::print(*g);
  EXPECT_FALSE(pass(*g));
  EXPECT_NO_THROW(ir::verify(*g));
  EXPECT_EQ(ir::print(*g), canonical);
}

/// A graph input of a static shape.
inline ir::Value* input(ir::Graph& g, DType dt, const Dims& shape, std::string name) {
  return g.add_input(dt, ir::to_sym_shape(shape), std::move(name));
}

/// Appends a node whose outputs come from the op's rule; returns output 0.
inline ir::Value* op(ir::Graph& g, OpId id, std::vector<ir::Value*> in, Attrs at = {}) {
  return g.add_op_inferred(id, std::move(in), std::move(at))->output();
}

/// Appends a constant node holding `t`.
inline ir::Value* constant(ir::Graph& g, const Tensor& t) {
  return g.add_constant(t)->output();
}

/// The ops of g's nodes in order ("constant" for constants), for quick checks.
inline std::vector<std::string> node_ops(const ir::Graph& g) {
  std::vector<std::string> r;
  for (const ir::Node* n : g.nodes()) r.push_back(n->is_constant() ? "constant" : op_name(n->op));
  return r;
}

}  // namespace kiln::passes::testing
