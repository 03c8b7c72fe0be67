// ir::structural_hash and ir::to_dot.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/functional.h"
#include "kiln/ir/dot.h"
#include "kiln/ir/hash.h"
#include "kiln/ir/verify.h"

namespace kiln::ir {
namespace {

// Knobs for small variations of one graph.
struct Opts {
  bool keepdim = false;
  float const_val = 2.0f;
  bool swap_sub = false;
  std::string out_name = "out0";
  double alpha = 0.5;  // a double attr on the `full` node
};

// y = sum((x - const) * full(alpha)) over dim 1, with x f32[2, 3].
std::unique_ptr<Graph> build(const Opts& o = {}) {
  auto g = std::make_unique<Graph>();
  Value* x = g->add_input(DType::f32, {2, 3}, "arg0");
  Node* c = g->add_constant(from_vector<float>({1.0f, o.const_val, 3.0f}, {3}));
  Value* a = x;
  Value* b = c->output();
  if (o.swap_sub) std::swap(a, b);
  Node* s = g->add_op_inferred(OpId::sub, {a, b}, {});
  Attrs fa = Attrs().set("shape", Dims{2, 3}).set("value", o.alpha).set("dtype", DType::f32);
  Node* f = g->add_op_inferred(OpId::full, {}, fa);
  Node* m = g->add_op_inferred(OpId::mul, {s->output(), f->output()}, {});
  Attrs ra = Attrs().set("dims", Dims{1}).set("keepdim", o.keepdim);
  Node* r = g->add_op_inferred(OpId::sum, {m->output()}, ra);
  g->add_output(r->output(), o.out_name);
  return g;
}

TEST(StructuralHash, EqualForIdenticalBuilds) {
  // Two separately built identical graphs, and a clone, hash equal.
  auto g1 = build();
  auto g2 = build();
  ASSERT_TRUE(structurally_equal(*g1, *g2));
  EXPECT_EQ(structural_hash(*g1), structural_hash(*g2));
  EXPECT_EQ(structural_hash(*g1), structural_hash(*g1->clone()));
  EXPECT_EQ(structural_hash(*g1), structural_hash(*g1));
}

TEST(StructuralHash, IndependentOfValueIdsAndNames) {
  // Value ids (insertion history) and node output names do not affect the hash.
  Graph a;
  {
    Value* x = a.add_input(DType::f32, {4}, "arg0");
    Node* n1 = a.add_op_inferred(OpId::relu, {x}, {});
    Node* n2 = a.add_op_inferred(OpId::neg, {n1->output()}, {});
    a.add_output(n2->output(), "out0");
  }
  Graph b;  // same nodes, created in the other order with before=
  {
    Value* x = b.add_input(DType::f32, {4}, "arg0");
    Node* n2 = b.add_op(OpId::neg, {x}, {}, {{DType::f32, {4}}});
    Node* n1 = b.add_op_inferred(OpId::relu, {x}, {}, /*before=*/n2);
    b.set_input(n2, 0, n1->output());
    n1->output()->name = "hidden";
    b.add_output(n2->output(), "out0");
  }
  ASSERT_NE(a.nodes()[0]->output()->id(), b.nodes()[0]->output()->id());
  ASSERT_TRUE(structurally_equal(a, b));
  EXPECT_EQ(structural_hash(a), structural_hash(b));
}

TEST(StructuralHash, DiffersOnChanges) {
  // An attr, a constant byte, the wiring, an output name or a double attr each change the hash.
  const uint64_t base = structural_hash(*build());
  Opts keep;
  keep.keepdim = true;
  Opts cbyte;
  cbyte.const_val = std::nextafter(2.0f, 3.0f);  // one bit of one constant element
  Opts wiring;
  wiring.swap_sub = true;
  Opts name;
  name.out_name = "out1";
  Opts alpha;
  alpha.alpha = 0.25;
  for (const Opts& o : {keep, cbyte, wiring, name, alpha}) {
    auto g = build(o);
    EXPECT_FALSE(structurally_equal(*build(), *g));
    EXPECT_NE(structural_hash(*g), base);
  }
}

TEST(StructuralHash, DiffersOnInputMetadataAndSymbols) {
  // Input dtype, input name, num_syms and rng_advance are part of the hash.
  auto make = [](DType dt, const char* name, int syms, SymInt adv) {
    auto g = std::make_unique<Graph>();
    g->num_syms = syms;
    g->rng_advance = adv;
    g->add_output(g->add_input(dt, {SymInt::symbolic(0), 2}, name), "out0");
    return structural_hash(*g);
  };
  const uint64_t h = make(DType::f32, "arg0", 1, 0);
  EXPECT_NE(h, make(DType::f64, "arg0", 1, 0));
  EXPECT_NE(h, make(DType::f32, "arg1", 1, 0));
  EXPECT_NE(h, make(DType::f32, "arg0", 2, 0));
  EXPECT_NE(h, make(DType::f32, "arg0", 1, SymInt::symbolic(0, 4)));
  EXPECT_EQ(h, make(DType::f32, "arg0", 1, SymInt::symbolic(0, 0)));  // 0*s0 is static 0
}

TEST(StructuralHash, DoubleAttrsFollowStructuralEquality) {
  // All NaNs hash alike and 0.0 == -0.0, as structurally_equal treats them.
  auto with = [](double v) {
    Opts o;
    o.alpha = v;
    return build(o);
  };
  const double nan1 = std::numeric_limits<double>::quiet_NaN();
  const double nan2 = -std::nan("123");  // another sign and payload
  ASSERT_TRUE(structurally_equal(*with(nan1), *with(nan2)));
  EXPECT_EQ(structural_hash(*with(nan1)), structural_hash(*with(nan2)));
  ASSERT_TRUE(structurally_equal(*with(0.0), *with(-0.0)));
  EXPECT_EQ(structural_hash(*with(0.0)), structural_hash(*with(-0.0)));
  EXPECT_NE(structural_hash(*with(nan1)), structural_hash(*with(0.0)));
}

TEST(StructuralHash, PinnedValue) {
  // The hash of a fixed graph is a fixed literal: a change of the function is noticed.
  auto g = build();
  ASSERT_NO_THROW(verify(*g));
  EXPECT_EQ(structural_hash(*g), 0x16312dbdbb2120e3ULL);  // output roles joined the hash
}

TEST(Dot, ContainsOpsInputsOutputsAndEdges) {
  // The DOT text names inputs, ops, constants and outputs, with dtype[shape] edges.
  const std::string d = to_dot(*build());
  EXPECT_EQ(d.rfind("digraph kiln {", 0), 0u) << d;
  for (const char* part :
       {"in0 [shape=ellipse, label=\"arg0\"]", "label=\"sub\"", "label=\"mul\"",
        "label=\"sum\\ndims=[1], keepdim=false\"", "label=\"full\\nshape=[2, 3], value=0.5",
        "constant f32[3]", "out0 [shape=ellipse, style=bold, label=\"out0\"]",
        "in0 -> n1 [label=\"f32[2, 3]\"]", "n0 -> n1 [label=\"f32[3]\"]",
        "n4 -> out0 [label=\"f32[2]\"]"})
    EXPECT_NE(d.find(part), std::string::npos) << "missing " << part << " in\n" << d;
  EXPECT_EQ(d.back(), '\n');
}

TEST(Dot, Deterministic) {
  // The same structure gives byte-identical DOT (separate builds and a clone).
  auto g = build();
  EXPECT_EQ(to_dot(*g), to_dot(*build()));
  EXPECT_EQ(to_dot(*g), to_dot(*g->clone()));
}

TEST(Dot, EscapesAndSymbolicShapes) {
  // Quotes and backslashes in names are escaped; symbolic dims print as expressions.
  Graph g;
  g.num_syms = 1;
  Value* x = g.add_input(DType::f32, {SymInt::symbolic(0, 2, 1)}, "a\"b\\c");
  Node* n = g.add_op(OpId::relu, {x}, {}, {{DType::f32, x->shape}});
  g.add_output(n->output(), "o\"ut");
  const std::string d = to_dot(g);
  EXPECT_NE(d.find("label=\"a\\\"b\\\\c\""), std::string::npos) << d;
  EXPECT_NE(d.find("label=\"o\\\"ut\""), std::string::npos) << d;
  EXPECT_NE(d.find("in0 -> n0 [label=\"f32[2*s0+1]\"]"), std::string::npos) << d;
}

TEST(Dot, BrokenGraphDoesNotCrash) {
  // A graph output whose producer was erased shows as an "undefined" node.
  Graph g;
  Value* x = g.add_input(DType::f32, {4}, "arg0");
  Node* a = g.add_op_inferred(OpId::relu, {x}, {});
  Value* v = a->output();
  g.erase(a);
  g.add_output(v, "out0");
  const std::string d = to_dot(g);
  EXPECT_NE(d.find("undefined %1"), std::string::npos) << d;
  EXPECT_NE(d.find("undef0 -> out0"), std::string::npos) << d;
}

}  // namespace
}  // namespace kiln::ir
