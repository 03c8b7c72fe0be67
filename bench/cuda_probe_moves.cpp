// cuda_probe's lines for the kernels that move data around a transformer
// step's products (session 16): the eager column sum at the parts of the old
// rule (column_parts) against the new (column_sum_parts), and the head copy
// of the attention ([B, H, L, D] out of [B, L, H, D]) element by element
// against 16 bytes a move. Each as GB/s of the data read and written.
#include "cuda_probe_moves.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "kernels/cuda/driver.h"
#include "kernels/cuda/gpu_printer.h"
#include "kernels/cuda/module.h"
#include "kiln/error.h"

namespace kiln::cuda {
namespace {

// The column sum of [rows, cols] f32 in `parts` parts, then their combine:
// the launches of cuda_columns.cpp.
void launch_column_sum(CUfunction sum, CUfunction combine, CUdeviceptr x, CUdeviceptr partial,
                       CUdeviceptr out, long long rows, long long cols, long long parts) {
  void* sp[] = {&partial, &x, &rows, &cols, &parts};
  const long long threads = std::min<long long>(256, (cols + 31) / 32 * 32);
  const long long blocks = std::min<long long>(parts * ((cols + threads - 1) / threads), 1 << 16);
  check(driver().cuLaunchKernel(sum, static_cast<unsigned>(blocks), 1, 1,
                                static_cast<unsigned>(threads), 1, 1, 0, nullptr, sp, nullptr),
        "cuLaunchKernel (column sum)");
  void* cp[] = {&out, &partial, &cols, &parts};
  const long long slices = column_combine_slices(parts);
  const long long width = std::clamp<long long>(cols, 1, 1024 / slices);
  const long long cblocks = std::min<long long>((cols + width - 1) / width, 1 << 16);
  check(
      driver().cuLaunchKernel(combine, static_cast<unsigned>(cblocks), 1, 1,
                              static_cast<unsigned>(width * slices), 1, 1, 0, nullptr, cp, nullptr),
      "cuLaunchKernel (combine)");
}

}  // namespace

void move_lines(const std::function<double(const std::function<void()>&)>& median_ms) {
  const std::string src = device_prelude() + print_column_sum(DType::f32, DType::f64, "ksum") +
                          print_column_combine(DType::f64, DType::f32, "kcomb") +
                          print_strided_copy(DType::f32, DType::f32, "kcopy") +
                          print_quad_copy("kquads");
  const std::vector<char> image = compile_for_device(src, "probe_moves.cu", 0);
  Module mod(image.data());
  const CUfunction fsum = mod.function("ksum"), fcomb = mod.function("kcomb");
  // The transformer's QKV bias gradient, its position embedding's, a layer norm's.
  const long long shapes[3][2] = {{8192, 1536}, {32, 131072}, {8192, 512}};
  for (const auto& shape : shapes) {
    const long long rows = shape[0], cols = shape[1];
    DeviceBuffer x(static_cast<size_t>(rows * cols) * 4), out(static_cast<size_t>(cols) * 4);
    std::printf("eager column sum [%lld | %lld]:", rows, cols);
    for (const long long parts : {static_cast<long long>(column_parts(rows, cols)),
                                  static_cast<long long>(column_sum_parts(rows, cols))}) {
      DeviceBuffer partial(static_cast<size_t>(parts * cols) * 8);
      const double ms = median_ms([&] {
        launch_column_sum(fsum, fcomb, x.get(), partial.get(), out.get(), rows, cols, parts);
      });
      std::printf(" | %lld parts %.3f ms (%.0f GB/s of x)", parts, ms,
                  static_cast<double>(rows * cols) * 4 / ms / 1e6);
    }
    std::printf("  (old rule | new rule)\n");
  }
  // The head copy: [32, 8, 256, 64] out of [32, 256, 8, 64].
  const long long B = 32, H = 8, L = 256, D = 64, n = B * H * L * D;
  DeviceBuffer from(static_cast<size_t>(n) * 4), to(static_cast<size_t>(n) * 4);
  std::printf("head copy [%lld, %lld, %lld, %lld] out of [B, L, H, D]:", B, H, L, D);
  for (const bool quads : {false, true}) {
    const long long per = quads ? 4 : 1;
    KilnStrides g{};
    const long long size[4] = {B, H, L, D / per};
    const long long dst[4] = {H * L * D / per, L * D / per, D / per, 1};
    const long long srcs[4] = {L * H * D / per, D / per, H * D / per, 1};
    for (int d = 0; d < 4; ++d) {
      g.size[d] = size[d];
      g.dst[d] = dst[d];
      g.src[d] = srcs[d];
    }
    CUdeviceptr dp = to.get(), sp = from.get();
    long long count = n / per;
    int rank = 4;
    void* params[] = {&dp, &sp, &count, &rank, &g};
    const CUfunction fn = mod.function(quads ? "kquads" : "kcopy");
    const double ms = median_ms([&] {
      check(driver().cuLaunchKernel(
                fn, static_cast<unsigned>(std::min<long long>((count + 255) / 256, 1 << 16)), 1, 1,
                256, 1, 1, 0, nullptr, params, nullptr),
            "cuLaunchKernel (copy)");
    });
    std::printf(" | %s %.3f ms (%.0f GB/s)", quads ? "16 bytes a move" : "an element a move", ms,
                2.0 * static_cast<double>(n) * 4 / ms / 1e6);
  }
  std::printf("\n");
}

}  // namespace kiln::cuda
