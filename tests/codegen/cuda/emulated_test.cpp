// Conversions and driver behaviour on whichever device runs the tests (a GPU,
// else the emulated one), and what only the emulated device promises: device
// pointers checked against live allocations and not host-addressable, OpenCL
// build logs in errors, streams and events ordering work across in-order
// queues.
#include <errno.h>
#include <unistd.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "codegen/kernel_test_util.h"
#include "kernels/cuda/driver.h"
#include "kernels/cuda/gpu_printer.h"
#include "kernels/cuda/module.h"
#include "kernels/cuda/pocl_driver.h"

namespace kiln::cuda {
namespace {

bool emulated() {
  return is_available() && driver().emulated;
}

kir::Kernel cast_kernel(DType from, DType to) {
  kir::testing::Builder b(1, str("cast_", dtype_name(from), "_", dtype_name(to)));
  const int x = b.load(b.in(from, {true}));
  b.store(b.out(to, {true}), b.op(OpId::cast, to, x));
  return b.k;
}

// Runs 1-d kernel `sym` of `k` over `in` (numel elements) and returns the output's bytes.
std::vector<char> run_1d(const Module& mod, const std::string& sym, const kir::Kernel& k,
                         const std::vector<char>& in, int64_t numel) {
  DeviceBuffer din(in.size());
  din.upload(in.data(), in.size());
  const size_t out_bytes = static_cast<size_t>(numel) * dtype_size(k.args[1].dtype);
  DeviceBuffer dout(out_bytes);
  launch_kernel(mod.function(sym), k, {din.get(), dout.get()}, &numel);
  check(driver().cuCtxSynchronize(), "cuCtxSynchronize");
  std::vector<char> out(out_bytes);
  dout.download(out.data(), out_bytes);
  return out;
}

// f16/bf16 <-> f32 bit for bit against the host's Half/BFloat16: every 16-bit
// pattern widened, and 2^20 floats (with ties and near-ties for both formats,
// subnormals, inf, NaN) narrowed to nearest even.
TEST(CudaLaunch, HalfAndBfloat16ConversionsAreExact) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device: " << unavailable_reason();
  set_device(0);
  const std::vector<std::pair<DType, DType>> casts = {{DType::f16, DType::f32},
                                                      {DType::bf16, DType::f32},
                                                      {DType::f32, DType::f16},
                                                      {DType::f32, DType::bf16}};
  std::string source = device_prelude();
  for (size_t i = 0; i < casts.size(); ++i)
    source += print_kernel(cast_kernel(casts[i].first, casts[i].second), str("c", i));
  const std::vector<char> image = compile_for_device(source, "casts.cu", 0);
  Module mod(image.data());
  std::vector<char> narrow(65536 * 2);
  for (uint32_t h = 0; h < 65536; ++h) {
    const auto v = static_cast<uint16_t>(h);
    std::memcpy(narrow.data() + 2 * h, &v, 2);
  }
  constexpr int64_t kWide = int64_t{1} << 20;
  std::vector<char> wide(kWide * 4);
  const uint32_t low[] = {0, 1, 0x7ff, 0x800, 0xfff};
  for (uint32_t i = 0; i < kWide; ++i) {
    const uint32_t bits = (i << 12) | low[i % 5];
    std::memcpy(wide.data() + 4 * i, &bits, 4);
  }
  for (size_t c = 0; c < casts.size(); ++c) {
    const auto [from, to] = casts[c];
    const bool widen = to == DType::f32;
    const int64_t n = widen ? 65536 : kWide;
    const std::vector<char> got =
        run_1d(mod, str("c", c), cast_kernel(from, to), widen ? narrow : wide, n);
    int bad = 0;
    for (int64_t i = 0; i < n && bad < 5; ++i) {
      if (widen) {
        uint16_t h;
        std::memcpy(&h, narrow.data() + 2 * i, 2);
        const float want = from == DType::f16 ? static_cast<float>(std::bit_cast<Half>(h))
                                              : static_cast<float>(std::bit_cast<BFloat16>(h));
        float have;
        std::memcpy(&have, got.data() + 4 * i, 4);
        if (std::isnan(want) ? std::isnan(have)
                             : std::bit_cast<uint32_t>(want) == std::bit_cast<uint32_t>(have))
          continue;
        ++bad;
        ADD_FAILURE() << dtype_name(from) << " 0x" << std::hex << h << ": device " << have
                      << ", host " << want;
      } else {
        float x;
        std::memcpy(&x, wide.data() + 4 * i, 4);
        const uint16_t want = to == DType::f16 ? std::bit_cast<uint16_t>(Half(x))
                                               : std::bit_cast<uint16_t>(BFloat16(x));
        uint16_t have;
        std::memcpy(&have, got.data() + 2 * i, 2);
        if (std::isnan(x) ? (have & 0x7fff) > (to == DType::f16 ? 0x7c00 : 0x7f80) : have == want)
          continue;
        ++bad;
        ADD_FAILURE() << dtype_name(to) << " of " << x << " (0x" << std::hex
                      << std::bit_cast<uint32_t>(x) << "): device 0x" << have << ", host 0x"
                      << want;
      }
    }
  }
}

TEST(CudaDevice, OutOfMemoryIsAClearError) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device: " << unavailable_reason();
  try {
    make_tensor({int64_t{1} << 48}, DType::f32, Device::cuda());  // 1 PiB
    FAIL() << "expected kiln::Error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("out of memory"), std::string::npos) << m;
    EXPECT_NE(m.find("asked for"), std::string::npos) << m;
  }
  EXPECT_EQ(ones({3}).cuda().cpu().sum().item<float>(), 3.0f);  // the device still works
}

// CUDA's legacy null stream: a synchronous copy waits for kernels queued on
// blocking streams (created without CU_STREAM_NON_BLOCKING), with no event.
TEST(CudaDevice, TheNullStreamWaitsForBlockingStreams) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device: " << unavailable_reason();
  set_device(0);
  kir::testing::Builder bld(1, "add_one");
  const int x = bld.load(bld.in(DType::f32, {true}));
  bld.store(bld.out(DType::f32, {true}),
            bld.op(OpId::add, DType::f32, x, bld.cnst(DType::f32, 1.0)));
  const std::vector<char> image =
      compile_for_device(device_prelude() + print_kernel(bld.k, "add_one"), "add_one.cu", 0);
  Module mod(image.data());
  const int64_t n = 1 << 20;
  std::vector<float> host(n, 2.0f);
  DeviceBuffer in(n * 4), out(n * 4);
  in.upload(host.data(), n * 4);
  CUstream s = nullptr;
  check(driver().cuStreamCreateWithPriority(&s, 0, 0), "cuStreamCreate");
  launch_kernel(mod.function("add_one"), bld.k, {in.get(), out.get()}, &n, s);
  out.download(host.data(), n * 4);  // cuMemcpyDtoH on the null stream
  EXPECT_EQ(host[0], 3.0f);
  EXPECT_EQ(host[n - 1], 3.0f);
  check(driver().cuStreamDestroy(s), "cuStreamDestroy");
}

class EmulatedDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!emulated()) GTEST_SKIP() << "not the emulated device (KILN_CUDA_EMULATE)";
    set_device(0);
  }
};

TEST_F(EmulatedDevice, PointersInsideABlockWorkAndOthersAreRefused) {
  std::vector<char> host(1024);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<char>(i * 7);
  DeviceBuffer b(host.size());
  b.upload(host.data(), host.size());
  std::vector<char> part(50);
  check(driver().cuMemcpyDtoH(part.data(), b.get() + 100, part.size()), "cuMemcpyDtoH");
  EXPECT_EQ(std::memcmp(part.data(), host.data() + 100, part.size()), 0);
  try {
    check(driver().cuMemcpyDtoH(part.data(), b.get() + 1000, part.size()), "cuMemcpyDtoH");
    FAIL() << "expected kiln::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("outside every device allocation"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(driver().cuMemFree(b.get() + 8), CUDA_ERROR_INVALID_VALUE);
}

// Whether the host can read n bytes at p, asked of the kernel (write() to a
// pipe fails with EFAULT where it cannot) instead of by faulting.
bool host_readable(const void* p, size_t n) {
  int fd[2];
  if (pipe(fd) != 0) throw std::runtime_error("pipe failed");
  const ssize_t w = write(fd[1], p, n);
  const int err = errno;
  close(fd[0]);
  close(fd[1]);
  if (w < 0 && err != EFAULT) throw std::runtime_error("write to a pipe failed");
  return w == static_cast<ssize_t>(n);
}

// As on a GPU, a host read of device memory is a bug: on the emulated device
// it faults too (device addresses lie in a reserved PROT_NONE range), where
// the SVM address behind them would just work and hide it (the compiled
// graphs' host reads of device constants, 4151c72, crashed only on an H100).
// Copies, kernels, host functions, GEMMs and graphs reach the bytes through
// the emulation's translation: the rest of the suite covers them.
TEST_F(EmulatedDevice, DeviceMemoryIsNotHostAddressable) {
  std::vector<char> host(4096);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<char>(i * 3);
  DeviceBuffer b(host.size());
  b.upload(host.data(), host.size());
  const auto at = [&](size_t off) { return reinterpret_cast<const char*>(b.get() + off); };
  EXPECT_FALSE(host_readable(at(0), 16));
  EXPECT_FALSE(host_readable(at(1000), 1));
  const Tensor t = arange(0, 64, 1, DType::f32).cuda();
  EXPECT_FALSE(host_readable(t.data_ptr(), 4));
  EXPECT_FALSE(host_readable(t.narrow(0, 10, 4).data_ptr(), 4));  // views: interior pointers
  EXPECT_EQ(t.narrow(0, 10, 4).cpu().sum().item<float>(), 10 + 11 + 12 + 13);
  // Pinned host memory stays host memory.
  void* pinned = nullptr;
  check(driver().cuMemHostAlloc(&pinned, 64, 0), "cuMemHostAlloc");
  EXPECT_TRUE(host_readable(pinned, 64));
  check(driver().cuMemFreeHost(pinned), "cuMemFreeHost");
  // The emulation's own host-side code (emulated NCCL, GEMM) translates.
  const void* h = emulated_host_address(b.get() + 100, 50);
  ASSERT_NE(h, nullptr) << take_emulated_detail();
  EXPECT_NE(h, static_cast<const void*>(at(100)));
  EXPECT_EQ(std::memcmp(h, host.data() + 100, 50), 0);
  EXPECT_EQ(emulated_host_address(b.get() + 4000, 200), nullptr);
  EXPECT_NE(take_emulated_detail().find("outside every device allocation"), std::string::npos);
  // A plain dereference faults ("threadsafe": PoCL's threads run here).
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        volatile const char* p = at(8);
        std::printf("%d\n", *p);
      },
      "");
}

TEST_F(EmulatedDevice, BuildErrorsShowTheLog) {
  const std::string src =
      device_prelude() + "KILN_KERNEL void f(KILN_GLOBAL float* p) { undefined_thing(p); }\n";
  try {
    Module m(src.c_str());
    FAIL() << "expected kiln::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("undefined_thing"), std::string::npos) << e.what();
  }
}

TEST_F(EmulatedDevice, LaunchConfigurationsAreChecked) {
  const kir::Kernel k = cast_kernel(DType::f32, DType::f32);
  const std::string src = device_prelude() + print_kernel(k, "copy");
  Module mod(src.c_str());
  DeviceBuffer a(64), b(64);
  CUdeviceptr pa = a.get(), pb = b.get();
  long long n = 16, s0 = 16;
  void* params[] = {&pa, &pb, &n, &s0};
  const CUfunction fn = mod.function("copy");
  EXPECT_EQ(driver().cuLaunchKernel(fn, 1, 1, 1, 2048, 1, 1, 0, nullptr, params, nullptr),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(driver().cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 16, nullptr, params, nullptr),
            CUDA_ERROR_NOT_SUPPORTED);
  CUdeviceptr stray = pb + 4096;
  void* bad[] = {&pa, &stray, &n, &s0};
  EXPECT_EQ(driver().cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, nullptr, bad, nullptr),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(driver().cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr),
            CUDA_SUCCESS);
  check(driver().cuCtxSynchronize(), "cuCtxSynchronize");
}

// A kernel on one stream, an event, a second stream waiting on it and copying
// the result into pinned memory asynchronously: the copy sees the kernel's
// writes once the second stream is synchronized.
TEST_F(EmulatedDevice, StreamsAndEventsOrderWork) {
  kir::testing::Builder bld(1, "add_one");
  const int x = bld.load(bld.in(DType::f32, {true}));
  bld.store(bld.out(DType::f32, {true}),
            bld.op(OpId::add, DType::f32, x, bld.cnst(DType::f32, 1.0)));
  const std::string src = device_prelude() + print_kernel(bld.k, "add_one");
  Module mod(src.c_str());
  const int64_t n = 1 << 20;
  std::vector<float> host(n);
  for (int64_t i = 0; i < n; ++i) host[static_cast<size_t>(i)] = static_cast<float>(i);
  DeviceBuffer in(n * 4), out(n * 4);
  in.upload(host.data(), n * 4);
  const Driver& d = driver();
  CUstream s1 = nullptr, s2 = nullptr;
  CUevent done = nullptr, start = nullptr;
  check(d.cuStreamCreateWithPriority(&s1, CU_STREAM_NON_BLOCKING, 0), "cuStreamCreate");
  check(d.cuStreamCreateWithPriority(&s2, CU_STREAM_NON_BLOCKING, 0), "cuStreamCreate");
  check(d.cuEventCreate(&done, 0), "cuEventCreate");
  check(d.cuEventCreate(&start, 0), "cuEventCreate");
  void* pinned = nullptr;
  check(d.cuMemHostAlloc(&pinned, n * 4, 0), "cuMemHostAlloc");
  check(d.cuEventRecord(start, s1), "cuEventRecord");
  launch_kernel(mod.function("add_one"), bld.k, {in.get(), out.get()}, &n, s1);
  check(d.cuEventRecord(done, s1), "cuEventRecord");
  check(d.cuStreamWaitEvent(s2, done, 0), "cuStreamWaitEvent");
  check(d.cuMemcpyDtoHAsync(pinned, out.get(), n * 4, s2), "cuMemcpyDtoHAsync");
  // The event completes with no synchronize call: polling sees it (bounded).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  CUresult q = CUDA_ERROR_NOT_READY;
  while ((q = d.cuEventQuery(done)) == CUDA_ERROR_NOT_READY &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(q, CUDA_SUCCESS);
  check(d.cuStreamSynchronize(s2), "cuStreamSynchronize");
  float ms = -1;
  check(d.cuEventElapsedTime(&ms, start, done), "cuEventElapsedTime");
  EXPECT_GE(ms, 0);
  const auto* got = static_cast<const float*>(pinned);
  for (int64_t i = 0; i < n; i += 4099) ASSERT_EQ(got[i], static_cast<float>(i) + 1) << i;
  EXPECT_EQ(got[n - 1], static_cast<float>(n));
  check(d.cuMemFreeHost(pinned), "cuMemFreeHost");
  check(d.cuEventDestroy(done), "cuEventDestroy");
  check(d.cuEventDestroy(start), "cuEventDestroy");
  check(d.cuStreamDestroy(s1), "cuStreamDestroy");
  check(d.cuStreamDestroy(s2), "cuStreamDestroy");
}

}  // namespace
}  // namespace kiln::cuda
