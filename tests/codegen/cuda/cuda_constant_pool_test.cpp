// CPU scalars read by CUDA kernels (x * 0.5, a 0-d CPU tensor, an optimizer's
// hyperparameters in a compiled step) come from the device's pool of
// constants (kernels/cuda/cuda_constants.h): uploaded once per distinct
// (dtype, bits), not once per op or launch; exact bits kept; a CUDA graph
// reads them at replay; another stream waits for a value's upload; a full
// pool falls back to copies; an in-place write into a CPU scalar leaves the
// pool alone. On a GPU when present, else on the emulated device.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "codegen/cuda/cuda_test_util.h"
#include "common/scoped_env.h"
#include "kernels/cuda/cuda_constants.h"
#include "kernels/cuda/driver.h"
#include "kiln/compile.h"
#include "kiln/device_runtime.h"
#include "kiln/env.h"
#include "kiln/optim/optim.h"

namespace kiln::cuda {
namespace {

using kiln::testing::expect_bits;
using kiln::testing::expect_close;
using kiln::testing::expect_equal;

class CudaConstants : public kiln::testing::CudaTest<57> {};

int64_t uploads_since(const TransferStats& before) {
  return transfer_stats().uploads - before.uploads;
}

// Sets the pools' capacity for one scope (the default back after).
class PoolCapacity {
 public:
  explicit PoolCapacity(size_t values) { set_constant_pool_capacity(values); }
  ~PoolCapacity() { set_constant_pool_capacity(65536); }
  PoolCapacity(const PoolCapacity&) = delete;
  PoolCapacity& operator=(const PoolCapacity&) = delete;
};

// A CPU 0-d tensor of `dtype` holding exactly `bits` (its low bytes).
Tensor scalar_of_bits(DType dtype, uint64_t bits) {
  Tensor t = make_tensor({}, dtype);
  std::memcpy(t.data_ptr(), &bits, t.element_size());
  return t;
}

// The device's operand for `cpu` (what dispatch hands a kernel).
Tensor operand(const Tensor& cpu) {
  return device_runtime(Device::cuda(), "test").scalar_operand(cpu, Device::cuda());
}

// The case: the second `x * 0.5 + 1.0` (and one with a 0-d CPU
// tensor) uploads nothing; it uploaded both scalars at every op before.
TEST_F(CudaConstants, ASecondEagerScalarOpUploadsNothing) {
  const Tensor xc = randn({64});
  const Tensor x = xc.cuda();
  const Tensor three = full({}, 3.0);
  (void)(x * 0.5 + 1.0);
  (void)(x * three);
  const TransferStats before = transfer_stats();
  const Tensor y = x * 0.5 + 1.0;
  const Tensor z = x * three;
  EXPECT_EQ(uploads_since(before), 0);
  expect_equal(y, xc * 0.5 + 1.0, "x * 0.5 + 1.0");
  expect_equal(z, xc * three, "x * full({}, 3.0)");
}

// Equal bits share a slot, different bits never do (0.0 and -0.0, NaN
// payloads), and every dtype's bits come back exactly.
TEST_F(CudaConstants, ValuesKeepTheirExactBits) {
  struct Case {
    DType dtype;
    uint64_t bits;
  };
  const std::vector<Case> cases = {{DType::f32, 0x00000000},
                                   {DType::f32, 0x80000000},  // 0.0, -0.0
                                   {DType::f32, 0x7fc00000},
                                   {DType::f32, 0x7fc00001},  // NaN payloads
                                   {DType::f32, 0xffa00005},
                                   {DType::f32, 0x00000001},  // signalling NaN, denormal
                                   {DType::f64, 0x8000000000000000},
                                   {DType::f64, 0x7ff8000000000123},
                                   {DType::f64, 0x000fffffffffffff},
                                   {DType::f16, 0x8000},
                                   {DType::f16, 0x7e01},
                                   {DType::f16, 0x0001},
                                   {DType::bf16, 0x8000},
                                   {DType::bf16, 0x7fc1},
                                   {DType::bf16, 0x0001},
                                   {DType::i64, 0x8000000000000000},
                                   {DType::i64, 0xffffffffffffffff},
                                   {DType::i32, 0x80000000},
                                   {DType::u8, 0xff},
                                   {DType::b8, 0x01},
                                   {DType::b8, 0x00}};
  std::vector<const void*> at;
  for (const Case& c : cases) {
    const Tensor cpu = scalar_of_bits(c.dtype, c.bits);
    const Tensor dev = operand(cpu);
    ASSERT_TRUE(dev.device().is_cuda());
    expect_bits(dev, cpu, str(c.dtype, " ", c.bits));
    EXPECT_EQ(operand(cpu).data_ptr(), dev.data_ptr()) << c.dtype << " " << c.bits;
    at.push_back(dev.data_ptr());
  }
  std::vector<const void*> sorted = at;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end())
      << "two values share a slot";
  // Through an op: -0.0 after 0.0 is still -0.0.
  const Tensor none = zeros({4}, DType::b8, Device::cuda()), other = ones({4}).cuda();
  for (uint32_t b : {0x00000000u, 0x80000000u}) {
    const Tensor s = scalar_of_bits(DType::f32, b);
    expect_bits(where(none, other, s), where(none.cpu(), other.cpu(), s), str("where ", b));
  }
}

// A plain (not replayed) compiled AdamW step read each hyperparameter through
// a fresh upload per fused-kernel instance: 7 per instance. Now each value is
// uploaded once: a later call uploads only the numbers new at its step (the
// bias corrections), and the parameters still equal the CPU's eager steps.
TEST_F(CudaConstants, ACompiledAdamWStepUploadsOnlyItsNewNumbers) {
  kiln::testing::ScopedEnv off("KILN_CUDA_GRAPHS", "0");
  std::vector<Tensor> cpu, dev;
  manual_seed(5);
  for (int i = 0; i < 37; ++i) {
    const Dims d = i % 3 == 0 ? Dims{1} : i % 3 == 1 ? Dims{3} : Dims{4, 5};
    Tensor p = randn(d), g = randn(d);
    for (auto [list, device] : {std::pair{&cpu, Device::cpu()}, {&dev, Device::cuda()}}) {
      Tensor q = p.clone().to(device);
      q.requires_grad_();
      q.set_grad(g.to(device));
      list->push_back(q);
    }
  }
  const optim::AdamWOptions o{.lr = 1e-2, .weight_decay = 0.1};
  optim::AdamW cpu_opt(cpu, o), dev_opt(dev, o);
  auto step = compile(
      [&](const Tensor& x) {
        dev_opt.step();
        return x + 1;
      },
      {.warmup = 0});
  const Tensor x = zeros({1}).cuda();
  int64_t last = 0;
  for (int s = 0; s < 4; ++s) {
    cpu_opt.step();
    const TransferStats before = transfer_stats();
    (void)step(x);
    synchronize();
    last = uploads_since(before);
  }
  std::printf("uploads in the 4th plain compiled AdamW call (37 parameters): %lld\n",
              static_cast<long long>(last));
  EXPECT_LE(last, 2);
  for (size_t i = 0; i < cpu.size(); ++i)
    EXPECT_EQ(kiln::testing::bits_of(dev[i].detach()), kiln::testing::bits_of(cpu[i].detach()))
        << "parameter " << i;
}

// A CUDA graph captured with a pooled constant reads it at every replay; a new
// value during a capture is not uploaded into the pool (that upload would only
// run at replay).
TEST_F(CudaConstants, ACapturedGraphReadsPooledConstants) {
  if (env::get_flag("KILN_CUDA_SYNC", false))
    GTEST_SKIP() << "KILN_CUDA_SYNC=1: nothing is captured";
  const Driver& d = driver();
  Stream s(0);
  const auto h = static_cast<CUstream>(s.handle());
  Tensor x = from_vector<float>({1, 2, 3, 4}, {4}).cuda();
  Tensor y = zeros({4}, DType::f32, Device::cuda());
  {
    StreamGuard on(s);  // warm-up: the pooled values, the stream's cached blocks
    y.copy_(x);
    y.mul_(0.5);
    y.add_(1.25);
  }
  synchronize();
  const ConstantPoolStats warm = constant_pool_stats();
  {
    StreamGuard on(s);
    ASSERT_EQ(d.cuStreamBeginCapture(h, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
    y.copy_(x);
    y.mul_(0.5);
    y.add_(1.25);
    const Tensor fresh = scalar_of_bits(DType::f32, 0x3e2aaaab);  // new: refused
    EXPECT_FALSE(pooled_constant(fresh, 0).defined());
  }
  CUgraph graph = nullptr;
  ASSERT_EQ(d.cuStreamEndCapture(h, &graph), CUDA_SUCCESS);
  const ConstantPoolStats captured = constant_pool_stats();
  EXPECT_EQ(captured.values, warm.values);
  EXPECT_GE(captured.hits, warm.hits + 2);
  EXPECT_EQ(captured.refused, warm.refused + 1);
  CUgraphExec exec = nullptr;
  ASSERT_EQ(d.cuGraphInstantiateWithFlags(&exec, graph, 0), CUDA_SUCCESS);
  ASSERT_EQ(d.cuGraphDestroy(graph), CUDA_SUCCESS);
  ASSERT_EQ(d.cuGraphLaunch(exec, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(x.cpu().to_vector<float>(), std::vector<float>({1, 2, 3, 4}));
  EXPECT_EQ(y.cpu().to_vector<float>(), std::vector<float>({1.75, 2.25, 2.75, 3.25}));
  (void)(x * 0.75 + 2.5);  // other values join the pool between replays
  x.copy_(from_vector<float>({-1, 0, 1, 2}, {4}));
  ASSERT_EQ(d.cuGraphLaunch(exec, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(y.cpu().to_vector<float>(), std::vector<float>({0.75, 1.25, 1.75, 2.25}));
  EXPECT_EQ(d.cuGraphExecDestroy(exec), CUDA_SUCCESS);
}

// A value first uploaded on one stream and read at once on another: the
// reader waits for the upload (an event), the uploading stream needs no wait.
TEST_F(CudaConstants, AnotherStreamWaitsForTheUpload) {
  const Tensor xc = randn({1 << 16});
  const Tensor x = xc.cuda();
  Stream side(0);
  for (int i = 0; i < 4; ++i) {
    const double v = 0.0625 * (17 + i) + 1e-3;  // new in this test
    Tensor a, b;
    {
      StreamGuard on(side);
      a = exp(x) * v;  // the upload queued behind the exp
    }
    b = x * v;
    synchronize();
    expect_equal(b, xc * v, "another stream");
    expect_close(a, exp(xc) * v, 1e-5, "the uploading stream");
  }
}

// A full pool (or pools turned off) copies new values per use, as before;
// values already held still serve.
TEST_F(CudaConstants, AFullPoolFallsBackToCopies) {
  const Tensor xc = randn({16});
  const Tensor x = xc.cuda();
  (void)(x * 0.5);
  PoolCapacity full(static_cast<size_t>(constant_pool_stats().values));
  const ConstantPoolStats before = constant_pool_stats();
  for (int i = 0; i < 3; ++i) {
    const TransferStats t = transfer_stats();
    expect_equal(x * 0.8125, xc * 0.8125, "a new value, pool full");
    EXPECT_EQ(uploads_since(t), 1);
  }
  const TransferStats t = transfer_stats();
  expect_equal(x * 0.5, xc * 0.5, "a held value");
  EXPECT_EQ(uploads_since(t), 0);
  const ConstantPoolStats after = constant_pool_stats();
  EXPECT_EQ(after.values, before.values);
  EXPECT_EQ(after.refused, before.refused + 3);
  set_constant_pool_capacity(0);
  const TransferStats off = transfer_stats();
  expect_equal(x * 0.5, xc * 0.5, "pools off");
  EXPECT_EQ(uploads_since(off), 1);
}

// kiln's in-place rule: `s.add_(t)` computes s + t (on t's device, reading
// s's pooled copy) and writes the result back into s on the CPU. The pool's
// copy of s's old value is left as it was.
TEST_F(CudaConstants, AnInPlaceWriteIntoACpuScalarLeavesThePoolAlone) {
  const Tensor xc = randn({8});
  const Tensor x = xc.cuda();
  Tensor s = full({}, 2.5);
  const Tensor before = x + s;
  s.add_(ones({}).cuda());
  EXPECT_TRUE(s.device().is_cpu());
  EXPECT_EQ(s.item<float>(), 3.5f);
  s.mul_(full({}, 2.0).cuda());
  EXPECT_EQ(s.item<float>(), 7.0f);
  expect_equal(before, xc + 2.5f, "before");
  expect_equal(x + full({}, 2.5), xc + full({}, 2.5), "x + 2.5 after the writes");
  expect_equal(x + s, xc + s, "x + s");
}

// Host time per eager op with a CPU scalar: pools off (a copy per op), a
// held value, and a new value at every op (each uploaded once), in
// alternating rounds (run by hand: --gtest_also_run_disabled_tests;
// bench/RESULTS.md).
TEST_F(CudaConstants, DISABLED_HostTimePerEagerScalarOp) {
  const Tensor x = randn({16}).cuda();
  const int ops = 400, rounds = 15;
  std::vector<double> us[3];  // off, held, new
  double fresh = 0.71;
  for (int r = 0; r < 3 * rounds; ++r) {
    const int arm = r % 3;
    set_constant_pool_capacity(arm == 0 ? 0 : 65536);
    synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < ops; ++i) (void)(x * (arm == 2 ? (fresh += 1e-6) : 0.5));
    synchronize();
    const auto t1 = std::chrono::steady_clock::now();
    us[arm].push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / ops);
  }
  set_constant_pool_capacity(65536);
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::vector<double> held, fresh_ratio;
  for (int r = 0; r < rounds; ++r) {
    held.push_back(us[0][r] / us[1][r]);
    fresh_ratio.push_back(us[0][r] / us[2][r]);
  }
  std::printf(
      "us per op (x[16] * s, %d ops per round, %d rounds each): copy %.2f, held %.2f, new %.2f; "
      "paired ratios copy/held %.2f, copy/new %.2f\n",
      ops, rounds, median(us[0]), median(us[1]), median(us[2]), median(held), median(fresh_ratio));
}

}  // namespace
}  // namespace kiln::cuda
