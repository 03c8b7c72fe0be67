// Indexing on CUDA tensors (gather, index_select, scatter_add, and what is
// built on them: embedding, cross_entropy) against the CPU, gradients
// included, and the out-of-range index as a clear error at the next
// synchronization. Runs on a GPU or on the emulated device.
#include <cmath>

#include "codegen/cuda/cuda_test_util.h"
#include "kernels/cuda/gpu_printer.h"
#include "kernels/cuda/nvrtc_lib.h"
#include "kiln/cuda.h"
#include "kiln/env.h"

namespace kiln {
namespace {

using testing::error_of;
using testing::expect_close;
using testing::expect_equal;

class CudaIndex : public testing::CudaTest<7> {};

TEST_F(CudaIndex, IndexSelectAndGatherMatchTheCpu) {
  const Tensor x = randn({5, 7});
  const Tensor i64 = from_vector<int64_t>({4, 0, 4, 2}, {4});
  for (int64_t dim : {0, 1, -1}) {
    expect_equal(index_select(x.cuda(), dim, i64.cuda()), index_select(x, dim, i64),
                 str("index_select dim ", dim));
    expect_equal(index_select(x.t().cuda(), dim, i64.cuda()), index_select(x.t(), dim, i64),
                 "transposed");
  }
  const Tensor i32 = i64.to(DType::i32);
  expect_equal(index_select(x.cuda(), 0, i32.cuda()), index_select(x, 0, i32), "i32 index");
  const Tensor scalar = from_vector<int64_t>({3}, {});
  expect_equal(index_select(x.cuda(), 1, scalar.cuda()), index_select(x, 1, scalar), "0-d");
  for (DType t : {DType::f16, DType::i32, DType::b8}) {
    const Tensor xt = (x * 4).to(t);
    expect_equal(index_select(xt.cuda(), 1, i64.cuda()), index_select(xt, 1, i64), dtype_name(t));
  }
  const Tensor g = from_vector<int64_t>({0, 6, 1, 3, 3, 2, 5, 0, 4, 1, 1, 6}, {4, 3});
  expect_equal(gather(x.slice(0, 0, 4, 1).cuda(), 1, g.cuda()), gather(x.slice(0, 0, 4, 1), 1, g),
               "gather dim 1");
  const Tensor g0 = from_vector<int64_t>({4, 0, 1, 2, 3, 4, 0}, {1, 7});
  expect_equal(gather(x.cuda(), 0, g0.cuda()), gather(x, 0, g0), "gather dim 0");
}

// index_select of contiguous rows (print_index_rows: a block per row): any
// dim of a rank-3 tensor, rows longer than a block, a strided index, more
// rows than the grid's blocks, half precision; the same bits as the CPU.
TEST_F(CudaIndex, IndexSelectOfContiguousRowsMatchesTheCpu) {
  const Tensor x = randn({6, 4, 5});
  const Tensor every = from_vector<int64_t>({3, 0, 0, 2, 1, 3, 2, 5}, {8});
  const Tensor strided = every.slice(0, 0, 8, 2);  // 3 0 1 2, stride 2
  for (int64_t dim : {0, 1, 2})
    expect_equal(index_select(x.cuda(), dim, strided.cuda()), index_select(x, dim, strided),
                 str("rank 3, dim ", dim, ", strided index"));
  const Tensor wide = randn({7, 300});
  expect_equal(index_select(wide.cuda(), 0, every.cuda()), index_select(wide, 0, every),
               "rows of 300");
  expect_equal(index_select(wide.to(DType::bf16).cuda(), 0, every.cuda()),
               index_select(wide.to(DType::bf16), 0, every), "bf16 rows");
  const Tensor tokens = randint(0, 3, {70000});
  const Tensor table = randn({3, 2});
  expect_equal(index_select(table.cuda(), 0, tokens.cuda()), index_select(table, 0, tokens),
               "70000 rows");
  const Tensor none = from_vector<int64_t>({}, {0});
  EXPECT_EQ(index_select(wide.cuda(), 0, none.cuda()).shape(), (Dims{0, 300}));
}

TEST_F(CudaIndex, ScatterAddMatchesTheCpuBitForBit) {
  const Tensor base = randn({5, 4});
  const Tensor idx = from_vector<int64_t>({0, 4, 0, 1, 0, 4, 2, 1, 0, 0, 3, 1}, {3, 4});
  const Tensor src = randn({3, 4});
  expect_equal(scatter_add(base.cuda(), 0, idx.cuda(), src.cuda()), scatter_add(base, 0, idx, src),
               "dim 0, repeated targets");
  const Tensor idx1 = from_vector<int64_t>({3, 3, 0, 1, 2, 2}, {2, 3});
  expect_equal(scatter_add(base.cuda(), 1, idx1.cuda(), src.slice(0, 0, 2, 1).cuda()),
               scatter_add(base, 1, idx1, src.slice(0, 0, 2, 1)), "dim 1");
  const Tensor bf = base.to(DType::bf16);
  expect_equal(scatter_add(bf.cuda(), 0, idx.cuda(), src.to(DType::bf16).cuda()),
               scatter_add(bf, 0, idx, src.to(DType::bf16)), "bf16");
}

// An embedding's backward: one row index per entry, broadcast over the
// columns, long enough for the scanning form (few output rows: each row's
// entries found in the index, added in ascending k; 1000 rows in groups of 7
// a block) and, with 5000 output
// rows of 4000 entries, the sorted form (runs of equal indices in ascending
// k): the CPU's bits for f32, f16, bf16 and i64, with the index as an
// expanded view (stride 0), as a dense copy of it, as i32, and along dim 1.
class CudaScatterForms : public testing::CudaTest<7>,
                         public ::testing::WithParamInterface<std::pair<int64_t, int64_t>> {};

TEST_P(CudaScatterForms, ScatterAddOfABroadcastRowIndexMatchesTheCpuBitForBit) {
  const auto [rows, n] = GetParam();
  const int64_t cols = 19;
  const Tensor tokens = randint(0, rows, {n});
  const Tensor src = randn({n, cols}) * 100;
  const Tensor expanded = tokens.reshape({n, 1}).expand({n, cols});
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::i64}) {
    const Tensor base = (randn({rows, cols}) * 10).to(t), s = src.to(t);
    const Tensor want = scatter_add(base, 0, expanded, s);
    const Tensor on_device = tokens.cuda().reshape({n, 1}).expand({n, cols});  // stride 0
    expect_equal(scatter_add(base.cuda(), 0, on_device, s.cuda()), want, str(t, " expanded index"));
    expect_equal(scatter_add(base.cuda(), 0, expanded.contiguous().cuda(), s.cuda()), want,
                 str(t, " dense index (per-line form)"));
    expect_equal(scatter_add(base.cuda(), 0, expanded.to(DType::i32).cuda(), s.cuda()), want,
                 str(t, " i32 index"));
  }
  const Tensor base_t = randn({cols, rows});
  const Tensor idx_t = tokens.reshape({1, n}).expand({cols, n});
  expect_equal(scatter_add(base_t.cuda(), 1, tokens.cuda().reshape({1, n}).expand({cols, n}),
                           src.t().contiguous().cuda()),
               scatter_add(base_t, 1, idx_t, src.t().contiguous()), "dim 1");
  // A 1-D index (one line).
  const Tensor v = randn({rows});
  expect_equal(scatter_add(v.cuda(), 0, tokens.cuda(), src.select(1, 0).contiguous().cuda()),
               scatter_add(v, 0, tokens, src.select(1, 0).contiguous()), "1-D");
  // index_select's backward through autograd.
  const Tensor w = randn({rows, cols}).requires_grad_();
  const Tensor wc = w.detach().cuda().requires_grad_();
  index_select(w, 0, tokens).mul(src).sum().backward();
  index_select(wc, 0, tokens.cuda()).mul(src.cuda()).sum().backward();
  expect_equal(wc.grad(), w.grad(), "index_select backward");
}

INSTANTIATE_TEST_SUITE_P(Forms, CudaScatterForms,
                         ::testing::Values(std::pair<int64_t, int64_t>{37, 700},
                                           std::pair<int64_t, int64_t>{1000, 1500},
                                           std::pair<int64_t, int64_t>{5000, 4000}));

// The scanning form's windows (cuda::kScatterWindow entries at a time) with
// every entry matching: one index value 2600 times (three windows, the first
// two full), interleaved with another, and in descending runs; into 4 rows (a
// block per row) and into 600 (a block per group of 4 rows: every entry is
// the first group's).
TEST_F(CudaIndex, ScatterAddScanningFullWindowsMatchesTheCpuBitForBit) {
  const int64_t n = 2600, cols = 5;
  const Tensor src = randn({n, cols}) * 100;
  std::vector<int64_t> alternating(static_cast<size_t>(n)), descending(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    alternating[static_cast<size_t>(k)] = k % 2 ? 3 : 1;
    descending[static_cast<size_t>(k)] = 3 - k * 4 / n;
  }
  for (const Tensor& tok : {full({n}, 2, DType::i64), from_vector<int64_t>(alternating, {n}),
                            from_vector<int64_t>(descending, {n})}) {
    const Tensor expanded = tok.reshape({n, 1}).expand({n, cols});
    for (int64_t rows : {4, 600}) {
      const Tensor base = randn({rows, cols});
      expect_equal(scatter_add(base.cuda(), 0, expanded.cuda(), src.cuda()),
                   scatter_add(base, 0, expanded, src), str("windows, ", rows, " rows"));
    }
  }
}

bool sync_mode() {
  return env::get_flag("KILN_CUDA_SYNC", false);
}

// An out-of-range index is skipped by the kernel and reported, with the op,
// the index, the dim and its size, at the host's next synchronization with
// the device: a copy to the host, cuda::synchronize, Stream::synchronize,
// Event::synchronize (with KILN_CUDA_SYNC=1 at the launch itself). The first
// bad index wins; the report clears it.
TEST_F(CudaIndex, OutOfRangeIndicesAreClearErrorsAtTheNextSynchronization) {
  const Tensor x = randn({5, 3}).cuda();
  const std::string at_launch = "found at the launch (KILN_CUDA_SYNC=1)";
  // Launches one bad op with `launch`, then synchronizes with `sync`: the error
  // names `want` and where it was found.
  auto expect_reported = [&](auto launch, auto sync, const std::string& want,
                             const std::string& where) {
    const std::string at = error_of(launch);
    if (sync_mode()) {
      EXPECT_NE(at.find(want), std::string::npos) << at;
      EXPECT_NE(at.find(at_launch), std::string::npos) << at;
      return;
    }
    EXPECT_EQ(at, "") << "a host read at the launch";
    const std::string m = error_of(sync);
    EXPECT_NE(m.find(want), std::string::npos) << m;
    EXPECT_NE(m.find("found at the host's next synchronization with the device: " + where),
              std::string::npos)
        << m;
  };
  Tensor y;
  expect_reported(
      [&] {
        y = index_select(x, 0, from_vector<int64_t>({1, 7}, {2}).cuda());
      },
      [&] { (void)y.cpu(); }, "[index_select] index 7 is out of bounds for dimension 0 with size 5",
      "a copy to the host");
  expect_reported(
      [&] {
        (void)gather(x, 1, from_vector<int64_t>({-1}, {1, 1}).cuda());
      },
      [] { cuda::synchronize(); }, "[gather] index -1 is out of bounds for dimension 1 with size 3",
      "cuda::synchronize");
  expect_reported(
      [&] {
        (void)scatter_add(x, 0, from_vector<int64_t>({5}, {1, 1}).cuda(), ones({1, 1}).cuda());
      },
      [] { cuda::current_stream().synchronize(); },
      "[scatter_add] index 5 is out of bounds for dimension 0 with size 5", "Stream::synchronize");
  std::vector<int64_t> rows(100, 3);
  rows[60] = 9;  // long enough for the scanning form
  const Tensor many = from_vector<int64_t>(rows, {100, 1}).cuda().expand({100, 3});
  expect_reported(
      [&] {
        (void)scatter_add(x, 0, many, ones({100, 3}).cuda());
      },
      [] { cuda::synchronize(); },
      "[scatter_add] index 9 is out of bounds for dimension 0 with size 5", "cuda::synchronize");
  // The sorted form: 5000 output rows of 4000 entries.
  std::vector<int64_t> wide(4000, 7);
  wide[1234] = -2;
  const Tensor big = zeros({5000, 2}).cuda();
  expect_reported(
      [&] {
        (void)scatter_add(big, 0, from_vector<int64_t>(wide, {4000, 1}).cuda().expand({4000, 2}),
                          ones({4000, 2}).cuda());
      },
      [] { cuda::synchronize(); },
      "[scatter_add] index -2 is out of bounds for dimension 0 with size 5000",
      "cuda::synchronize");
  cuda::Stream side(0);
  cuda::Event done;
  const Tensor bad = from_vector<int64_t>({0, 2, 6}, {3}).cuda();
  cuda::synchronize();  // `bad` uploaded before the side stream reads it
  expect_reported(
      [&] {
        cuda::StreamGuard on(side);
        (void)index_select(x, 1, bad);
        done.record(side);
      },
      [&] { done.synchronize(); },
      "[index_select] index 6 is out of bounds for dimension 1 with size 3", "Event::synchronize");
  if (!sync_mode()) {
    // Two bad launches: the first is reported, once.
    (void)index_select(x, 0, from_vector<int64_t>({9}, {1}).cuda());
    (void)index_select(x, 0, from_vector<int64_t>({11}, {1}).cuda());
    const std::string m = error_of([] { cuda::synchronize(); });
    EXPECT_NE(m.find("[index_select] index 9 is out of bounds"), std::string::npos) << m;
    EXPECT_EQ(error_of([] { cuda::synchronize(); }), "");
  }
  // The device stays usable; good indices still read the right rows.
  expect_equal(x * 2, x.cpu() * 2, "after");
  expect_equal(index_select(x, 0, from_vector<int64_t>({4, 0}, {2}).cuda()),
               index_select(x.cpu(), 0, from_vector<int64_t>({4, 0}, {2})), "good indices");
}

TEST_F(CudaIndex, EmbeddingAndCrossEntropyTrainLikeOnTheCpu) {
  const Tensor w0 = randn({10, 6}), tokens = from_vector<int64_t>({3, 1, 3, 9, 0, 3}, {2, 3});
  const Tensor target = from_vector<int64_t>({2, 5, 0, 1, 4, 2}, {6});
  auto loss_of = [&](const Tensor& w, const Tensor& tok, const Tensor& tgt) {
    return cross_entropy(embedding(tok, w).reshape({6, 6}), tgt);
  };
  Tensor wc = w0.clone().requires_grad_();
  const Tensor lc = loss_of(wc, tokens, target);
  lc.backward();
  Tensor wg = w0.cuda().requires_grad_();
  const Tensor lg = loss_of(wg, tokens.cuda(), target.cuda());
  lg.backward();
  expect_close(lg, lc, 1e-6, "loss");
  expect_close(wg.grad(), wc.grad(), 1e-6, "embedding grad (scatter_add of repeated tokens)");
}

// The indexing kernels (with their compare-and-swap on the error record) and
// the strided copies (32- and 64-bit loops), the fills and the matmul's pointer
// tables as NVRTC compiles them for a GPU:
// PTX for sm_90 with the atomic. No driver needed.
TEST(CudaIndexNvrtc, KernelsCompileForTheGpu) {
  if (!cuda::nvrtc_available()) GTEST_SKIP() << "no NVRTC";
  std::string source = cuda::cuda_prelude();
  for (DType t : {DType::f32, DType::bf16, DType::b8})
    for (DType i : {DType::i64, DType::i32}) {
      source += cuda::print_gather(t, i, str("g_", dtype_name(t), "_", dtype_name(i)));
      source += cuda::print_index_rows(t, i, str("r_", dtype_name(t), "_", dtype_name(i)));
      source += cuda::print_scatter_add(t, i, str("s_", dtype_name(t), "_", dtype_name(i)));
      source += cuda::print_scatter_add_sorted(t, i, str("ss_", dtype_name(t), "_", dtype_name(i)));
      source += cuda::print_scatter_add_scan(t, i, str("sc_", dtype_name(t), "_", dtype_name(i)));
      if (t == DType::f32) source += cuda::print_scatter_keys(i, str("k_", dtype_name(i)));
    }
  source += cuda::print_strided_copy(DType::f32, DType::bf16, "c_f32_bf16");
  source += cuda::print_strided_copy(DType::i64, DType::i64, "c_i64");
  source += cuda::print_quad_copy("c_quads");
  source += cuda::print_quad_fill("f_quads");
  source += cuda::print_pointer_table("p_table");
  const std::string ptx = cuda::nvrtc_compile(source, "index.cu", 90, /*cubin=*/false).ptx;
  EXPECT_NE(ptx.find(".target sm_90"), std::string::npos);
  EXPECT_NE(ptx.find("atom.global.cas.b32"), std::string::npos) << ptx.substr(0, 2000);
}

}  // namespace
}  // namespace kiln
