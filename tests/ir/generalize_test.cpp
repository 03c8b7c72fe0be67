// ir::generalize: traces at several sizes of dynamic dims become one symbolic
// graph, only when they determine every size-dependent number.
#include "kiln/ir/generalize.h"

#include <gtest/gtest.h>

#include <charconv>

#include "kiln/ir/text.h"
#include "kiln/ir/verify.h"
#include "kiln/kiln.h"

namespace kiln::ir {
namespace {

std::string trace_at(int64_t n) {
  return str("graph(%0: f32[", n, ", 4] \"arg0\") rng_advance=", 4 * n, " {\n",
             "  %1 = reshape(%0) {shape=[", 4 * n, "]} : f32[", 4 * n, "]\n",
             "  %2 = sum(%1) {dims=[], keepdim=false} : f32[]\n", "  %3 = constant wrapped f64[] ",
             n, ".0\n", "  %4 = div(%2, %3) : f32[]\n", "  %5 = rand_uniform() {shape=[", n,
             ", 4], dtype=f32, seed=0, offset=0} : f32[", n, ", 4]\n",
             "  return %4 \"out0\", %5 \"out1\"\n}\n");
}

// The shortest text that reads back as exactly v.
std::string exact(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  std::string t(buf, r.ptr);
  if (t.find_first_of(".e") == std::string::npos) t += ".0";
  return t;
}

// Generalizes traces given with their symbol values.
Generalized gen(const std::vector<std::pair<const Graph*, std::vector<int64_t>>>& traces) {
  std::vector<SymSample> s;
  for (const auto& [g, syms] : traces) s.push_back({g, syms});
  return generalize(s);
}

// Sizes, attributes, constants and rng_advance that grow with the batch become
// polynomials in s0; the result verifies, round-trips through text and evaluates back.
TEST(Generalize, BatchDependentNumbersBecomeSymbolic) {
  auto a = parse(trace_at(8));
  auto b = parse(trace_at(16));
  std::string why;
  Generalized r = gen({{a.get(), {8}}, {b.get(), {16}}});
  auto& g = r.graph;
  ASSERT_TRUE(g) << r.why;
  EXPECT_EQ(g->num_syms, 1);
  EXPECT_EQ(g->inputs()[0]->shape[0], SymInt::symbolic(0));
  EXPECT_EQ(g->rng_advance, SymInt::symbolic(0, 4));
  const std::string text = print(*g);
  EXPECT_NE(text.find("shape=[4*s0]"), std::string::npos) << text;
  EXPECT_NE(text.find("{value=s0}"), std::string::npos) << text;
  verify(*g);
  auto back = parse(text);
  EXPECT_TRUE(structurally_equal(*back, *g, &why)) << why << "\n" << text;
  const std::vector<int64_t> at5{5};
  EXPECT_EQ(g->nodes()[0]->eval_attrs(at5).dims("shape"), (Dims{20}));
}

// A reciprocal (1/n, as in x * (1.0 / n)) is recognised as 1/(a*s+b).
TEST(Generalize, ReciprocalScalesAreRecognised) {
  auto at = [](int64_t n) {
    return parse(str("graph(%0: f32[", n, "] \"arg0\") {\n  %1 = constant wrapped f64[] ",
                     1.0 / static_cast<double>(2 * n), "\n  %2 = mul(%0, %1) : f32[", n,
                     "]\n  return %2 \"out0\"\n}\n"));
  };
  auto a = at(4);
  auto b = at(10);
  Generalized r = gen({{a.get(), {4}}, {b.get(), {10}}});
  auto& g = r.graph;
  ASSERT_TRUE(g) << r.why;
  ASSERT_EQ(g->nodes()[0]->sym_attrs.size(), 1u);
  EXPECT_TRUE(g->nodes()[0]->sym_attrs[0].reciprocal);
  EXPECT_EQ(g->nodes()[0]->sym_attrs[0].expr, SymInt::symbolic(0, 2));
}

// Traces that differ in structure, or in a number that is no polynomial of the
// sizes, do not generalize; a number that two traces do not determine waits
// for more traces.
TEST(Generalize, RefusesWhatItCannotExpress) {
  auto a = parse(trace_at(8));
  auto other = parse(R"(graph(%0: f32[16, 4] "arg0") {
  %1 = neg(%0) : f32[16, 4]
  return %1 "out0"
})");
  Generalized r = gen({{a.get(), {8}}, {other.get(), {16}}});
  EXPECT_FALSE(r.graph);
  EXPECT_FALSE(r.need_more);
  EXPECT_NE(r.why.find("different numbers of nodes"), std::string::npos) << r.why;
  // The slice end 3, 7, 20, 2 at sizes 8, 16, 24, 32 is no polynomial of <= 3 terms.
  auto slice_at = [](int64_t n, int64_t end) {
    return parse(str("graph(%0: f32[", n, "] \"arg0\") {\n  %1 = slice(%0) {dim=0, start=0, end=",
                     end, ", step=1} : f32[", end, "]\n  return %1 \"out0\"\n}\n"));
  };
  auto x = slice_at(8, 3), y = slice_at(16, 7), z = slice_at(24, 20), w = slice_at(32, 2);
  r = gen({{x.get(), {8}}, {y.get(), {16}}});
  EXPECT_FALSE(r.graph);
  EXPECT_TRUE(r.need_more) << r.why;
  EXPECT_NE(r.why.find("not yet determined"), std::string::npos) << r.why;
  r = gen({{x.get(), {8}}, {y.get(), {16}}, {z.get(), {24}}, {w.get(), {32}}});
  EXPECT_FALSE(r.graph);
  EXPECT_FALSE(r.need_more) << r.why;
  EXPECT_NE(r.why.find("not a polynomial"), std::string::npos) << r.why;
}

// Two dynamic dims that change together: the element count 80 -> 28 of
// [4, 20] -> [2, 14] is s0*s1 (not the line 26*s0-24 of the old one-symbol
// fit), mean's 1/n is 1/(s0*s1), and the graph evaluates right at other sizes.
TEST(Generalize, ProductsOfTwoDynamicDims) {
  auto at = [](int64_t b, int64_t l) {
    return parse(str("graph(%0: f32[", b, ", ", l, "] \"arg0\") {\n  %1 = reshape(%0) {shape=[",
                     b * l, "]} : f32[", b * l,
                     "]\n  %2 = sum(%1) {dims=[], keepdim=false} : f32[]\n",
                     "  %3 = constant wrapped f64[] ", exact(1.0 / static_cast<double>(b * l)),
                     "\n  %4 = mul(%2, %3) : f32[]\n  return %4 \"out0\"\n}\n"));
  };
  auto a = at(4, 20), b = at(2, 14);
  Generalized r = gen({{a.get(), {4, 20}}, {b.get(), {2, 14}}});
  ASSERT_TRUE(r.graph) << r.why;
  const Graph& g = *r.graph;
  EXPECT_EQ(g.num_syms, 2);
  const SymInt prod = SymInt::symbolic(0) * SymInt::symbolic(1);
  EXPECT_EQ(g.nodes()[0]->outputs[0]->shape[0], prod);
  ASSERT_EQ(g.nodes()[2]->sym_attrs.size(), 1u);
  EXPECT_EQ(g.nodes()[2]->sym_attrs[0].expr, prod);
  EXPECT_TRUE(g.nodes()[2]->sym_attrs[0].reciprocal);
  const std::vector<int64_t> at313{3, 13};
  EXPECT_EQ(g.nodes()[0]->eval_attrs(at313).dims("shape"), (Dims{39}));
  const std::string text = print(g);
  EXPECT_NE(text.find("1/(s0*s1)"), std::string::npos) << text;
  std::string why;
  EXPECT_TRUE(structurally_equal(*parse(text), g, &why)) << why << "\n" << text;
}

// A line always fits two points: n+1 (a slice end) is taken only from three
// traces, and n*n (a host-computed size) from two, since no other one-term
// polynomial fits them.
TEST(Generalize, FitsNeedATraceToSpare) {
  auto at = [](int64_t n, int64_t end) {
    return parse(str("graph(%0: f32[", n, ", ", n * n,
                     "] \"arg0\") {\n  %1 = slice(%0) {dim=1, "
                     "start=0, end=",
                     end, ", step=1} : f32[", n, ", ", end, "]\n  return %1 \"out0\"\n}\n"));
  };
  auto a = at(2, 3), b = at(3, 4), c = at(5, 6);
  Generalized r = gen({{a.get(), {2}}, {b.get(), {3}}});
  EXPECT_FALSE(r.graph);
  EXPECT_TRUE(r.need_more) << r.why;
  r = gen({{a.get(), {2}}, {b.get(), {3}}, {c.get(), {5}}});
  ASSERT_TRUE(r.graph) << r.why;
  EXPECT_EQ(r.graph->inputs()[0]->shape[1], SymInt::symbolic(0) * SymInt::symbolic(0));
  EXPECT_EQ(r.graph->nodes()[0]->sym_attrs.at(0).expr, SymInt::symbolic(0, 1, 1));
}

// Dims that are proportional in every trace cannot be told apart: more traces needed.
TEST(Generalize, ProportionalDimsAreAmbiguous) {
  auto at = [](int64_t b, int64_t l) {
    return parse(str("graph(%0: f32[", b, ", ", l, "] \"arg0\") {\n  %1 = neg(%0) : f32[", b, ", ",
                     l, "]\n  return %1 \"out0\"\n}\n"));
  };
  auto a = at(4, 20), b = at(8, 40), c = at(8, 24);
  Generalized r = gen({{a.get(), {4, 20}}, {b.get(), {8, 40}}});
  EXPECT_FALSE(r.graph);
  EXPECT_TRUE(r.need_more) << r.why;
  r = gen({{a.get(), {4, 20}}, {b.get(), {8, 40}}, {c.get(), {8, 24}}});
  ASSERT_TRUE(r.graph) << r.why;
  EXPECT_EQ(r.graph->inputs()[0]->shape[1], SymInt::symbolic(1));
}

}  // namespace
}  // namespace kiln::ir
