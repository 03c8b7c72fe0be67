// The host cost of a steady-state compiled call (issue 19): heap allocations
// on the calling thread (this binary replaces operator new to count them, so
// it is a test executable of its own) and, on the emulated CUDA device, the
// driver calls of a call replayed from a CUDA graph. A one-kernel plan's call
// should cost its argument list, its inputs' list, its result handles and
// (replayed) one cuGraphLaunch: no per-call guard scratch, callback or
// destination list that the plan does not need.
#include <gtest/gtest.h>

#include <cstdlib>
#include <new>

#include "kiln/compile.h"
#include "kiln/cuda.h"
#include "kiln/env.h"
#include "kiln/kiln.h"
#if KILN_TEST_CUDA
#include "kernels/cuda/pocl_driver.h"
#endif

namespace {

thread_local bool t_counting = false;
thread_local long t_news = 0;

void* counted_new(size_t n) {
  if (t_counting) ++t_news;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}

}  // namespace

// Every non-aligned form, so each allocation is freed by its own kind (under
// ASan too); the aligned forms keep the library's pair.
void* operator new(size_t n) {
  return counted_new(n);
}
void* operator new[](size_t n) {
  return counted_new(n);
}
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted_new(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted_new(n);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}

namespace kiln {
namespace {

Tensor gelu_tanh(const Tensor& x) {
  return 0.5 * x * (1 + tanh(0.7978845608 * (x + 0.044715 * x * x * x)));
}

// Allocations on this thread during f().
template <class F>
long allocations(F&& f) {
  t_news = 0;
  t_counting = true;
  f();
  t_counting = false;
  return t_news;
}

// On the CPU: the argument list (Compiled::operator()), the plan's input
// list, the executor's slots, in-place marks and launch list, the liveness
// table (CompileStats::last_peak_bytes), the kernel's pointer and size lists,
// the output tensor and its storage, the results' list: 11 with libstdc++ as
// of this test (19 before the guard scratch, the callback, the empty
// destinations' list and the executor's destination tables were dropped).
TEST(CallCost, ASteadyCompiledCallOnTheCpuAllocatesWhatItReturnsAndLittleElse) {
  auto f = compile([](const Tensor& t) { return gelu_tanh(t); });
  const Tensor x = randn({16});
  for (int i = 0; i < 4; ++i) (void)f(x);  // eager warm-up, trace, then the plan
  ASSERT_EQ(f.stats().traces, 1);
  const long n = allocations([&] { (void)f(x); });
  EXPECT_LE(n, 12) << "heap allocations of one steady-state compiled call";
  EXPECT_GE(n, 1);  // the counter counts (its result is a new tensor)
}

#if KILN_TEST_CUDA
// The driver calls made since `before`, as "name count, ...".
std::string calls_since(const std::vector<cuda::DriverCalls>& before) {
  std::string s;
  for (const cuda::DriverCalls& a : cuda::emulated_driver_calls()) {
    int64_t was = 0;
    for (const cuda::DriverCalls& b : before)
      if (b.name == a.name) was = b.calls;
    if (a.calls > was) s += str(s.empty() ? "" : ", ", a.name, " ", a.calls - was);
  }
  return s;
}

// A replayed one-kernel plan: one cuGraphLaunch, nothing else from the
// driver (no event, synchronization, copy or parameter update), and the host
// allocations of its argument and input lists, its result handle and list,
// and the emulated cuGraphLaunch's own 3 (its launch records): 7 (12 before).
TEST(CallCost, AReplayedOneKernelPlanCallsCuGraphLaunchAloneAndAllocatesLittle) {
  if (!cuda::is_available()) GTEST_SKIP() << cuda::unavailable_reason();
  if (!cuda::driver().emulated) GTEST_SKIP() << "driver calls are counted on the emulated device";
  if (env::get_flag("KILN_CUDA_SYNC", false) || !env::get_flag("KILN_CUDA_GRAPHS", true))
    GTEST_SKIP() << "CUDA graphs are off";
  auto f = compile([](const Tensor& t) { return gelu_tanh(t); });
  const Tensor x = randn({16}).cuda();
  for (int i = 0; i < 4; ++i) (void)f(x);  // eager, plain, captured, replayed
  cuda::synchronize();
  const cuda::GraphStats stats = cuda::graph_stats();
  const auto before = cuda::emulated_driver_calls();
  const long n = allocations([&] { (void)f(x); });
  EXPECT_EQ(calls_since(before), "cuGraphLaunch 1");
  EXPECT_EQ(cuda::graph_stats().replays, stats.replays + 1);
  EXPECT_LE(n, 8) << "heap allocations of one replayed compiled call";
  cuda::synchronize();
}
#endif

}  // namespace
}  // namespace kiln
