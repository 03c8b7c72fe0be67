// Graph outputs carry a typed role (OutputRole): gradients are marked as such,
// not recognized by a name prefix. The role survives every form of a graph.
#include <gtest/gtest.h>

#include <string>

#include "kiln/error.h"
#include "kiln/ir/graph.h"
#include "kiln/ir/hash.h"
#include "kiln/ir/serialize.h"
#include "kiln/ir/text.h"

namespace kiln::ir {
namespace {

// The role is printed and parsed; the name alone no longer makes a gradient.
TEST(OutputRole, PrintedAndParsed) {
  auto g = parse(R"(
graph(%0: f32[4] "x") {
  %1 = exp(%0) : f32[4]
  %2 = neg(%1) : f32[4]
  return %1 "out0", %2 "grad:cap0" gradient, %1 "grad:looks_like_one"
}
)");
  ASSERT_EQ(g->outputs().size(), 3u);
  EXPECT_FALSE(g->is_gradient_output(0));
  EXPECT_TRUE(g->is_gradient_output(1));
  EXPECT_FALSE(g->is_gradient_output(2));
  const std::string text = print(*g);
  EXPECT_NE(text.find("%2 \"grad:cap0\" gradient"), std::string::npos) << text;
  auto back = parse(text);
  EXPECT_EQ(back->output_roles(), g->output_roles());
  EXPECT_EQ(print(*back), text);
}

TEST(OutputRole, KeptByCloneBinaryFormAndHash) {
  Graph g;
  Value* x = g.add_input(DType::f32, {SymInt(4)}, "x");
  Node* n = g.add_op_inferred(OpId::exp, {x}, {});
  g.add_output(n->output(), "a");
  g.add_output(n->output(), "b", OutputRole::kGradient);
  auto c = g.clone();
  EXPECT_EQ(c->output_roles(), g.output_roles());
  ByteWriter w;
  write_graph(w, g);
  ByteReader rd(w.bytes());
  auto r = read_graph(rd);
  EXPECT_EQ(r->output_roles(), g.output_roles());
  Graph h;
  Value* y = h.add_input(DType::f32, {SymInt(4)}, "x");
  Node* m = h.add_op_inferred(OpId::exp, {y}, {});
  h.add_output(m->output(), "a");
  h.add_output(m->output(), "b");  // same name, another role
  EXPECT_NE(structural_hash(g), structural_hash(h));
}

}  // namespace
}  // namespace kiln::ir
