// Streams, events, the stream-ordered caching allocator and pinned memory, on
// a GPU or the emulated device: work ordered across streams by events, blocks
// not handed to another stream before their work finished, asynchronous copies
// from pinned memory. A deliberately slow kernel keeps a stream busy; no
// assertion depends on how slow it is (a fast device only makes the early-reuse
// checks weaker, never wrong).
#include <thread>

#include "kernels/cuda/device_ops.h"
#include "kernels/cuda/driver.h"
#include "kernels/cuda/module.h"
#include "kiln/cuda.h"
#include "kiln/device_runtime.h"

namespace kiln::cuda {
namespace {

// Each thread runs `iters` steps of a recurrence before writing `value`.
const char* kSlowFill = R"(
KILN_KERNEL void kiln_slow_fill(KILN_GLOBAL float* out, kiln_i64 n, kiln_i64 iters, float value) {
  const kiln_i64 i = (kiln_i64)blockIdx.x * blockDim.x + threadIdx.x;
  float x = 1.0f;
  for (kiln_i64 k = 0; k < iters; ++k) x = x * 0.5f + 1.0f;
  if (i < n) out[i] = value + (x - x);
}
)";

// Queues the slow fill of `t`'s first 64 elements (f32) with `value` on `s`.
void slow_fill(const Tensor& t, float value, const Stream& s, long long iters = 1 << 20) {
  const CUfunction fn = cached_kernel(0, kSlowFill, "kiln_slow_fill");
  CUdeviceptr p = reinterpret_cast<CUdeviceptr>(t.data_ptr());
  long long n = std::min<long long>(t.numel(), 64);
  float v = value;
  void* params[] = {&p, &n, &iters, &v};
  check(driver().cuLaunchKernel(fn, 1, 1, 1, 64, 1, 1, 0, static_cast<CUstream>(s.handle()), params,
                                nullptr),
        "cuLaunchKernel (slow fill)");
}

std::vector<float> values(const Tensor& t) {
  return t.to_vector<float>();
}

class CudaStreams : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!is_available()) GTEST_SKIP() << "no CUDA device: " << unavailable_reason();
  }
  Allocator& allocator() { return device_runtime(Device::cuda(), "test").allocator(0); }
};

TEST_F(CudaStreams, CurrentStreamIsPerThreadAndScoped) {
  const Stream def = default_stream();
  EXPECT_TRUE(def.is_default());
  EXPECT_EQ(def.id(), 0u);
  EXPECT_EQ(def.handle(), nullptr);
  EXPECT_EQ(current_stream(), def);
  Stream s(0, -1);
  EXPECT_FALSE(s.is_default());
  EXPECT_EQ(s.priority(), -1);
  EXPECT_NE(s.id(), 0u);
  EXPECT_NE(s, Stream());
  {
    StreamGuard g(s);
    EXPECT_EQ(current_stream(), s);
    {
      StreamGuard inner(def);
      EXPECT_EQ(current_stream(), def);
    }
    EXPECT_EQ(current_stream(), s);
    bool other_thread_default = false;
    std::thread([&] { other_thread_default = current_stream() == default_stream(); }).join();
    EXPECT_TRUE(other_thread_default);
  }
  EXPECT_EQ(current_stream(), def);
  set_current_stream(s);
  EXPECT_EQ(current_stream(), s);
  set_current_stream(def);
  EXPECT_THROW(Stream(5), Error);
  EXPECT_THROW(current_stream(-1), Error);
}

// A producer on s1, an event, s2 waiting on it: the consumer on s2 always
// sees the producer's values, however long the producer runs.
TEST_F(CudaStreams, AnEventOrdersAConsumerAfterAProducer) {
  Stream s1, s2;
  const Tensor buf = zeros({64}, DType::f32, Device::cuda());
  cuda::synchronize();
  slow_fill(buf, 7, s1);
  Event produced;
  produced.record(s1);
  s2.wait(produced);
  StreamGuard g(s2);
  const Tensor out = buf + 1;  // a kernel, an allocation and a copy on s2
  for (float v : values(out)) ASSERT_EQ(v, 8.0f);
  EXPECT_TRUE(produced.query());  // s2's copy finished after it
  s2.wait(s1);                    // stream-on-stream waits too
  s2.synchronize();
  EXPECT_TRUE(s2.query());
}

// Without the wait the consumer may read before or after the producer: only
// that nothing fails, and that the values are right once both are synchronized.
TEST_F(CudaStreams, WithoutAWaitNothingFails) {
  Stream s1, s2;
  const Tensor buf = zeros({64}, DType::f32, Device::cuda());
  cuda::synchronize();
  slow_fill(buf, 7, s1);
  {
    StreamGuard g(s2);
    for (float v : values(buf + 1)) ASSERT_TRUE(v == 1.0f || v == 8.0f) << v;
  }
  cuda::synchronize();
  for (float v : values(buf)) ASSERT_EQ(v, 7.0f);
}

TEST_F(CudaStreams, EventsTimeAndAnswerQueries) {
  Stream s;
  Event never;
  EXPECT_TRUE(never.query());
  never.synchronize();
  s.wait(never);  // nothing to wait for
  Event a(true), b(true), untimed;
  const Tensor buf = zeros({64}, DType::f32, Device::cuda());
  cuda::synchronize();
  a.record(s);
  slow_fill(buf, 1, s, 1 << 16);
  b.record(s);
  untimed.record(s);
  b.synchronize();
  EXPECT_TRUE(b.query());
  EXPECT_GE(a.elapsed_time(b), 0.0f);
  EXPECT_THROW((void)a.elapsed_time(untimed), Error);
  EXPECT_THROW((void)a.elapsed_time(Event(true)), Error);
  s.synchronize();
  EXPECT_TRUE(s.query());
}

// The allocator: a block freed on a stream is at once reusable there.
TEST_F(CudaStreams, AFreedBlockIsReusedAtOnceOnItsStream) {
  allocator().empty_cache();
  Stream s;
  StreamGuard g(s);
  const int64_t n = (int64_t{3} << 20) / 4 + 1;  // a size class no other test uses
  Tensor a = make_tensor({n}, DType::f32, Device::cuda());
  slow_fill(a, 1, s);
  void* pa = a.data_ptr();
  a = Tensor();
  const Tensor b = make_tensor({n}, DType::f32, Device::cuda());
  EXPECT_EQ(b.data_ptr(), pa);  // stream order keeps b's work after a's
}

// ... and on another stream only once the work queued before the free is done.
TEST_F(CudaStreams, ABlockReachesAnotherStreamOnlyAfterItsWorkFinished) {
  allocator().empty_cache();
  Stream s1, s2;
  const int64_t n = (int64_t{5} << 20) / 4 + 1;
  void* px = nullptr;
  {
    StreamGuard g(s1);
    Tensor x = make_tensor({n}, DType::f32, Device::cuda());
    px = x.data_ptr();
    slow_fill(x, 5, s1);
  }  // freed on s1 while the slow fill still runs
  StreamGuard g(s2);
  const Tensor y = make_tensor({n}, DType::f32, Device::cuda());
  const bool s1_done = s1.query();
  if (y.data_ptr() == px) {
    EXPECT_TRUE(s1_done) << "handed to s2 before s1's work finished";
  }
  s1.synchronize();
  const Tensor z = make_tensor({n}, DType::f32, Device::cuda());
  if (y.data_ptr() != px) {
    EXPECT_EQ(z.data_ptr(), px) << "not reused once s1 finished";
  }
}

// record_stream: a block used on another stream waits for that stream too,
// even on its own stream.
TEST_F(CudaStreams, RecordStreamHoldsTheBlockForTheOtherStream) {
  allocator().empty_cache();
  Stream s1, s2;
  const int64_t n = (int64_t{7} << 20) / 4 + 1;
  StreamGuard g(s1);
  Tensor x = make_tensor({n}, DType::f32, Device::cuda());
  void* px = x.data_ptr();
  s2.wait(s1);
  slow_fill(x, 3, s2);
  record_stream(x, s2);
  record_stream(x, s1);  // its own stream: nothing to add
  x = Tensor();
  const Tensor y = make_tensor({n}, DType::f32, Device::cuda());
  const bool s2_done = s2.query();
  if (y.data_ptr() == px) {
    EXPECT_TRUE(s2_done) << "reused before s2's work finished";
  }
  s2.synchronize();
  const Tensor z = make_tensor({n}, DType::f32, Device::cuda());
  if (y.data_ptr() != px) {
    EXPECT_EQ(z.data_ptr(), px) << "not reused once s2 finished";
  }
  EXPECT_THROW(record_stream(zeros({2}), s2), Error);
  EXPECT_THROW(record_stream(Tensor(), s2), Error);
}

// Counters stay those of the CPU allocator: current, peak, cached.
TEST_F(CudaStreams, CountersFollowTheBlocks) {
  allocator().empty_cache();
  Stream s;
  StreamGuard g(s);
  const auto before = allocator().stats();
  Tensor a = make_tensor({1000}, DType::f32, Device::cuda());  // 4000 B -> 4096
  const auto held = allocator().stats();
  EXPECT_EQ(held.current_bytes - before.current_bytes, 4096);
  EXPECT_GE(held.peak_bytes, held.current_bytes);
  a = Tensor();
  const auto freed = allocator().stats();
  EXPECT_EQ(freed.current_bytes, before.current_bytes);
  EXPECT_EQ(freed.cached_bytes - held.cached_bytes, 4096);
  allocator().empty_cache();  // back to the segments of live blocks
  EXPECT_EQ(allocator().stats().cached_bytes, before.cached_bytes);
}

// Pinned memory: pin_memory/is_pinned, and to(device, non_blocking) from it is
// an asynchronous copy on the current stream; the pinned block is not handed
// out again while the copy may still read it.
TEST_F(CudaStreams, NonBlockingCopiesFromPinnedMemory) {
  const Tensor h = arange(0, 4096, 1, DType::f32);
  EXPECT_FALSE(h.is_pinned());
  Tensor p = h.pin_memory();
  EXPECT_TRUE(p.is_pinned());
  EXPECT_TRUE(p.slice(0, 10, 20).is_pinned());
  EXPECT_EQ(p.device(), Device::cpu());
  EXPECT_EQ(p.pin_memory().data_ptr(), p.data_ptr());
  EXPECT_EQ(values(p), values(h));
  Stream s;
  StreamGuard g(s);
  const Tensor gate = make_tensor({64}, DType::f32, Device::cuda());
  slow_fill(gate, 1, s);  // the copy queues behind this
  const Tensor d = p.to(Device::cuda(), /*non_blocking=*/true);
  p = Tensor();                           // freed while the copy may be pending
  Tensor q = zeros({4096}).pin_memory();  // must not get p's block before the copy ran
  q.fill_(-1);
  EXPECT_EQ(values(d), values(h));                           // on s, after the copy
  EXPECT_EQ(values(h.to(Device::cuda(), true)), values(h));  // pageable: synchronous
  EXPECT_THROW((void)d.pin_memory(), Error);
}

// to(Device::cpu(), non_blocking) from the device: PyTorch's semantics, the
// result in pinned memory and valid once the stream is synchronized or an
// event recorded after the copy is waited for; its pinned block is not reused
// while the copy may still write it.
TEST_F(CudaStreams, NonBlockingCopiesToPinnedHostMemory) {
  const Tensor h = arange(0, 4096, 1, DType::f32);
  Stream s;
  StreamGuard g(s);
  const Tensor d = h.cuda();
  slow_fill(d, 7, s);  // the copy queues behind this write
  std::vector<float> want = values(h);
  std::fill(want.begin(), want.begin() + 64, 7.0f);
  const Tensor r = d.to(Device::cpu(), /*non_blocking=*/true);
  EXPECT_EQ(r.device(), Device::cpu());
  EXPECT_TRUE(r.is_pinned());
  s.synchronize();
  EXPECT_EQ(values(r), want);
  // Through an event, and a block freed before the copy ran.
  slow_fill(d, 8, s);
  std::fill(want.begin(), want.begin() + 64, 8.0f);
  const Tensor r2 = d.to(Device::cpu(), true);
  Event e;
  e.record(s);
  Tensor r3 = d.to(Device::cpu(), true);
  void* p3 = r3.data_ptr();
  r3 = Tensor();
  const Tensor q = zeros({4096}).pin_memory();
  if (q.data_ptr() == p3) {
    EXPECT_TRUE(s.query()) << "a pinned block reused while a copy may still write it";
  }
  e.synchronize();
  EXPECT_EQ(values(r2), want);
  // Strided or cast: synchronous, as PyTorch's pageable copies.
  EXPECT_EQ(values(d.reshape({64, 64}).t().to(Device::cpu(), true)),
            values(d.cpu().reshape({64, 64}).t().contiguous()));
  EXPECT_EQ(d.slice(0, 0, 0).to(Device::cpu(), true).numel(), 0);
}

}  // namespace
}  // namespace kiln::cuda
