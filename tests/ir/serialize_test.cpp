// The binary graph form (ir/serialize.h): exact round trips, and bad bytes
// (truncated, flipped) raise kiln::Error instead of crashing.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "kiln/functional.h"
#include "kiln/ir/graph.h"
#include "kiln/ir/serialize.h"
#include "kiln/ir/text.h"

namespace kiln::ir {
namespace {

std::string bytes_of(const Graph& g) {
  ByteWriter w;
  write_graph(w, g);
  return w.bytes();
}

std::unique_ptr<Graph> from_bytes(std::string_view b) {
  ByteReader r(b);
  std::unique_ptr<Graph> g = read_graph(r);
  EXPECT_EQ(r.remaining(), 0u);
  return g;
}

void expect_round_trip(const Graph& g) {
  const std::string b = bytes_of(g);
  std::unique_ptr<Graph> back = from_bytes(b);
  std::string why;
  EXPECT_TRUE(structurally_equal(*back, g, &why)) << why;
  EXPECT_EQ(print(*back), print(g));
  EXPECT_EQ(bytes_of(*back), b);  // deterministic
  for (size_t i = 0; i < g.outputs().size(); ++i)
    EXPECT_EQ(back->outputs()[i]->name, g.outputs()[i]->name);
}

std::vector<std::unique_ptr<Graph>> fixtures() {
  namespace fs = std::filesystem;
  std::vector<std::unique_ptr<Graph>> out;
  for (const auto& entry : fs::directory_iterator(fs::path(KILN_TESTS_DIR) / "fixtures/ir")) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    out.push_back(parse(ss.str()));
  }
  return out;
}

// The richest fixture (symbolic dims and attrs, constants, a two-output op,
// rng_advance, escaped names) with a named node output.
std::unique_ptr<Graph> rich_graph() {
  std::ifstream in(std::filesystem::path(KILN_TESTS_DIR) / "fixtures/ir/canonical.ir");
  std::stringstream ss;
  ss << in.rdbuf();
  std::unique_ptr<Graph> g = parse(ss.str());
  g->nodes()[3]->outputs[0]->name = "named";
  return g;
}

TEST(GraphBytes, RoundTripsExactly) {
  const std::unique_ptr<Graph> g = rich_graph();
  ASSERT_GE(g->num_syms, 1);
  expect_round_trip(*g);
  const std::unique_ptr<Graph> back = from_bytes(bytes_of(*g));
  EXPECT_EQ(back->nodes()[3]->outputs[0]->name, "named");
  EXPECT_EQ(back->rng_advance, g->rng_advance);
}

TEST(GraphBytes, FixtureGraphsRoundTrip) {
  int n = 0;
  for (const auto& g : fixtures()) {
    expect_round_trip(*g);
    ++n;
  }
  EXPECT_GE(n, 5);
}

TEST(GraphBytes, EmptyGraph) {
  Graph g;
  expect_round_trip(g);
}

TEST(GraphBytes, TruncatedBytesRaise) {
  for (const auto& g : fixtures()) {
    const std::string b = bytes_of(*g);
    for (size_t n = 0; n < b.size(); ++n) {
      ByteReader r(std::string_view(b).substr(0, n));
      EXPECT_THROW(read_graph(r), Error) << "prefix of " << n << " of " << b.size() << " bytes";
    }
  }
}

TEST(GraphBytes, FlippedBytesNeverCrash) {
  // Each byte with each of three bit patterns flipped: an Error, or some graph
  // (the plan cache's checksum catches those); never a crash or a huge allocation.
  for (const auto& g : fixtures()) {
    const std::string b = bytes_of(*g);
    for (size_t i = 0; i < b.size(); ++i)
      for (unsigned char flip : {0x01, 0x80, 0xff}) {
        std::string bad = b;
        bad[i] = static_cast<char>(static_cast<unsigned char>(bad[i]) ^ flip);
        ByteReader r(bad);
        try {
          std::unique_ptr<Graph> got = read_graph(r);
          ASSERT_NE(got, nullptr);
        } catch (const Error&) {
        }
      }
  }
}

TEST(GraphBytes, CountsAreBoundedByTheBytesLeft) {
  ByteWriter w;
  w.uvar(0);                  // num_syms
  w.uvar(0);                  // rng_advance: no terms
  w.uvar(0);                  //   its constant
  w.uvar(uint64_t{1} << 60);  // op names: an absurd count
  ByteReader r(w.bytes());
  try {
    read_graph(r);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("count past the end"), std::string::npos) << e.what();
  }
}

// The writer's inline pieces on its grown-ahead buffer: varints at every
// length boundary, sizes static and symbolic, strings, and writes after
// bytes() was read (the buffer keeps growing) all read back exactly.
TEST(GraphBytes, WriterPiecesReadBackAcrossGrowth) {
  ByteWriter w;
  std::vector<uint64_t> u;
  for (int shift = 0; shift < 64; ++shift)
    for (uint64_t d : {uint64_t{0}, uint64_t{1}}) u.push_back((uint64_t{1} << shift) - d);
  u.push_back(~uint64_t{0});
  const SymInt s2 = SymInt::symbolic(1, 3, -7) * SymInt::symbolic(0);
  std::string mid;
  for (int round = 0; round < 300; ++round) {
    for (uint64_t x : u) w.uvar(x);
    w.svar(INT64_MIN + round);
    w.svar(-round);
    w.sym(SymInt(round - 150));
    w.sym(s2);
    w.str(std::string(static_cast<size_t>(round % 40), 'a'));
    w.u8(static_cast<uint8_t>(round));
    if (round == 7) mid = w.bytes();  // read part-way, then keep writing
  }
  ByteReader r(w.bytes());
  for (int round = 0; round < 300; ++round) {
    if (round == 8) {
      EXPECT_EQ(r.offset(), mid.size());
    }
    for (uint64_t x : u) ASSERT_EQ(r.uvar(), x);
    ASSERT_EQ(r.svar(), INT64_MIN + round);
    ASSERT_EQ(r.svar(), -round);
    ASSERT_EQ(r.sym(), SymInt(round - 150));
    ASSERT_EQ(r.sym(), s2);
    ASSERT_EQ(r.str(), std::string(static_cast<size_t>(round % 40), 'a'));
    ASSERT_EQ(r.u8(), static_cast<uint8_t>(round));
  }
  EXPECT_EQ(r.remaining(), 0u);
  EXPECT_EQ(w.bytes().substr(0, mid.size()), mid);
}

TEST(GraphBytes, NumberedValuesFollowTheWriteOrder) {
  Graph g;
  Value* x = g.add_input(DType::f32, {2, 3, 8, 8}, "arg0");
  Attrs a;
  a.set("kernel_size", Dims{2, 2}).set("stride", Dims{2, 2}).set("padding", Dims{0, 0});
  Node* m =
      g.add_op(OpId::max_pool2d, {x}, a, {{DType::f32, {2, 3, 4, 4}}, {DType::i64, {2, 3, 4, 4}}});
  Node* r = g.add_op(OpId::relu, {m->output(0)}, {}, {{DType::f32, {2, 3, 4, 4}}});
  g.add_output(r->output(), "out0");
  const std::vector<const Value*> v = numbered_values(g);
  ASSERT_EQ(v.size(), 4u);
  EXPECT_EQ(v[0], x);
  EXPECT_EQ(v[1], m->outputs[0]);
  EXPECT_EQ(v[2], m->outputs[1]);
  EXPECT_EQ(v[3], r->output());
  expect_round_trip(g);
}

}  // namespace
}  // namespace kiln::ir
