// Passes on large random graphs. The graph's mutation utilities keep the node
// order in a list with cached positions and count graph-output uses per value
// (so erase, insert-before, num_uses and position are O(1)); these tests check
// that dce and cse still give exactly what simple reference implementations,
// written here from the passes' documented rules, give, and that the standard
// pipeline keeps every value bit for bit.
#include <cmath>
#include <cstring>
#include <map>
#include <tuple>
#include <unordered_map>

#include "executor/executor.h"
#include "kiln/passes/cse.h"
#include "kiln/passes/dce.h"
#include "passes/pass_test_util.h"

namespace kiln::passes {
namespace {

// splitmix64: deterministic, independent of the library's generator.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed * 0x2545F4914F6CDD1Dull + 0x9E3779B97F4A7C15ull) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return static_cast<size_t>(next() % n); }
  bool chance(int percent) { return below(100) < static_cast<size_t>(percent); }

 private:
  uint64_t s_;
};

constexpr OpId kBinary[] = {OpId::add, OpId::mul, OpId::sub, OpId::maximum};
constexpr OpId kUnary[] = {OpId::neg, OpId::exp, OpId::tanh};
constexpr double kConstants[] = {0.5, 2.0, 1.0, 0.0, -0.0};

// A random graph of about `n` nodes over four f32[8] inputs: scalar constants
// (repeated values, some inserted before earlier nodes), a hub input read by
// many nodes, duplicated and commuted subexpressions, dead chains, and graph
// outputs that repeat values.
std::unique_ptr<ir::Graph> random_graph(uint64_t seed, int n) {
  Rng rng(seed);
  auto g = std::make_unique<ir::Graph>();
  std::vector<ir::Value*> pool;
  for (int i = 0; i < 4; ++i) pool.push_back(testing::input(*g, DType::f32, {8}, str("arg", i)));
  ir::Value* hub = pool[0];
  std::vector<ir::Node*> ops;
  auto pick = [&] {
    // Mostly recent values (deep chains), sometimes anything, sometimes the hub.
    if (rng.chance(10)) return hub;
    if (rng.chance(60)) return pool[pool.size() - 1 - rng.below(std::min<size_t>(pool.size(), 8))];
    return pool[rng.below(pool.size())];
  };
  for (int i = 0; i < n; ++i) {
    const size_t kind = rng.below(100);
    if (kind < 12) {
      // A constant, sometimes placed before an earlier node (it has no inputs).
      const auto nodes = g->nodes();
      ir::Node* before =
          !nodes.empty() && rng.chance(50) ? nodes[rng.below(nodes.size())] : nullptr;
      Tensor c = scalar_tensor(Scalar(kConstants[rng.below(std::size(kConstants))]), DType::f32);
      pool.push_back(g->add_constant(c, before)->output());
    } else if (kind < 30 && !ops.empty()) {
      // A duplicate of an earlier op, commuted half the time.
      const ir::Node* d = ops[rng.below(ops.size())];
      std::vector<ir::Value*> in = d->inputs;
      if (in.size() == 2 && rng.chance(50)) std::swap(in[0], in[1]);
      ops.push_back(g->add_op_inferred(d->op, in, d->attrs));
      pool.push_back(ops.back()->output());
    } else if (kind < 75) {
      const OpId op = kBinary[rng.below(std::size(kBinary))];
      ops.push_back(g->add_op_inferred(op, {pick(), pick()}, {}));
      pool.push_back(ops.back()->output());
    } else {
      const OpId op = kUnary[rng.below(std::size(kUnary))];
      ops.push_back(g->add_op_inferred(op, {pick()}, {}));
      pool.push_back(ops.back()->output());
    }
  }
  const size_t outs = std::max<size_t>(1, static_cast<size_t>(n) / 16);
  for (size_t k = 0; k < outs; ++k) {
    ir::Value* v = pool[pool.size() / 2 + rng.below(pool.size() - pool.size() / 2)];
    g->add_output(v, str("out", k));
    if (rng.chance(20)) g->add_output(v, str("again", k));  // one value, two outputs
  }
  return g;
}

// A new graph with g's inputs, the nodes `keep` selects (in g's order, inputs
// mapped through `rep` first) and g's outputs (mapped), for printing.
std::unique_ptr<ir::Graph> rebuild(const ir::Graph& g, const std::vector<bool>& keep,
                                   std::unordered_map<const ir::Value*, const ir::Value*> rep) {
  auto r = std::make_unique<ir::Graph>();
  std::unordered_map<const ir::Value*, ir::Value*> map;
  for (const ir::Value* v : g.inputs()) map[v] = r->add_input(v->dtype, v->shape, v->name);
  auto get = [&](const ir::Value* v) {
    auto it = rep.find(v);
    return map.at(it == rep.end() ? v : it->second);
  };
  const auto nodes = g.nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!keep[i]) continue;
    const ir::Node* n = nodes[i];
    ir::Node* m;
    if (n->is_constant()) {
      m = r->add_constant(n->constant);
    } else {
      std::vector<ir::Value*> in;
      for (const ir::Value* v : n->inputs) in.push_back(get(v));
      m = r->add_op_inferred(n->op, in, n->attrs);
    }
    map[n->output()] = m->output();
  }
  for (size_t o = 0; o < g.outputs().size(); ++o)
    r->add_output(get(g.outputs()[o]), g.output_names()[o]);
  return r;
}

// dce's rule: a node is live if a graph output or a live node reads one of its outputs.
std::string reference_dce(const ir::Graph& g) {
  const auto nodes = g.nodes();
  std::map<const ir::Value*, bool> needed;
  for (const ir::Value* v : g.outputs()) needed[v] = true;
  std::vector<bool> keep(nodes.size(), false);
  for (size_t i = nodes.size(); i-- > 0;) {
    for (const ir::Value* o : nodes[i]->outputs) keep[i] = keep[i] || needed.count(o);
    if (keep[i])
      for (const ir::Value* v : nodes[i]->inputs) needed[v] = true;
  }
  return ir::print(*rebuild(g, keep, {}));
}

// cse's rule for these graphs: a node merges into the first earlier node with
// the same op and inputs (in either order for add and mul; maximum keeps its
// order for floats), a constant into the first with the same bits.
std::string reference_cse(const ir::Graph& g) {
  const auto nodes = g.nodes();
  std::unordered_map<const ir::Value*, const ir::Value*> rep;
  std::unordered_map<const ir::Value*, int> id;
  int next = 0;
  for (const ir::Value* v : g.inputs()) id[v] = next++;
  auto canon = [&](const ir::Value* v) {
    auto it = rep.find(v);
    return id.at(it == rep.end() ? v : it->second);
  };
  std::map<std::tuple<int, int, int, uint64_t>, const ir::Value*> seen;
  std::vector<bool> keep(nodes.size(), true);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const ir::Node* n = nodes[i];
    std::tuple<int, int, int, uint64_t> key;
    if (n->is_constant()) {
      const double x = n->constant.item<double>();
      uint64_t bits;
      std::memcpy(&bits, &x, sizeof bits);
      key = {-1, -1, -1, bits};
    } else {
      int a = canon(n->inputs[0]), b = n->inputs.size() > 1 ? canon(n->inputs[1]) : -1;
      if ((n->is_op(OpId::add) || n->is_op(OpId::mul)) && b < a) std::swap(a, b);
      key = {static_cast<int>(n->op), a, b, 0};
    }
    auto [it, fresh] = seen.emplace(key, n->output());
    if (fresh) {
      id[n->output()] = next++;
    } else {
      keep[i] = false;
      rep[n->output()] = it->second;
    }
  }
  return ir::print(*rebuild(g, keep, rep));
}

TEST(LargeGraphs, DceMatchesTheReference) {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    auto g = random_graph(seed, 3000);
    const std::string want = reference_dce(*g);
    dce(*g);
    ASSERT_NO_THROW(ir::verify(*g));
    EXPECT_EQ(ir::print(*g), want) << "seed " << seed;
  }
}

TEST(LargeGraphs, CseMatchesTheReference) {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    auto g = random_graph(seed, 3000);
    const std::string want = reference_cse(*g);
    EXPECT_TRUE(cse(*g));
    ASSERT_NO_THROW(ir::verify(*g));
    EXPECT_EQ(ir::print(*g), want) << "seed " << seed;
    EXPECT_FALSE(cse(*g)) << "a second run finds nothing";
  }
}

TEST(LargeGraphs, StandardPipelineKeepsEveryValue) {
  // The optimized graph computes the same bits as the graph as built (no
  // fusion: both run the eager kernels).
  for (uint64_t seed = 5; seed <= 6; ++seed) {
    std::shared_ptr<ir::Graph> g = random_graph(seed, 2000);
    std::shared_ptr<ir::Graph> opt = g->clone();
    run_pipeline(*opt, standard_pipeline());
    EXPECT_LT(opt->num_nodes(), g->num_nodes());
    manual_seed(seed);
    std::vector<Tensor> in;
    for (size_t i = 0; i < g->inputs().size(); ++i) in.push_back(randn({8}));
    RunArgs args;
    args.inputs = in;
    const std::vector<Tensor> want = Executor(g).run(args);
    const std::vector<Tensor> got = Executor(opt).run(args);
    ASSERT_EQ(got.size(), want.size());
    for (size_t o = 0; o < got.size(); ++o) {
      ASSERT_EQ(got[o].shape(), want[o].shape());
      const std::vector<double> a = got[o].to_vector<double>(), b = want[o].to_vector<double>();
      for (size_t i = 0; i < a.size(); ++i)
        EXPECT_TRUE(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))
            << "seed " << seed << ", output " << o << "[" << i << "]: " << a[i] << " vs " << b[i];
    }
  }
}

}  // namespace
}  // namespace kiln::passes
