// IR text printer and parser: round trips, the exact text form, and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <sstream>
#include <string>

#include "kiln/functional.h"
#include "kiln/ir/graph.h"
#include "kiln/ir/text.h"
#include "kiln/ir/verify.h"
#include "runtime/test_util.h"

namespace kiln::ir {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// parse(print(g)) must be structurally equal to g, and printing it again must
// give the same text.
void expect_round_trip(const Graph& g) {
  std::string text = print(g);
  std::unique_ptr<Graph> back;
  try {
    back = parse(text);
  } catch (const Error& e) {
    FAIL() << e.what() << "\n" << text;
  }
  std::string why;
  EXPECT_TRUE(structurally_equal(*back, g, &why)) << why << "\n" << text;
  EXPECT_EQ(print(*back), text);
}

template <typename T>
Tensor make(const Dims& shape, std::initializer_list<T> vals) {
  Tensor t = kiln::empty(shape, dtype_v<T>);
  EXPECT_EQ(static_cast<size_t>(t.numel()), vals.size());
  if (vals.size()) std::memcpy(t.data_ptr(), vals.begin(), vals.size() * sizeof(T));
  return t;
}

Tensor wrapped(Tensor t) {
  t.impl()->wrapped_number = true;
  return t;
}

SymAttr sym_attr(const char* name, int32_t index, SymInt e, bool reciprocal = false) {
  SymAttr s;
  s.name = intern_attr_name(name);
  s.index = index;
  s.expr = e;
  s.reciprocal = reciprocal;
  return s;
}

TEST(IrText, RoundTripMultiOutputOp) {
  // A two-output op (max_pool2d) keeps both outputs, their dtypes and uses.
  Graph g;
  Value* x = g.add_input(DType::f32, {2, 3, 8, 8}, "arg0");
  Attrs a;
  a.set("kernel_size", Dims{2, 2}).set("stride", Dims{2, 2}).set("padding", Dims{0, 0});
  Node* pool =
      g.add_op(OpId::max_pool2d, {x}, a, {{DType::f32, {2, 3, 4, 4}}, {DType::i64, {2, 3, 4, 4}}});
  Node* r = g.add_op(OpId::relu, {pool->output(0)}, {}, {{DType::f32, {2, 3, 4, 4}}});
  g.add_output(r->output(), "out0");
  g.add_output(pool->output(1), "indices");
  expect_round_trip(g);
  EXPECT_NE(print(g).find("%1, %2 = max_pool2d(%0) {kernel_size=[2, 2], stride=[2, 2], "
                          "padding=[0, 0]} : f32[2, 3, 4, 4], i64[2, 3, 4, 4]"),
            std::string::npos)
      << print(g);
}

TEST(IrText, RoundTripEveryAttrKind) {
  // int64, double (incl. inf/nan/-0.0/tiny/huge), bool, dtype and Dims attrs.
  Graph g;
  Value* x = g.add_input(DType::f32, {4}, "x");
  Attrs a;
  a.set("i", int64_t{-7}).set("big", int64_t{std::numeric_limits<int64_t>::min()});
  a.set("half", 0.5).set("two", 2.0).set("eps", 1e-8).set("huge", 1e300).set("neg0", -0.0);
  a.set("tiny", 5e-324).set("pinf", kInf).set("ninf", -kInf).set("nan", kNaN);
  a.set("tenth", 0.1).set("yes", true).set("no", false).set("dt", DType::bf16);
  a.set("empty", Dims{}).set("dims", Dims{-1, 0, 3});
  Node* n = g.add_op(OpId::copy, {x}, a, {{DType::f32, {4}}});
  g.add_output(n->output(), "y");
  expect_round_trip(g);
  const std::string text = print(g);
  for (const char* part :
       {"i=-7", "big=-9223372036854775808", "half=0.5", "two=2.0", "eps=1e-08",
        "huge=1.0000000000000001e+300", "neg0=-0.0", "pinf=inf", "ninf=-inf", "nan=nan", "yes=true",
        "no=false", "dt=bf16", "empty=[]", "dims=[-1, 0, 3]"})
    EXPECT_NE(text.find(part), std::string::npos) << part << "\n" << text;
  // A double stays a double and an int an int.
  auto back = parse(text);
  const Attrs& b = back->nodes()[0]->attrs;
  EXPECT_TRUE(std::holds_alternative<double>(b.items()[3].second));
  EXPECT_TRUE(std::holds_alternative<int64_t>(b.items()[0].second));
  EXPECT_TRUE(std::signbit(b.f("neg0")));
}

TEST(IrText, RoundTripSymbolicDimsAndAttrs) {
  // Symbolic dims, Dims/scalar/reciprocal/double sym attrs and rng_advance survive.
  Graph g;
  g.num_syms = 2;
  g.rng_advance = SymInt::symbolic(0, 4);
  Value* x = g.add_input(DType::f32, {SymInt::symbolic(0), 784}, "arg0");
  Value* y = g.add_input(
      DType::f32,
      {SymInt::symbolic(0, 2, 1), SymInt::symbolic(1, -1, 4), SymInt::symbolic(1, 1, -3)}, "arg1");
  Attrs ra;
  ra.set("shape", Dims{0, 392});
  Node* r = g.add_op(OpId::reshape, {x}, ra, {{DType::f32, {SymInt::symbolic(0, 2), 392}}});
  r->sym_attrs.push_back(sym_attr("shape", 0, SymInt::symbolic(0, 2)));
  Attrs sa;
  sa.set("dim", int64_t{0}).set("start", int64_t{1}).set("end", int64_t{0});
  sa.set("step", int64_t{1});
  Node* s = g.add_op(
      OpId::slice, {y}, sa,
      {{DType::f32,
        {SymInt::symbolic(0, 2), SymInt::symbolic(1, -1, 4), SymInt::symbolic(1, 1, -3)}}});
  s->sym_attrs.push_back(sym_attr("end", -1, SymInt::symbolic(0, 2, 1)));
  Attrs fa;
  fa.set("shape", Dims{0, 0}).set("value", 0.0).set("dtype", DType::f32);
  Node* f = g.add_op(OpId::full, {}, fa,
                     {{DType::f32, {SymInt::symbolic(1), SymInt::symbolic(0, -1, 5)}}});
  f->sym_attrs.push_back(sym_attr("shape", 0, SymInt::symbolic(1)));
  f->sym_attrs.push_back(sym_attr("shape", 1, SymInt::symbolic(0, -1, 5)));
  f->sym_attrs.push_back(sym_attr("value", -1, SymInt::symbolic(0, 32), true));
  Attrs pa;
  pa.set("pads", Dims{0, 0}).set("value", 0.0);
  Node* p = g.add_op(OpId::pad, {x}, pa, {{DType::f32, {SymInt::symbolic(0), 784}}});
  p->sym_attrs.push_back(sym_attr("value", -1, SymInt::symbolic(0, 2, 1)));
  g.add_output(r->output(), "a");
  g.add_output(p->output(), "d");
  g.add_output(s->output(), "b");
  g.add_output(f->output(), "c");
  expect_round_trip(g);
  const std::string text = print(g);
  for (const char* part :
       {"syms=2 rng_advance=4*s0 {", "f32[2*s0+1, -1*s1+4, s1-3]", "{shape=[2*s0, 392]}",
        "end=2*s0+1", "shape=[s1, -1*s0+5]", "value=1/(32*s0)", "value=1.0*(2*s0+1)"})
    EXPECT_NE(text.find(part), std::string::npos) << part << "\n" << text;
}

TEST(IrText, RoundTripPolynomialSizes) {
  // Products and powers of symbols (two dynamic dims: B*L elements, mean's
  // 1/(B*L)) print canonically, read back equal, and any order of terms parses.
  const SymInt b = SymInt::symbolic(0), l = SymInt::symbolic(1);
  EXPECT_EQ(to_string(b * l), "s0*s1");
  EXPECT_EQ(to_string(b * l * l * SymInt(3) - l + SymInt(2)), "3*s0*s1^2-s1+2");
  EXPECT_EQ(to_string(SymInt(-1) * b * l + b), "-1*s0*s1+s0");
  EXPECT_EQ(to_string(b * l - b * l), "0");
  EXPECT_TRUE((b * l - b * l).is_static());
  EXPECT_EQ((b + SymInt(1)) * (b - SymInt(1)), b * b - SymInt(1));
  const std::vector<int64_t> at{3, 5};
  EXPECT_EQ((b * l * l * SymInt(3) - l + SymInt(2)).eval(at), 3 * 3 * 25 - 5 + 2);
  auto g = parse(
      "graph(%x: f32[s0, s1] \"x\") syms=2 rng_advance=s1*s0 {\n"
      "  %y = reshape(%x) {shape=[s1*s0]} : f32[s0*s1]\n"
      "  %z = full() {shape=[], value=1/(s0*s1), dtype=f32} : f32[]\n"
      "  %w = full() {shape=[s1^2-s1+s0*s0^2, 2], value=0.0, dtype=f32} : f32[s0^3+s1^2-s1, 2]\n"
      "  return %y \"y\", %z \"z\", %w \"w\"\n"
      "}\n");
  const std::string text = print(*g);
  for (const char* part :
       {"rng_advance=s0*s1", "shape=[s0*s1]", "value=1/(s0*s1)", "f32[s0^3+s1^2-s1, 2]"})
    EXPECT_NE(text.find(part), std::string::npos) << part << "\n" << text;
  expect_round_trip(*g);
  verify(*g);
  EXPECT_EQ(g->nodes()[1]->eval_attrs(at).f("value"), 1.0 / 15);
  for (const char* bad : {"f32[s16]", "f32[s0^16]", "f32[s0^0]", "f32[s0*2]", "f32[s0^9*s0^9]"})
    EXPECT_THROW(parse(str("graph(%x: ", bad, " \"x\") syms=1 {\n  return\n}\n")), Error) << bad;
}

TEST(IrText, SymbolicAttrPlaceholders) {
  // Parsed sym entries store a 0 / 0.0 placeholder that eval_attrs replaces.
  auto g = parse(
      "graph(%x: f32[s0, 4] \"x\") syms=1 {\n"
      "  %y = reshape(%x) {shape=[2*s0, 2]} : f32[2*s0, 2]\n"
      "  %z = full() {shape=[], value=1/(s0+1), n=s0-1, m=1.0*(s0), dtype=f32} : f32[]\n"
      "  return %y \"y\", %z \"z\"\n"
      "}\n");
  auto nodes = g->nodes();
  EXPECT_EQ(nodes[0]->attrs.dims("shape"), (Dims{0, 2}));
  ASSERT_EQ(nodes[0]->sym_attrs.size(), 1u);
  EXPECT_EQ(nodes[0]->sym_attrs[0], sym_attr("shape", 0, SymInt::symbolic(0, 2)));
  const int64_t s0[] = {3};
  EXPECT_EQ(nodes[0]->eval_attrs(s0).dims("shape"), (Dims{6, 2}));
  EXPECT_EQ(nodes[1]->attrs.f("value"), 0.0);
  EXPECT_EQ(nodes[1]->attrs.i("n"), 0);
  Attrs e = nodes[1]->eval_attrs(s0);
  EXPECT_EQ(e.f("value"), 0.25);
  EXPECT_EQ(e.i("n"), 2);
  EXPECT_EQ(e.f("m"), 3.0);  // stays a double
}

TEST(IrText, RoundTripConstantsOfEveryDtype) {
  // Constants of all dtypes incl. +-NaN/inf/-0.0/subnormals/extremes, wrapped, 0-d, empty.
  Graph g;
  const float fnan = std::numeric_limits<float>::quiet_NaN();
  const float finf = std::numeric_limits<float>::infinity();
  g.add_constant(make<float>({7}, {1.0f, -2.5f, 0.1f, fnan, -fnan, -finf, -0.0f}));
  g.add_constant(make<float>({2, 2}, {1.4e-45f, 3.4028235e38f, -1e-30f, 16777217.0f}));
  g.add_constant(make<double>({5}, {0.1, -0.0, 5e-324, 1.7976931348623157e308, -kNaN}));
  g.add_constant(
      make<Half>({5}, {Half(1.5f), Half(65504.0f), Half(6e-8f), Half(-0.0f), Half(fnan)}));
  g.add_constant(
      make<BFloat16>({4}, {BFloat16(3.140625f), BFloat16(1e38f), BFloat16(-finf), BFloat16(fnan)}));
  g.add_constant(make<int64_t>(
      {3}, {std::numeric_limits<int64_t>::min(), 0, std::numeric_limits<int64_t>::max()}));
  g.add_constant(make<int32_t>({2}, {std::numeric_limits<int32_t>::min(), 2147483647}));
  g.add_constant(make<uint8_t>({3}, {0, 7, 255}));
  g.add_constant(make<bool>({3}, {true, false, true}));
  g.add_constant(make<float>({0}, {}));
  g.add_constant(make<double>({2, 0, 3}, {}));
  g.add_constant(make<float>({}, {2.0f}));
  g.add_constant(scalar_tensor(Scalar(0.5)));
  g.add_constant(scalar_tensor(Scalar(int64_t{-3})));
  g.add_constant(scalar_tensor(Scalar(true)));
  g.add_constant(wrapped(make<int32_t>({}, {9})));
  Node* c = g.add_constant(scalar_tensor(Scalar(0.03125)));
  c->sym_attrs.push_back(sym_attr("value", -1, SymInt::symbolic(0, 32), true));
  Node* d = g.add_constant(scalar_tensor(Scalar(int64_t{7})));
  d->sym_attrs.push_back(sym_attr("value", -1, SymInt::symbolic(0, 1, -1)));
  g.num_syms = 1;
  for (Node* n : g.nodes()) g.add_output(n->output(), "");
  expect_round_trip(g);
  const std::string text = print(g);
  for (const char* part :
       {"%0 = constant f32[7] [1.0, -2.5, 0.100000001, nan, -nan, -inf, -0.0]",
        "constant f16[5] [1.5, 65504.0, 5.96046448e-08, -0.0, nan]",
        "constant i64[3] [-9223372036854775808, 0, 9223372036854775807]",
        "constant u8[3] [0, 7, 255]", "constant bool[3] [true, false, true]", "constant f32[0] []",
        "constant f32[] 2.0", "constant wrapped f64[] 0.5\n", "constant wrapped i64[] -3",
        "constant wrapped bool[] true", "constant wrapped i32[] 9",
        "constant wrapped f64[] 0.03125 {value=1/(32*s0)}",
        "constant wrapped i64[] 7 {value=s0-1}"})
    EXPECT_NE(text.find(part), std::string::npos) << part << "\n" << text;
}

TEST(IrText, RoundTripRandomOpsAndRngAdvance) {
  // Random ops with seed/offset and a static rng_advance survive.
  Graph g;
  g.rng_advance = SymInt(8);
  Attrs a;
  a.set("shape", Dims{2, 2}).set("dtype", DType::f32).set("seed", int64_t{42});
  a.set("offset", int64_t{4}).set("low", 0.0).set("high", 1.0);
  Node* r = g.add_op(OpId::rand_uniform, {}, a, {{DType::f32, {2, 2}}});
  g.add_output(r->output(), "r");
  expect_round_trip(g);
  EXPECT_EQ(print(g).substr(0, 25), "graph() rng_advance=8 {\n ");
}

TEST(IrText, RoundTripNamesWithEscapes) {
  // Input and output names with quotes, backslashes, control bytes and UTF-8.
  Graph g;
  std::string odd = std::string("a\"b\\c\n\t\r") + '\x01' + '\x7f' + "\xc3\xa9";
  Value* x = g.add_input(DType::f32, {1}, odd);
  Value* w = g.add_input(DType::f64, {}, "host0");
  w->wrapped_number = true;
  Value* e = g.add_input(DType::u8, {3}, "");
  g.add_output(x, "cap0.grad");
  g.add_output(x, "say \"hi\"");
  g.add_output(w, odd);
  g.add_output(e, "");
  expect_round_trip(g);
  EXPECT_NE(print(g).find(R"("a\"b\\c\n\t\r\x01\x7f)"), std::string::npos) << print(g);
  EXPECT_NE(print(g).find(R"(%1: wrapped f64[] "host0")"), std::string::npos) << print(g);
}

TEST(IrText, RoundTripEmptyGraphAndClone) {
  // An empty graph prints and parses; a clone prints identically.
  Graph g;
  EXPECT_EQ(print(g), "graph() {\n  return\n}\n");
  expect_round_trip(g);
  Value* x = g.add_input(DType::i64, {3}, "x");
  Node* n = g.add_op(OpId::neg, {x}, {}, {{DType::i64, {3}}});
  g.add_output(n->output(), "y");
  EXPECT_EQ(print(*g.clone()), print(g));
}

// Canonical text: what print() produces for it is the text itself.
const char* const kCanonical = R"(graph(%0: f32[s0, 784] "arg0", %1: f32[1024, 784] "cap0", )"
                               R"(%2: wrapped f64[] "host0") syms=1 rng_advance=4*s0 {
  %3 = permute(%1) {dims=[1, 0]} : f32[784, 1024]
  %4 = matmul(%0, %3) : f32[s0, 1024]
  %5 = reshape(%4) {shape=[s0, 16, 8, 8]} : f32[s0, 16, 8, 8]
  %6, %7 = max_pool2d(%5) {kernel_size=[2, 2], stride=[2, 2], padding=[0, 0]} )"
                               R"(: f32[s0, 16, 4, 4], i64[s0, 16, 4, 4]
  %8 = constant wrapped f64[] 0.5
  %9 = constant f32[2, 2] [1.0, -2.5, inf, nan]
  %10 = constant wrapped f64[] 0.03125 {value=1/(32*s0)}
  %11 = rand_uniform() {shape=[s0, 4], dtype=f32, seed=0, offset=0, low=0.0, high=1.0} : f32[s0, 4]
  %12 = sum(%4) {dims=[1], keepdim=true} : f32[s0, 1]
  %13 = mul(%12, %10) : f32[s0, 1]
  %14 = cast(%13) {dtype=f16} : f16[s0, 1]
  %15 = slice(%4) {dim=0, start=0, end=s0-1, step=1} : f32[s0-1, 1024]
  %16 = full() {shape=[], value=1e-08, dtype=bool} : bool[]
  %17 = cat(%4, %4, %4) {dim=1} : f32[s0, 3072]
  %18 = mul(%2, %8) : wrapped f64[]
  return %4 "out0", %6 "out \"pooled\"", %17 "cap0", %14 ""
}
)";

TEST(IrText, CanonicalTextIsAFixedPoint) {
  // print(parse(text)) == text for a handwritten text in canonical form.
  auto g = parse(kCanonical);
  EXPECT_EQ(print(*g), kCanonical);
  EXPECT_EQ(g->num_syms, 1);
  EXPECT_EQ(g->inputs().size(), 3u);
  EXPECT_EQ(g->num_nodes(), 15u);
  EXPECT_EQ(g->output_names()[1], "out \"pooled\"");
  EXPECT_TRUE(g->inputs()[2]->wrapped_number);
  EXPECT_TRUE(g->nodes()[4]->is_constant());
  EXPECT_TRUE(g->nodes()[14]->output()->wrapped_number);
  expect_round_trip(*g);
}

TEST(IrText, CommentsWhitespaceAndNamedValues) {
  // Comments, CRLF, tabs and named %values parse; the printer renumbers them.
  auto g = parse(
      "# a test graph\r\n"
      "graph(%x: f32[2] \"x\",\t%w.1: f32[2] \"w\")   # inputs\r\n"
      "{\n\n"
      "  %sum_1 = add(%x, %w.1) : f32[2]  # the sum\n"
      "  %c = constant f32[2] [ 1 , -2 ]  # ints are fine for float data\n"
      "  return %sum_1 \"y\" ,%c\n"
      "}  # trailing comment");
  EXPECT_EQ(print(*g),
            "graph(%0: f32[2] \"x\", %1: f32[2] \"w\") {\n"
            "  %2 = add(%0, %1) : f32[2]\n"
            "  %3 = constant f32[2] [1.0, -2.0]\n"
            "  return %2 \"y\", %3 \"\"\n"
            "}\n");
}

TEST(IrText, FixtureGraphsRoundTrip) {
  // The fuzz seeds in tests/fixtures/ir/ round-trip (comment-free ones exactly).
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(KILN_TESTS_DIR) / "fixtures/ir";
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    SCOPED_TRACE(entry.path().string());
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    std::unique_ptr<Graph> g;
    try {
      g = parse(text);
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
      continue;
    }
    expect_round_trip(*g);
    if (text.find('#') == std::string::npos) {
      EXPECT_EQ(print(*g), text);
    }
    ++files;
  }
  EXPECT_GE(files, 5);
}

struct BadCase {
  const char* text;
  int line;
  const char* says;  // part of the message
};

TEST(IrText, MalformedInputsRaiseErrorsWithPosition) {
  // Each malformed text raises kiln::Error (not a crash) with its line and the problem.
  const std::string head = "graph(%0: f32[2] \"x\") {\n";
  const std::string tail = "  return %0 \"y\"\n}\n";
  auto body = [&](const std::string& stmt) { return head + stmt + "\n" + tail; };
  const std::string cases_src[] = {
      "",
      "graph(",
      "graph() {\n",
      "graph() {\n  return %0\n}",
      "graph(%0: f32[2] \"a\", %0: f32[2] \"b\") {\n  return\n}",
      body("  %1 = relu(%0) : f32[2]\n  %1 = relu(%0) : f32[2]"),
      body("  %1 = frobnicate(%0) : f32[2]"),
      "graph(%0: f33[2] \"x\") {\n  return\n}",
      "graph(%0: f32[-1] \"x\") {\n  return\n}",
      body("  %1 = add(%0) : f32[2]"),
      body("  %1, %2 = relu(%0) : f32[2]"),
      body("  %1 = relu(%0)"),
      body("  %1 = constant f32[2] [1.0]"),
      body("  %1 = constant f32[2] [1.0, 2.0, 3.0]"),
      body("  %1 = constant f32[65536, 65536] []"),
      "graph(%0: f32[s0] \"x\") {\n  return\n}",
      body("  %1 = relu : f32[2]"),
      body("  %1 = relu(%0) {dims=@} : f32[2]"),
      body("  %1 = relu(%0) {dims=foo} : f32[2]"),
      body("  %1 = relu(%0) {a=1, a=2} : f32[2]"),
      body("  %1 = relu(%0) {dim=99999999999999999999} : f32[2]"),
      "graph(%0: f32[2] \"x) {\n  return\n}",
      "graph(%0: f32[2] \"\\q\") {\n  return\n}",
      body("  %1 = constant u8[1] [256]"),
      body("  %1 = constant bool[] 1"),
      body("  %1 = constant i64[] 1.5"),
      body("  %1 = constant f32[] [1.0]"),
      body("  %1 = constant f32[1] [1.0] {value=s0}"),
      body("  %1 = reshape(%0) {shape=[1/(2)]} : f32[2]"),
      body("  %1 = full() {value=1e999} : f32[]"),
      body("  % = relu(%0) : f32[2]"),
      body("  %1 = relu(%1) : f32[2]"),
      head + "  return %0 \"y\"\n}\n}",
      "graph() syms=-1 {\n  return\n}",
      "graph() syms=1 {\n  %0 = full() {shape=[s1]} : f32[s0]\n  return\n}",
      "graph() syms=1 {\n  %1 = constant f32[s0] [1.0]\n  return\n}",
      body("  %1 = constant wrapped f64[] 1.0 {valu=s0}"),
      "graph() syms=1 {\n  %0 = full() {value=2.0*s0} : f32[]\n  return\n}",
      "graph(%0: wrapped f32[3] \"x\") {\n  return\n}",
      body("  %1 = relu(%0) : wrapped f32[2]"),
  };
  const BadCase cases[] = {
      {nullptr, 1, "expected 'graph', found end of input"},
      {nullptr, 1, "expected a graph input like %0, found end of input"},
      {nullptr, 2, "expected a statement or 'return'"},
      {nullptr, 2, "%0 is not defined"},
      {nullptr, 1, "%0 is already defined"},
      {nullptr, 3, "%1 is already defined"},
      {nullptr, 2, "unknown op 'frobnicate'"},
      {nullptr, 1, "expected a dtype"},
      {nullptr, 1, "negative dimension -1"},
      {nullptr, 2, "'add' takes 2 input(s), got 1"},
      {nullptr, 2, "2 value(s) defined but 1 output type(s) given"},
      {nullptr, 3, "expected ':' and the output types"},
      {nullptr, 2, "constant has 1 elements, its shape 2"},
      {nullptr, 2, "more data than the shape's 2 elements"},
      {nullptr, 2, "more than 2^28 elements"},
      {nullptr, 1, "symbol s0 is not declared"},
      {nullptr, 2, "expected '('"},
      {nullptr, 2, "unexpected character '@'"},
      {nullptr, 2, "expected an attribute value"},
      {nullptr, 2, "duplicate attribute 'a'"},
      {nullptr, 2, "integer out of range"},
      {nullptr, 1, "unterminated string"},
      {nullptr, 1, "unknown escape \\'q'"},
      {nullptr, 2, "out of range for this dtype"},
      {nullptr, 2, "expected true or false"},
      {nullptr, 2, "expected an integer"},
      {nullptr, 2, "expected a number"},
      {nullptr, 2, "only a 0-d constant has a symbolic value"},
      {nullptr, 2, "expected ']', found '/'"},
      {nullptr, 2, "number out of range"},
      {nullptr, 2, "expected a value name after '%'"},
      {nullptr, 2, "%1 is not defined"},
      {nullptr, 4, "expected end of input"},
      {nullptr, 1, "expected an integer"},
      {nullptr, 2, "symbol s1 is not declared (the graph has syms=1)"},
      {nullptr, 2, "a constant needs a static shape"},
      {nullptr, 2, "expected 'value'"},
      {nullptr, 2, "only 1.0*(...) may multiply a size expression"},
      {nullptr, 1, "'wrapped' marks a number (a 0-d tensor), not a tensor of shape [3]"},
      {nullptr, 2, "'wrapped' marks a number"},
  };
  static_assert(std::size(cases) == std::size(cases_src));
  for (size_t i = 0; i < std::size(cases); ++i) {
    SCOPED_TRACE("case " + std::to_string(i) + ": " + cases_src[i]);
    const std::string where = "line " + std::to_string(cases[i].line) + ", column ";
    testing::expect_error([&] { parse(cases_src[i]); }, {where.c_str(), cases[i].says});
  }
}

TEST(IrText, ErrorNamesTheColumn) {
  // The column points at the offending token (1-based, in bytes).
  testing::expect_error([] { parse("graph(%0: f33[2] \"x\") {\n  return\n}"); },
                        "line 1, column 11: expected a dtype");
  testing::expect_error([] { parse("graph() {\n  %1 = add() : f32[]\n  return\n}"); },
                        "line 2, column 8: 'add' takes 2 input(s), got 0");
}

TEST(IrText, ConstantNeedsDataNotJustAShape) {
  // A huge declared shape fails on the data count, before anything is allocated.
  const std::string text = "graph() {\n  %0 = constant f64[268435456] [1.0]\n  return\n}";
  testing::expect_error([&] { parse(text); }, {"line 2", "its shape 268435456"});
}

}  // namespace
}  // namespace kiln::ir
