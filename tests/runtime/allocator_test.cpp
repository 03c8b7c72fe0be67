// Verifies the caching CPU allocator: counters, reuse of freed blocks, alignment.
#include <gtest/gtest.h>

#include <cstdint>

#include "kiln/kiln.h"

using namespace kiln;

// Freed blocks are reused: a steady-state loop stops asking the OS for memory.
TEST(Allocator, ReusesFreedBlocks) {
  Allocator& a = cpu_allocator();
  { Tensor warm = add(ones({1 << 20}), ones({1 << 20})); }
  auto before = a.stats();
  for (int i = 0; i < 10; ++i) {
    Tensor t = add(ones({1 << 20}), ones({1 << 20}));
    (void)t;
  }
  auto after = a.stats();
  EXPECT_EQ(after.num_os_allocs, before.num_os_allocs);
  EXPECT_GT(after.num_cache_hits, before.num_cache_hits);
}

// current and peak bytes follow live tensors; reset_peak lowers peak to current.
TEST(Allocator, CurrentAndPeakBytes) {
  Allocator& a = cpu_allocator();
  auto s0 = a.stats();
  int64_t peak_during;
  {
    Tensor t = empty({4 << 20}, DType::f32);  // 16 MiB
    auto s1 = a.stats();
    EXPECT_GE(s1.current_bytes - s0.current_bytes, int64_t{16} << 20);
    peak_during = s1.peak_bytes;
  }
  auto s2 = a.stats();
  EXPECT_EQ(s2.current_bytes, s0.current_bytes);
  EXPECT_GE(s2.peak_bytes, peak_during);
  a.reset_peak();
  EXPECT_EQ(a.stats().peak_bytes, a.stats().current_bytes);
  a.empty_cache();
  EXPECT_EQ(a.stats().cached_bytes, 0);
}

// Every allocation is 64-byte aligned (vector loads need no peeling).
TEST(Allocator, Alignment) {
  for (int64_t n : {1, 3, 17, 1000, 1 << 22}) {
    Tensor t = empty({n}, DType::u8);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % 64, 0u) << n;
  }
}
