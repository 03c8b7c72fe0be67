// Constant folding in graphs compiled on CUDA: a folded value stays on the
// device the graph runs on (the IR records no device; the plan picks it from
// its arguments after the trace), compiled results equal eager ones.
#include <cstdlib>

#include "codegen/cuda/cuda_test_util.h"
#include "kiln/compile.h"
#include "kiln/cuda.h"
#include "kiln/ir/text.h"
#include "kiln/passes/fold_constants.h"

namespace kiln {
namespace {

class CudaFold : public testing::CudaTest<3> {};

// Regression: fold_constants turned `arange(T)` (a factory: on the graph's
// device at run time) into a CPU constant, and index_select raised
// "expected all tensors on one device, but input 1 is on cpu".
TEST_F(CudaFold, AFoldedFactoryFeedingADeviceOpStaysOnTheDevice) {
  const Tensor emb = randn({10, 6}).cuda();
  auto f = [&](const Tensor& idx) {
    const Tensor pos = index_select(emb, 0, arange(idx.size(0)).to(idx.device()));
    return pos + index_select(emb, 0, idx);
  };
  auto cf = compile(f, {.warmup = 0});
  const Tensor idx = from_vector<int64_t>({3, 1, 4, 1, 5, 9, 2}).cuda();
  const Tensor want = f(idx);
  for (int call = 0; call < 2; ++call) {
    const Tensor got = cf(idx);
    ASSERT_EQ(got.device(), Device::cuda());
    EXPECT_TRUE(allclose(got.cpu(), want.cpu(), 0, 0)) << "call " << call;
  }
}

// A table made on the host inside the function and moved to the device (a
// constant of the graph, then a copy to the device) feeds a device op, with
// and without folding: compiled runs it as eager does.
TEST_F(CudaFold, AHostTableMovedToTheDeviceFeedsADeviceOp) {
  const Tensor emb = randn({10, 6}).cuda();
  auto f = [&](const Tensor& idx) {
    const Tensor table = from_vector<int64_t>({2, 0, 7}).to(idx.device());
    return index_select(emb, 0, table).sum(0) + index_select(emb, 0, idx);
  };
  const Tensor idx = from_vector<int64_t>({3, 1, 4}).cuda();
  const Tensor want = f(idx);
  // Twice per pipeline: with a disk cache (KILN_CACHE_DIR, as ctest sets it)
  // the second function loads the plan the first stored, constants included.
  for (const char* disabled : {"", "", "fold_constants", "fold_constants"}) {
    setenv("KILN_DISABLE_PASSES", disabled, 1);
    auto cf = compile(f, {.warmup = 0});
    for (int call = 0; call < 2; ++call) {
      const Tensor got = cf(idx);
      ASSERT_EQ(got.device(), Device::cuda());
      EXPECT_TRUE(allclose(got.cpu(), want.cpu(), 1e-6, 1e-6)) << disabled << " call " << call;
    }
  }
  unsetenv("KILN_DISABLE_PASSES");
}

// A folded chain (arange * 3 + 1) returned by the graph comes back on the
// graph's device, as eager's `.to(x.device())` puts it.
TEST_F(CudaFold, AFoldedOutputIsOnTheGraphsDevice) {
  auto f = [](const Tensor& x) {
    return std::make_pair(x * 2, (arange(5) * 3 + 1).to(x.device()));
  };
  auto cf = compile(
      [&](const Tensor& x) {
        auto [a, b] = f(x);
        return std::vector<Tensor>{a, b};
      },
      {.warmup = 0});
  const Tensor x = randn({4}).cuda();
  const std::vector<Tensor> got = cf(x);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].device(), Device::cuda());
  EXPECT_TRUE(allclose(got[1].cpu(), f(x).second.cpu(), 0, 0));
}

// With the graph's device known (passes::FoldDeviceScope), folded values are
// placed on it, host scalars that are no output stay on the host.
TEST_F(CudaFold, UnderADeviceScopeFoldedValuesArePlacedOnTheDevice) {
  std::unique_ptr<ir::Graph> g = ir::parse(R"(graph(%0: f32[10, 6] "emb") {
  %1 = arange() {start=0.0, end=4.0, step=1.0, dtype=i64} : i64[4]
  %2 = index_select(%0, %1) {dim=0} : f32[4, 6]
  %3 = constant f32[2] [1.0, 2.0]
  %4 = sum(%3) {dims=[0], keepdim=false} : f32[]
  %5 = mul(%2, %4) : f32[4, 6]
  return %5 "out0"
}
)");
  const passes::FoldDeviceScope on_device(Device::cuda());
  ASSERT_TRUE(passes::fold_constants(*g));
  int constants = 0;
  for (const ir::Node* n : g->nodes()) {
    if (!n->is_constant()) continue;
    ++constants;
    if (n->constant.dim() == 0) {
      EXPECT_EQ(n->constant.device(), Device::cpu()) << ir::print(*g);
    } else if (n->constant.dtype() == DType::i64) {
      EXPECT_EQ(n->constant.device(), Device::cuda()) << ir::print(*g);
      EXPECT_EQ(n->constant.cpu().to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3}));
    }
  }
  EXPECT_EQ(constants, 3) << ir::print(*g);
}

}  // namespace
}  // namespace kiln
