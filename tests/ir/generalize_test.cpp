// ir::generalize: two traces at two sizes of a dynamic dim become one symbolic graph.
#include "kiln/ir/generalize.h"

#include <gtest/gtest.h>

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

// Sizes, attributes, constants and rng_advance that grow with the batch become
// affine in s0; the result verifies, round-trips through text and evaluates back.
TEST(Generalize, BatchDependentNumbersBecomeSymbolic) {
  auto a = parse(trace_at(8));
  auto b = parse(trace_at(16));
  SymSample s{8, 16};
  std::string why;
  auto g = generalize(*a, *b, std::span<const SymSample>(&s, 1), &why);
  ASSERT_TRUE(g) << why;
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
  SymSample s{4, 10};
  std::string why;
  auto g = generalize(*a, *b, std::span<const SymSample>(&s, 1), &why);
  ASSERT_TRUE(g) << why;
  ASSERT_EQ(g->nodes()[0]->sym_attrs.size(), 1u);
  EXPECT_TRUE(g->nodes()[0]->sym_attrs[0].reciprocal);
  EXPECT_EQ(g->nodes()[0]->sym_attrs[0].expr, SymInt::symbolic(0, 2));
}

// Traces that differ in structure, or in a number that fits no symbol, do not generalize.
TEST(Generalize, RefusesWhatItCannotExpress) {
  SymSample s{8, 16};
  std::string why;
  auto a = parse(trace_at(8));
  auto other = parse(R"(graph(%0: f32[16, 4] "arg0") {
  %1 = neg(%0) : f32[16, 4]
  return %1 "out0"
})");
  EXPECT_FALSE(generalize(*a, *other, std::span<const SymSample>(&s, 1), &why));
  EXPECT_NE(why.find("different numbers of nodes"), std::string::npos) << why;
  // 8 -> 16 for the input, but 3 -> 7 elsewhere: 4/8 is not an integer slope.
  auto x = parse(R"(graph(%0: f32[8] "arg0") {
  %1 = slice(%0) {dim=0, start=0, end=3, step=1} : f32[3]
  return %1 "out0"
})");
  auto y = parse(R"(graph(%0: f32[16] "arg0") {
  %1 = slice(%0) {dim=0, start=0, end=7, step=1} : f32[7]
  return %1 "out0"
})");
  EXPECT_FALSE(generalize(*x, *y, std::span<const SymSample>(&s, 1), &why));
  EXPECT_NE(why.find("not affine"), std::string::npos) << why;
}

}  // namespace
}  // namespace kiln::ir
