// The default generator's state API: get_state/set_state, get_rng_state and
// RngStateGuard (torch.random.fork_rng).
#include <gtest/gtest.h>

#include <stdexcept>

#include "kiln/kiln.h"
#include "test_util.h"

using namespace kiln;
using kiln::testing::expect_error;

TEST(Random, SetStateReplaysTheDraws) {
  manual_seed(7);
  (void)rand({5});
  Tensor state = default_generator().get_state();
  EXPECT_EQ(state.dtype(), DType::u8);
  EXPECT_EQ(state.shape(), Dims{16});
  auto a = randn({33}).to_vector<float>();
  auto b = rand({3, 4}).to_vector<float>();
  manual_seed(99);  // anything else in between
  (void)randn({10});
  set_rng_state(state);
  EXPECT_EQ(randn({33}).to_vector<float>(), a);
  EXPECT_EQ(rand({3, 4}).to_vector<float>(), b);
}

TEST(Random, StateIsSeedThenOffsetLittleEndian) {
  Generator g;
  g.seed = 0x0102030405060708ull;
  g.offset = 0x40;
  auto bytes = g.get_state().to_vector<uint8_t>();
  ASSERT_EQ(bytes.size(), 16u);
  EXPECT_EQ(bytes[0], 0x08);
  EXPECT_EQ(bytes[7], 0x01);
  EXPECT_EQ(bytes[8], 0x40);
  Generator h;
  h.set_state(g.get_state());
  EXPECT_EQ(h.seed, g.seed);
  EXPECT_EQ(h.offset, g.offset);
}

TEST(Random, SetStateRejectsWhatGetStateDoesNotReturn) {
  Generator g;
  expect_error([&] { g.set_state(Tensor()); }, "undefined");
  expect_error([&] { g.set_state(zeros({16})); }, "u8");
  expect_error([&] { g.set_state(zeros({15}, DType::u8)); }, "[15]");
  expect_error([&] { g.set_state(zeros({2, 8}, DType::u8)); }, "[2, 8]");
  Tensor odd = g.get_state().clone();
  odd.data<uint8_t>()[8] = 3;  // offset 3: not a block boundary
  expect_error([&] { g.set_state(odd); }, "multiple of 4");
  EXPECT_EQ(g.offset, 0u);  // a rejected state changes nothing
}

TEST(Random, RngStateGuardRestoresTheStateOnExit) {
  manual_seed(3);
  auto want = rand({8}).to_vector<float>();
  manual_seed(3);
  {
    RngStateGuard fork;
    manual_seed(1234);
    (void)randn({100});
  }
  EXPECT_EQ(rand({8}).to_vector<float>(), want);
  manual_seed(3);
  try {
    RngStateGuard fork;
    (void)randn({5});
    throw std::runtime_error("leave the scope");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(rand({8}).to_vector<float>(), want);
}
