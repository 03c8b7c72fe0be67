// copy_into: the cast-and-broadcast copy every kernel and in-place op uses.
// Contiguous f32<->f16 casts use F16C when the CPU has it (chosen at run time,
// so the library still runs without it); f32<->bf16 are branch-free bit
// operations that vectorize. Both give exactly the scalar Half / BFloat16
// conversions' results (round to nearest even; inf, NaN, subnormals).
#include <algorithm>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "kiln/device_runtime.h"
#include "kiln/dispatch.h"
#include "ops/loops.h"

namespace kiln::ops {

namespace {

#if defined(__x86_64__)
__attribute__((target("avx2,f16c"))) void f32_to_f16_f16c(const float* x, Half* d, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), h);
  }
  for (; i < n; ++i) {  // the tail through the same instruction, 4 lanes at a time
    float in[4] = {x[i], 0, 0, 0};
    __m128i h = _mm_cvtps_ph(_mm_loadu_ps(in), _MM_FROUND_TO_NEAREST_INT);
    d[i].bits = static_cast<uint16_t>(_mm_extract_epi16(h, 0));
  }
}

__attribute__((target("avx2,f16c"))) void f16_to_f32_f16c(const Half* x, float* d, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(d + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
  for (; i < n; ++i) d[i] = _cvtsh_ss(x[i].bits);
}

// F16C from CPUID leaf 1 (clang 14, which builds the fuzzers, has no
// __builtin_cpu_supports("f16c")); AVX2 also implies the OS saves YMM state.
bool has_f16c() {
  static const bool yes = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0 && __builtin_cpu_supports("avx2");
  }();
  return yes;
}
#else
bool has_f16c() {
  return false;
}
void f32_to_f16_f16c(const float*, Half*, int64_t) {}
void f16_to_f32_f16c(const Half*, float*, int64_t) {}
#endif

void f32_to_f16(const float* x, Half* d, int64_t n) {
  if (has_f16c()) return f32_to_f16_f16c(x, d, n);
  for (int64_t i = 0; i < n; ++i) d[i] = Half(x[i]);
}

void f16_to_f32(const Half* x, float* d, int64_t n) {
  if (has_f16c()) return f16_to_f32_f16c(x, d, n);
  for (int64_t i = 0; i < n; ++i) d[i] = static_cast<float>(x[i]);
}

// BFloat16(float) without a branch, so the loop vectorizes.
void f32_to_bf16(const float* x, BFloat16* d, int64_t n) {
  uint16_t* o = reinterpret_cast<uint16_t*>(d);  // BFloat16's only member
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t v = std::bit_cast<uint32_t>(x[i]);
    const uint32_t rounded = (v + 0x7fffu + ((v >> 16) & 1u)) >> 16;
    const uint32_t quiet = (v >> 16) | 0x40u;
    o[i] = static_cast<uint16_t>((v & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
  }
}

void bf16_to_f32(const BFloat16* x, float* d, int64_t n) {
  const uint16_t* h = reinterpret_cast<const uint16_t*>(x);  // BFloat16's only member
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) d[i] = std::bit_cast<float>(static_cast<uint32_t>(h[i]) << 16);
}

// One run of n elements (dst, src at byte strides s), converted from S to D.
template <typename S, typename D>
void copy_run(char* const* p, const int64_t* s, int64_t n) {
  char* d = p[0];
  const char* x = p[1];
  if constexpr (std::is_same_v<S, D>) {
    if (s[0] == sizeof(D) && s[1] == sizeof(S)) {
      std::memcpy(d, x, static_cast<size_t>(n) * sizeof(D));
      return;
    }
  }
  if (s[0] == sizeof(D) && s[1] == 0) {  // a broadcast value (fill_, zero_): one conversion
    S v;
    std::memcpy(&v, x, sizeof(S));
    D r;
    if constexpr (std::is_same_v<D, bool>)
      r = static_cast<compute_t<S>>(v) != 0;
    else
      r = static_cast<D>(static_cast<compute_t<S>>(v));
    std::fill_n(reinterpret_cast<D*>(d), n, r);
    return;
  }
  if (s[0] == sizeof(D) && s[1] == sizeof(S)) {
    D* dp = reinterpret_cast<D*>(d);
    const S* xp = reinterpret_cast<const S*>(x);
    if constexpr (std::is_same_v<S, float> && std::is_same_v<D, Half>) return f32_to_f16(xp, dp, n);
    if constexpr (std::is_same_v<S, Half> && std::is_same_v<D, float>) return f16_to_f32(xp, dp, n);
    if constexpr (std::is_same_v<S, float> && std::is_same_v<D, BFloat16>)
      return f32_to_bf16(xp, dp, n);
    if constexpr (std::is_same_v<S, BFloat16> && std::is_same_v<D, float>)
      return bf16_to_f32(xp, dp, n);
    for (int64_t i = 0; i < n; ++i) dp[i] = static_cast<D>(static_cast<compute_t<S>>(xp[i]));
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    S v;
    std::memcpy(&v, x + i * s[1], sizeof(S));
    D r;
    if constexpr (std::is_same_v<D, bool>)
      r = static_cast<compute_t<S>>(v) != 0;
    else
      r = static_cast<D>(static_cast<compute_t<S>>(v));
    std::memcpy(d + i * s[0], &r, sizeof(D));
  }
}

// The 64 (S, D) pairs share one strided_loop through a function pointer (the
// loop machinery compiled once instead of per pair).
using CopyRun = void (*)(char* const*, const int64_t*, int64_t);
}  // namespace

std::pair<int64_t, int64_t> byte_extent(const Tensor& t) {
  const int64_t es = static_cast<int64_t>(t.element_size());
  int64_t lo = t.offset() * es, hi = lo + es;
  for (size_t d = 0; d < t.shape().size(); ++d) {
    const int64_t reach = (t.shape()[d] - 1) * t.strides()[d] * es;
    (reach < 0 ? lo : hi) += reach;
  }
  return {lo, hi};
}

bool share_memory(const Tensor& a, const Tensor& b) {
  const StorageImpl* s = a.impl()->storage.get();
  if (s == nullptr || s != b.impl()->storage.get() || a.numel() == 0 || b.numel() == 0)
    return false;
  const auto [alo, ahi] = byte_extent(a);
  const auto [blo, bhi] = byte_extent(b);
  return alo < bhi && blo < ahi;
}

namespace {

// True if writing dst element by element could overwrite a src element before
// it is read: they share storage, their extents meet, and src is not the very
// same elements in the same layout (an exact in-place copy is safe).
bool overlaps(const Tensor& dst, const Tensor& src) {
  if (!share_memory(dst, src)) return false;
  return !(src.dtype() == dst.dtype() && src.offset() == dst.offset() &&
           src.shape() == dst.shape() && src.strides() == dst.strides());
}
}  // namespace

void copy_into(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  if (!dst.device().is_cpu() || !src.device().is_cpu()) {  // the device's own copy
    const Device d = dst.device().is_cpu() ? src.device() : dst.device();
    device_runtime(d, "copy").copy(dst, src);
    return;
  }
  if (overlaps(dst, src)) {  // w.copy_(w.t()), a[1:].copy_(a[:-1]): read everything first
    Tensor tmp = make_tensor(src.shape(), src.dtype());
    copy_into(tmp, src);
    copy_into(dst, tmp);
    return;
  }
  const CopyRun run = visit_dtype(src.dtype(), [&](auto s) {
    return visit_dtype(dst.dtype(),
                       [&](auto d) -> CopyRun { return &copy_run<decltype(s), decltype(d)>; });
  });
  std::array<char*, 2> base{static_cast<char*>(dst.data_ptr()), static_cast<char*>(src.data_ptr())};
  std::array<Dims, 2> st{broadcast_byte_strides(dst, dst.shape()),
                         broadcast_byte_strides(src, dst.shape())};
  strided_loop<2>(dst.shape(), base, st, run);
}

Tensor to_dtype_raw(const Tensor& x, DType dt) {
  if (x.dtype() == dt) return x;
  Tensor out = make_tensor(x.shape(), dt);
  copy_into(out, x);
  return out;
}

}  // namespace kiln::ops
