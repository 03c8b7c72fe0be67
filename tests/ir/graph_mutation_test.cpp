// Tests of the Graph's mutation utilities (ir/src/graph.cpp): node order with
// insertions before nodes and erasures, cached positions, and use counts that
// include graph outputs, checked against naive recomputation after every step.
#include <gtest/gtest.h>

#include <algorithm>

#include "kiln/functional.h"
#include "kiln/ir/graph.h"
#include "kiln/ir/verify.h"

namespace kiln::ir {
namespace {

Value* neg_of(Graph& g, Value* x, Node* before = nullptr) {
  return g.add_op(OpId::neg, {x}, {}, {{x->dtype, x->shape}}, before)->output();
}

// position() agrees with the index in nodes(); num_uses/is_output agree with
// counting users and graph outputs.
void expect_consistent(const Graph& g) {
  const auto nodes = g.nodes();
  ASSERT_EQ(nodes.size(), g.num_nodes());
  for (size_t i = 0; i < nodes.size(); ++i) EXPECT_EQ(g.position(nodes[i]), i);
  auto check = [&](const Value* v) {
    const auto outs = static_cast<size_t>(std::count(g.outputs().begin(), g.outputs().end(), v));
    EXPECT_EQ(g.num_uses(v), v->users.size() + outs) << "%" << v->id();
    EXPECT_EQ(g.is_output(v), outs > 0) << "%" << v->id();
  };
  for (const Value* v : g.inputs()) check(v);
  for (const Node* n : nodes)
    for (const Value* v : n->outputs) check(v);
  EXPECT_NO_THROW(verify(g));
}

TEST(GraphMutation, PositionsAfterManyErasesAppendsAndInserts) {
  // Erases leave holes in the cached order that the next query closes; mixed
  // with appends (before and after the holes are closed) and inserts, the
  // order and every position must match a reference list at each query.
  Graph g;
  Value* x = g.add_input(DType::f32, to_sym_shape({4}), "arg0");
  std::vector<Node*> ref;  // the expected order
  for (int i = 0; i < 200; ++i) ref.push_back(g.add_op(OpId::neg, {x}, {}, {{DType::f32, {4}}}));
  uint64_t seed = 12345;
  auto next = [&](size_t n) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<size_t>((seed >> 33) % n);
  };
  for (int step = 0; step < 600; ++step) {
    const size_t what = next(10);
    if (what < 5 && ref.size() > 1) {  // erase (its outputs are unused)
      const size_t k = next(ref.size());
      g.erase(ref[k]);
      ref.erase(ref.begin() + static_cast<std::ptrdiff_t>(k));
    } else if (what < 8) {  // append
      ref.push_back(g.add_op(OpId::neg, {x}, {}, {{DType::f32, {4}}}));
    } else if (!ref.empty()) {  // insert before a node
      const size_t k = next(ref.size());
      Node* n = g.add_op(OpId::neg, {x}, {}, {{DType::f32, {4}}}, ref[k]);
      ref.insert(ref.begin() + static_cast<std::ptrdiff_t>(k), n);
    }
    if (next(4) == 0) {  // query: sometimes order, sometimes a single position
      if (next(2) == 0) {
        ASSERT_EQ(g.nodes(), ref) << "step " << step;
      } else if (!ref.empty()) {
        const size_t k = next(ref.size());
        ASSERT_EQ(g.position(ref[k]), k) << "step " << step;
      }
    }
  }
  ASSERT_EQ(g.nodes(), ref);
  for (size_t k = 0; k < ref.size(); ++k) EXPECT_EQ(g.position(ref[k]), k);
  EXPECT_EQ(g.num_nodes(), ref.size());
  EXPECT_NO_THROW(verify(g));
}

TEST(GraphMutation, PositionsFollowInsertionsAndErasures) {
  Graph g;
  Value* x = g.add_input(DType::f32, to_sym_shape({4}), "arg0");
  std::vector<Value*> chain{x};
  for (int i = 0; i < 6; ++i) chain.push_back(neg_of(g, chain.back()));
  g.add_output(chain.back(), "out0");
  expect_consistent(g);
  // Insert before the middle and before the first node, then append.
  Node* mid = chain[3]->producer;
  Value* side = neg_of(g, chain[2], mid);
  Value* first = neg_of(g, x, chain[1]->producer);
  g.add_output(side, "side");
  g.add_output(first, "first");
  expect_consistent(g);
  EXPECT_EQ(g.position(side->producer) + 1, g.position(mid));
  EXPECT_EQ(g.position(first->producer), 0u);
  neg_of(g, chain.back());  // a dead node at the end
  expect_consistent(g);
  // Erase the last node (positions stay) and a node in the middle.
  g.erase(g.nodes().back());
  expect_consistent(g);
  g.set_output(1, chain[2]);
  g.erase(side->producer);
  expect_consistent(g);
}

TEST(GraphMutation, OutputUsesFollowSetOutputAndReplaceAllUses) {
  Graph g;
  Value* x = g.add_input(DType::f32, to_sym_shape({4}), "arg0");
  Value* a = neg_of(g, x);
  Value* b = neg_of(g, x);
  g.add_output(a, "o0");
  g.add_output(a, "o1");  // one value, two outputs
  g.add_output(x, "o2");
  Value* c = neg_of(g, a);
  g.add_output(c, "o3");
  expect_consistent(g);
  EXPECT_EQ(g.num_uses(a), 3u);
  g.replace_all_uses(a, b);  // both outputs and the node move to b
  expect_consistent(g);
  EXPECT_EQ(g.num_uses(a), 0u);
  EXPECT_EQ(g.num_uses(b), 3u);
  EXPECT_EQ(g.outputs()[0], b);
  EXPECT_EQ(g.outputs()[1], b);
  g.set_output(0, x);
  expect_consistent(g);
  EXPECT_EQ(g.num_uses(x), 4u);  // a, b and two outputs
  g.erase(a->producer);
  expect_consistent(g);
}

TEST(GraphMutation, NodesOfAnotherGraphAreRefused) {
  Graph g, h;
  Value* x = g.add_input(DType::f32, to_sym_shape({4}), "arg0");
  Value* y = h.add_input(DType::f32, to_sym_shape({4}), "arg0");
  Value* a = neg_of(g, x);
  neg_of(h, y);
  Node* theirs = h.nodes().front();
  EXPECT_THROW(g.erase(theirs), InternalError);
  EXPECT_THROW(g.position(theirs), InternalError);
  EXPECT_THROW(g.add_op(OpId::neg, {a}, {}, {{DType::f32, to_sym_shape({4})}}, theirs),
               InternalError);
  expect_consistent(g);
  expect_consistent(h);
}

TEST(GraphMutation, MovedGraphKeepsItsNodes) {
  auto make = [] {
    Graph g;
    Value* x = g.add_input(DType::f32, to_sym_shape({4}), "arg0");
    g.add_output(neg_of(g, neg_of(g, x)), "out0");
    return g;
  };
  Graph g = make();
  Node* last = g.nodes().back();
  neg_of(g, g.inputs()[0], last);  // insert before a node of the moved graph
  expect_consistent(g);
  EXPECT_EQ(g.position(last), 2u);
  Graph h = std::move(g);
  h.erase(h.nodes()[1]);  // the dead node inserted above
  expect_consistent(h);
}

TEST(GraphMutation, NodesAndValuesKeepTheirAddressesAsTheGraphGrows) {
  // Passes hold raw Node* and Value* across insertions: the graph's storage
  // grows in blocks, never moving what it holds (thousands of nodes span many
  // blocks), and a moved graph keeps them too.
  Graph g;
  Value* x = g.add_input(DType::f32, to_sym_shape({4}), "arg0");
  std::vector<Node*> made;
  std::vector<Value*> outs;
  for (int i = 0; i < 5000; ++i) {
    Node* n = g.add_op(OpId::neg, {i % 3 == 0 ? x : outs.back()}, {}, {{DType::f32, {4}}});
    made.push_back(n);
    outs.push_back(n->output());
  }
  Graph h = std::move(g);
  ASSERT_EQ(h.nodes(), made);
  for (size_t i = 0; i < made.size(); ++i) {
    EXPECT_EQ(made[i]->output(), outs[i]);
    EXPECT_EQ(outs[i]->producer, made[i]);
    EXPECT_EQ(outs[i]->id(), static_cast<int>(i) + 1);
  }
  h.reserve(100, 100);  // a hint never moves what is there
  Node* more = h.add_op(OpId::neg, {outs.back()}, {}, {{DType::f32, {4}}});
  EXPECT_EQ(h.nodes().back(), more);
  EXPECT_EQ(h.nodes()[4999], made.back());
  expect_consistent(h);
}

TEST(GraphMutation, ErasedNodesReleaseTheirDataAndTheirSlotsAreReused) {
  Graph g;
  Value* x = g.add_input(DType::f32, to_sym_shape({4}), "arg0");
  Tensor data = kiln::ones({4});
  Node* c = g.add_constant(data);
  std::weak_ptr<TensorImpl> held = c->constant.impl_ptr();
  ASSERT_FALSE(held.expired());
  Value* kept = neg_of(g, x);
  g.add_output(kept, "out0");
  g.erase(c);  // the constant's copy goes with the node, not with the graph
  EXPECT_TRUE(held.expired());
  EXPECT_EQ(kept->producer->output(), kept);
  // New nodes after erasures (slots reused or not) are whole, fresh nodes.
  for (int i = 0; i < 20; ++i) {
    Node* d = g.add_op(OpId::neg, {x}, {}, {{DType::f32, {4}}});
    EXPECT_TRUE(d->attrs.empty());
    EXPECT_FALSE(d->constant.defined());
    EXPECT_EQ(d->inputs, std::vector<Value*>{x});
    if (i % 2 == 0) g.erase(d);
  }
  EXPECT_EQ(g.num_nodes(), 11u);
  expect_consistent(g);
}

TEST(GraphMutation, ConstantsAreCopiesOfTheirTensorsView) {
  // add_constant copies what the tensor shows (a contiguous slice past its
  // storage's start, a transposed view), never shares the storage.
  Tensor base = kiln::arange(0, 12, 1, DType::f32);
  Tensor sliced = base.slice(0, 2, 6);  // contiguous, offset 2
  Tensor transposed = base.reshape({3, 4}).transpose(0, 1);
  Graph g;
  Node* a = g.add_constant(sliced);
  Node* b = g.add_constant(transposed);
  base.mul_(10);  // the graph's copies keep the values they were given
  EXPECT_EQ(a->constant.to_vector<float>(), (std::vector<float>{2, 3, 4, 5}));
  EXPECT_EQ(a->constant.shape(), (Dims{4}));
  EXPECT_EQ(b->constant.shape(), (Dims{4, 3}));
  EXPECT_EQ(b->constant.to_vector<float>(),
            (std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  EXPECT_TRUE(b->constant.is_contiguous());
  EXPECT_EQ(a->output()->shape, to_sym_shape({4}));
}

}  // namespace
}  // namespace kiln::ir
