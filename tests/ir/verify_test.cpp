// ir::verify: a valid graph passes; each broken rule is reported as a
// "[verify] ..." kiln::Error naming the node and the rule.
#include "kiln/ir/verify.h"

#include <gtest/gtest.h>

#include "kiln/functional.h"
#include "kiln/ir/text.h"
#include "runtime/test_util.h"

namespace kiln::ir {
namespace {

using kiln::testing::expect_error;

Attrs sum_attrs(Dims dims, bool keepdim) {
  return Attrs().set("dims", dims).set("keepdim", keepdim);
}

// x[4,8] @ w1[8,16] + b1 -> relu -> @ const w2[16,2] -> sum.
std::unique_ptr<Graph> mlp() {
  auto g = std::make_unique<Graph>();
  Value* x = g->add_input(DType::f32, {4, 8}, "arg0");
  Value* w1 = g->add_input(DType::f32, {8, 16}, "cap0");
  Value* b1 = g->add_input(DType::f32, {16}, "cap1");
  Node* mm = g->add_op_inferred(OpId::matmul, {x, w1}, {});
  Node* ad = g->add_op_inferred(OpId::add, {mm->output(), b1}, {});
  Node* r = g->add_op_inferred(OpId::relu, {ad->output()}, {});
  Node* w2 = g->add_constant(ones({16, 2}));
  Node* mm2 = g->add_op_inferred(OpId::matmul, {r->output(), w2->output()}, {});
  Node* s = g->add_op_inferred(OpId::sum, {mm2->output()}, sum_attrs({}, false));
  g->add_output(s->output(), "out0");
  g->add_output(r->output(), "out1");
  return g;
}

// Runs verify and expects an error containing "[verify] " and every part.
void expect_verify_error(const Graph& g, std::initializer_list<const char*> parts) {
  expect_error([&] { verify(g); }, {"[verify] "});
  expect_error([&] { verify(g); }, parts);
}

TEST(Verify, ValidMlpPasses) {
  // A well-formed MLP-like graph (ops, constant, two outputs) and its clone pass.
  auto g = mlp();
  EXPECT_NO_THROW(verify(*g));
  EXPECT_NO_THROW(verify(*g->clone()));
}

TEST(Verify, EmptyGraphPasses) {
  // A graph with no nodes whose output is an input is valid.
  Graph g;
  g.add_output(g.add_input(DType::i64, {}, "arg0"), "out0");
  EXPECT_NO_THROW(verify(g));
}

TEST(Verify, WrongArity) {
  // A binary op with one input is reported with the op's arity.
  Graph g;
  Value* x = g.add_input(DType::f32, {4, 8}, "arg0");
  g.add_op(OpId::relu, {x}, {}, {{DType::f32, {4, 8}}});
  g.add_op(OpId::add, {x}, {}, {{DType::f32, {4, 8}}});
  expect_verify_error(g, {"node #1", "add(%0)", "arity", "takes 2 inputs, node has 1"});
}

TEST(Verify, WrongOutputShape) {
  // An output shape that differs from the op's rule is reported with both shapes.
  Graph g;
  Value* x = g.add_input(DType::f32, {4, 8}, "arg0");
  Node* n = g.add_op(OpId::relu, {x}, {}, {{DType::f32, {4, 9}}});
  g.add_output(n->output(), "out0");
  expect_verify_error(g, {"node #0", "%1 = relu(%0)", "has shape [4, 9]", "rule gives [4, 8]"});
}

TEST(Verify, WrongOutputDtype) {
  // An output dtype that differs from the op's rule (sum of i32 gives i64) is reported.
  Graph g;
  Value* x = g.add_input(DType::i32, {4, 8}, "arg0");
  g.add_op(OpId::sum, {x}, sum_attrs({1}, false), {{DType::i32, {4}}});
  expect_verify_error(g, {"node #0", "sum", "dtype i32", "rule gives i64"});
}

TEST(Verify, WrongNumberOfOutputs) {
  // A node with more outputs than its op produces is reported.
  Graph g;
  Value* x = g.add_input(DType::f32, {4}, "arg0");
  g.add_op(OpId::neg, {x}, {}, {{DType::f32, {4}}, {DType::f32, {4}}});
  expect_verify_error(g, {"node #0", "gives 1 outputs, node has 2"});
}

TEST(Verify, RuleRejectionIsReported) {
  // When the op's rule throws (matmul of [4,8] by [4,8]), its message is part of the error.
  Graph g;
  Value* x = g.add_input(DType::f32, {4, 8}, "arg0");
  g.add_op(OpId::matmul, {x, x}, {}, {{DType::f32, {4, 8}}});
  expect_verify_error(g, {"node #0", "matmul(%0, %0)", "rule rejects", "[matmul]"});
}

TEST(Verify, MissingAttributeIsReported) {
  // A reshape without its shape attribute is an error, not a crash.
  Graph g;
  Value* x = g.add_input(DType::f32, {4, 8}, "arg0");
  g.add_op(OpId::reshape, {x}, {}, {{DType::f32, {32}}});
  expect_verify_error(g, {"node #0", "reshape", "rule rejects", "shape"});
}

// A missing or mistyped attribute is a user error (not "internal error ...
// please report it"); in a parsed graph it names the node's line and column.
TEST(Verify, AttributeErrorsOfParsedGraphsNameLineAndColumn) {
  auto check = [](const std::string& stmt, const char* says) {
    SCOPED_TRACE(stmt);
    auto g = parse("graph(%0: f32[2, 3] \"x\") {\n" + stmt + "\n  return %1 \"y\"\n}\n");
    expect_verify_error(*g, {"[verify] line 2, column 8: node #0 (%1 = ", says});
  };
  check("  %1 = permute(%0) : f32[3, 2]", "missing attribute 'dims'");
  check("  %1 = sum(%0) {dims=1, keepdim=false} : f32[]",
        "attribute 'dims' is an integer, expected a list");
  check("  %1 = sum(%0) {dims=[0], keepdim=1} : f32[3]",
        "attribute 'keepdim' is an integer, expected a bool");
  check("  %1 = cast(%0) {dtype=1.5} : f64[2, 3]",
        "attribute 'dtype' is a float, expected a dtype");
  check("  %1 = reshape(%0) : f32[6]", "missing attribute 'shape'");
}

// A symbolic size whose value overflows int64 at a sample is a user error
// (hostile IR text; the sizes were computed unchecked before).
TEST(Verify, SymbolicSizeOverflowIsAnError) {
  auto g = parse(
      "graph(%0: f32[s0] \"x\", %1: f32[9223372036854775807*s0] \"z\") syms=1 {\n"
      "  %2 = neg(%1) : f32[9223372036854775807*s0]\n  return %2 \"y\"\n}\n");
  expect_verify_error(
      *g,
      {"input 0 %1", "is not a valid shape at s0=", "[symbolic size] size arithmetic overflows"});
}

// No op's rule reports missing attributes (or any other bad input) as a kiln bug.
TEST(Verify, NoRuleFailsInternallyWithoutAttributes) {
  for (int i = 0; i < kNumOps; ++i) {
    const auto op = static_cast<OpId>(i);
    const int arity = op_info(op).arity >= 0 ? op_info(op).arity : 2;
    Graph g;
    std::vector<Value*> ins;
    for (int k = 0; k < arity; ++k) ins.push_back(g.add_input(DType::f32, {2, 3}, str("in", k)));
    g.add_op(op, ins, {}, {{DType::f32, {2, 3}}});
    try {
      verify(g);
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find("internal error"), std::string::npos)
          << op_name(op) << ": " << e.what();
    }
  }
}

TEST(Verify, WrappedNumberReachesTheRule) {
  // Stand-in inputs keep wrapped_number: i64 tensor * wrapped f64 scalar gives f32.
  Graph g;
  Value* x = g.add_input(DType::i64, {4}, "arg0");
  Value* s = g.add_input(DType::f64, {}, "host0");
  s->wrapped_number = true;
  Node* n = g.add_op(OpId::mul, {x, s}, {}, {{DType::f32, {4}}});
  g.add_output(n->output(), "out0");
  EXPECT_NO_THROW(verify(g));
  s->wrapped_number = false;  // a real f64 0-d tensor: i64 * f64 gives f64
  expect_verify_error(g, {"node #0", "dtype f32", "rule gives f64"});
  x->wrapped_number = true;  // a wrapped number is 0-d
  expect_verify_error(g, {"graph input 0", "is marked as a wrapped number, which is 0-d"});
}

TEST(Verify, UseBeforeDefinition) {
  // A node inserted before the producer of its input breaks SSA dominance.
  Graph g;
  Value* x = g.add_input(DType::f32, {4}, "arg0");
  Node* a = g.add_op_inferred(OpId::relu, {x}, {});
  g.add_op_inferred(OpId::neg, {a->output()}, {}, /*before=*/a);
  expect_verify_error(
      g, {"node #0", "neg(%1)", "input 0 %1", "used before its definition", "node #1"});
}

TEST(Verify, SelfUseIsUseBeforeDefinition) {
  // A node reading its own output is caught by the dominance rule.
  Graph g;
  Value* x = g.add_input(DType::f32, {4}, "arg0");
  Node* a = g.add_op_inferred(OpId::relu, {x}, {});
  g.set_input(a, 0, a->output());
  expect_verify_error(g, {"node #0", "used before its definition"});
}

TEST(Verify, DanglingOutputOfErasedProducer) {
  // A graph output whose producer was erased is reported as undefined.
  Graph g;
  Value* x = g.add_input(DType::f32, {4}, "arg0");
  Node* a = g.add_op_inferred(OpId::relu, {x}, {});
  Value* v = a->output();
  g.erase(a);
  g.add_output(v, "out0");
  expect_verify_error(g, {"graph output 0 \"out0\" %1", "not defined", "erased"});
}

TEST(Verify, DanglingInputOfErasedProducer) {
  // A node reading the output of an erased node is reported.
  Graph g;
  Value* x = g.add_input(DType::f32, {4}, "arg0");
  Node* a = g.add_op_inferred(OpId::relu, {x}, {});
  Value* v = a->output();
  g.erase(a);
  g.add_op(OpId::neg, {v}, {}, {{DType::f32, {4}}});
  expect_verify_error(g, {"node #0", "input 0 %1", "not defined in this graph", "erased"});
}

TEST(Verify, ValueOfAnotherGraph) {
  // Using another graph's value (input or node output) is reported.
  Graph other;
  Value* y = other.add_input(DType::f32, {4}, "arg0");
  Node* r = other.add_op_inferred(OpId::relu, {y}, {});
  Graph g;
  Value* x = g.add_input(DType::f32, {4}, "arg0");
  Node* n = g.add_op(OpId::add, {x, y}, {}, {{DType::f32, {4}}});
  expect_verify_error(g, {"node #0", "input 1", "not an input of this graph"});
  g.set_input(n, 1, r->output());
  expect_verify_error(g, {"node #0", "input 1", "not a node of this graph"});
}

TEST(Verify, ValueDefinedTwice) {
  // A value listed as the output of two nodes is reported.
  Graph g;
  Value* x = g.add_input(DType::f32, {4}, "arg0");
  Node* a = g.add_op_inferred(OpId::relu, {x}, {});
  Node* b = g.add_op_inferred(OpId::neg, {x}, {});
  b->outputs[0] = a->output();
  expect_verify_error(g, {"node #1", "defined twice", "node #0"});
}

TEST(Verify, ProducerFieldWrong) {
  // An output whose Value::index disagrees with its slot is reported.
  Graph g;
  Value* x = g.add_input(DType::f32, {4}, "arg0");
  Node* a = g.add_op_inferred(OpId::relu, {x}, {});
  a->output()->index = 3;
  expect_verify_error(g, {"node #0", "output index 3"});
}

TEST(Verify, UseListsOutOfSync) {
  // Value::users must match the actual uses: a missing and an extra entry are reported.
  Graph g;
  Value* x = g.add_input(DType::f32, {4}, "arg0");
  Node* a = g.add_op_inferred(OpId::add, {x, x}, {});
  ASSERT_NO_THROW(verify(g));
  x->users.pop_back();  // x is read twice by node #0 but listed once
  expect_verify_error(
      g, {"use list of graph input 0 %0", "lists nodes [#0]", "read by nodes [#0, #0]"});
  x->users.push_back(a);
  a->output()->users.push_back(a);  // extra entry
  expect_verify_error(g, {"use list of node #0", "%1", "out of sync"});
}

TEST(Verify, LargeGraphUseListsAndOrder) {
  // A 6000-node graph (the verifier's lookups are by table, its use-list check
  // a counting sort): a valid one passes; one broken use list or use before
  // definition deep inside is reported with the right node.
  Graph g;
  Value* x = g.add_input(DType::f32, {4}, "arg0");
  Value* y = g.add_input(DType::f32, {4}, "arg1");
  std::vector<Node*> ns;
  Value* cur = x;
  for (int i = 0; i < 3000; ++i) {
    ns.push_back(g.add_op_inferred(OpId::add, {cur, i % 7 == 0 ? y : cur}, {}));
    ns.push_back(g.add_op_inferred(OpId::relu, {ns.back()->output()}, {}));
    cur = ns.back()->output();
  }
  g.add_output(cur, "out0");
  ASSERT_NO_THROW(verify(g));
  // Node #4000 (an add reading %relu twice): drop one of its two use entries.
  Value* v = ns[4000]->inputs[0];
  ASSERT_EQ(v->users.size(), 2u);
  v->users.pop_back();
  expect_verify_error(
      g, {"use list of node #3999", "lists nodes [#4000]", "read by nodes [#4000, #4000]"});
  v->users.push_back(ns[4000]);
  y->users.push_back(ns[5000]);  // an extra reader of a graph input
  expect_verify_error(g, {"use list of graph input 1 %1", "out of sync"});
  y->users.pop_back();
  ASSERT_NO_THROW(verify(g));
  // Node #5000 reads a value defined later (#5003): dominance.
  g.set_input(ns[5000], 0, ns[5003]->output());
  expect_verify_error(g, {"node #5000", "used before its definition", "node #5003"});
}

TEST(Verify, ConstantMustMatchItsValue) {
  // A constant whose tensor disagrees with its output value's dtype is reported.
  Graph g;
  Node* c = g.add_constant(ones({2, 3}));
  ASSERT_NO_THROW(verify(g));
  c->output()->dtype = DType::f64;
  expect_verify_error(g, {"node #0", "constant", "tensor is f32[2, 3]", "is f64[2, 3]"});
  c->output()->dtype = DType::f32;
  c->constant = Tensor();
  expect_verify_error(g, {"node #0", "constant has no tensor"});
}

TEST(Verify, RandomOpNeedsSeedAndOffset) {
  // A random op without seed/offset attributes is reported.
  Graph g;
  Attrs at = Attrs().set("shape", Dims{3}).set("dtype", DType::f32).set("seed", 1);
  g.add_op(OpId::rand_uniform, {}, at, {{DType::f32, {3}}});
  expect_verify_error(g, {"node #0", "rand_uniform", "random op lacks an int64 'offset'"});
}

TEST(Verify, SymbolicGraphPasses) {
  // A graph with a dynamic batch (relu, reshape with a symbolic attr, sum) verifies.
  Graph g;
  g.num_syms = 1;
  Value* x = g.add_input(DType::f32, {SymInt::symbolic(0), 8}, "arg0");
  Node* r = g.add_op(OpId::relu, {x}, {}, {{DType::f32, x->shape}});
  Node* re = g.add_op(OpId::reshape, {r->output()}, Attrs().set("shape", Dims{24}),
                      {{DType::f32, {SymInt::symbolic(0, 8)}}});
  re->sym_attrs.push_back({intern_attr_name("shape"), 0, SymInt::symbolic(0, 8), false});
  Node* s = g.add_op(OpId::sum, {r->output()}, sum_attrs({0}, false), {{DType::f32, {8}}});
  g.add_output(re->output(), "out0");
  g.add_output(s->output(), "out1");
  EXPECT_NO_THROW(verify(g));
}

TEST(Verify, SymbolicShapeWrongAtSecondSample) {
  // A dim recorded as 3 where the rule gives s0 passes at s0=3 but fails at s0=7.
  Graph g;
  g.num_syms = 1;
  Value* x = g.add_input(DType::f32, {SymInt::symbolic(0), 8}, "arg0");
  Node* r = g.add_op(OpId::relu, {x}, {}, {{DType::f32, {3, 8}}});
  expect_verify_error(g, {"node #0", "has shape [3, 8]", "rule gives [7, 8]", "at s0=7"});
  r->outputs[0]->shape = {SymInt::symbolic(0, 1, 1), 8};  // s0+1: wrong at both points
  expect_verify_error(g,
                      {"node #0", "has shape [s0+1, 8] = [4, 8]", "rule gives [3, 8]", "at s0=3"});
}

TEST(Verify, SymbolicAttrInconsistent) {
  // A reshape whose symbolic shape attr disagrees with the element count is caught.
  Graph g;
  g.num_syms = 1;
  Value* x = g.add_input(DType::f32, {SymInt::symbolic(0), 8}, "arg0");
  Node* re = g.add_op(OpId::reshape, {x}, Attrs().set("shape", Dims{24}),
                      {{DType::f32, {SymInt::symbolic(0, 8)}}});
  re->sym_attrs.push_back({intern_attr_name("shape"), 0, SymInt::symbolic(0, 4), false});
  expect_verify_error(g, {"node #0", "reshape", "rule rejects", "at s0=3"});
}

TEST(Verify, DistinctSymbolsGetDistinctSamples) {
  // Adding [s0] to [s1] is only valid if s0 == s1, so it is rejected.
  Graph g;
  g.num_syms = 2;
  Value* x = g.add_input(DType::f32, {SymInt::symbolic(0)}, "arg0");
  Value* y = g.add_input(DType::f32, {SymInt::symbolic(1)}, "arg1");
  g.add_op(OpId::add, {x, y}, {}, {{DType::f32, {SymInt::symbolic(0)}}});
  expect_verify_error(g, {"node #0", "rule rejects", "at s0=3, s1=5"});
}

TEST(Verify, SamplesRespectDimLowerBounds) {
  // A slice to s0-4 (meaningful for s0 >= 5) is sampled where it is valid, not at s0=3.
  Graph g;
  g.num_syms = 1;
  Value* x = g.add_input(DType::f32, {SymInt::symbolic(0), 8}, "arg0");
  Attrs at = Attrs().set("dim", 0).set("start", 0).set("end", 1).set("step", 1);
  Node* s = g.add_op(OpId::slice, {x}, at, {{DType::f32, {SymInt::symbolic(0, 1, -4), 8}}});
  s->sym_attrs.push_back({intern_attr_name("end"), -1, SymInt::symbolic(0, 1, -4), false});
  EXPECT_NO_THROW(verify(g));
}

TEST(Verify, UnboundSymbol) {
  // A symbol that no graph input dim is exactly (only 2*s0 appears) is reported.
  Graph g;
  g.num_syms = 1;
  g.add_input(DType::f32, {SymInt::symbolic(0, 2)}, "arg0");
  expect_verify_error(g, {"symbol s0 is unbound"});
  g.num_syms = 2;
  g.add_input(DType::f32, {SymInt::symbolic(0)}, "arg1");
  expect_verify_error(g, {"symbol s1 is unbound"});
}

TEST(Verify, UnknownSymbol) {
  // Symbol numbers >= num_syms are reported, in shapes and in attributes.
  Graph g;
  g.num_syms = 1;
  Value* x = g.add_input(DType::f32, {SymInt::symbolic(0)}, "arg0");
  Node* n = g.add_op(OpId::relu, {x}, {}, {{DType::f32, {SymInt::symbolic(2)}}});
  expect_verify_error(g, {"node #0", "output 0 %1", "s2", "unknown symbol (num_syms=1)"});
  n->outputs[0]->shape = x->shape;
  n->sym_attrs.push_back({intern_attr_name("alpha"), -1, SymInt::symbolic(1), false});
  expect_verify_error(g, {"node #0", "symbolic attribute alpha", "unknown symbol"});
  n->sym_attrs.clear();
  g.rng_advance = SymInt::symbolic(4);
  expect_verify_error(g, {"rng_advance s4", "unknown symbol"});
}

TEST(Verify, GraphInputIndexMustMatch) {
  // Graph input index fields must match their position.
  Graph g;
  Value* x = g.add_input(DType::f32, {4}, "arg0");
  x->index = 1;
  expect_verify_error(g, {"graph input 0 %0 \"arg0\"", "records index 1"});
}

}  // namespace
}  // namespace kiln::ir
