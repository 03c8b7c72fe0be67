// Direct convolution for unit stride. Each image's channel planes are copied
// once into zero-padded planes of width Wp = W + 2 pw; output position (oh, ow)
// is then flat position q = oh * Wp + ow, and every kernel tap (i, j) reads the
// padded plane at q + i dh Wp + j dw. The convolution becomes a 1-D one over
// contiguous runs of q (the Wp - Wo columns past each row's end are computed
// and dropped), so a register tile of kRows output channels by kVecs vectors
// of consecutive q accumulates over channels and taps with whole-vector loads,
// a broadcast weight per channel row, and no im2col matrix or GEMM packing
// (timings against im2col + OpenBLAS: bench/RESULTS.md, "direct convolutions").
#include "ops/conv_direct.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kiln/thread_pool.h"

namespace kiln::ops {
namespace {

// The host's vector width under -march=native (GCC vector extensions; without
// AVX the compiler splits them).
#ifdef __AVX512F__
constexpr int kVecBytes = 64;
#else
constexpr int kVecBytes = 32;
#endif

template <typename T>
struct Vec {
  typedef T V __attribute__((vector_size(kVecBytes)));
  static constexpr int64_t kLanes = kVecBytes / sizeof(T);
};

template <typename T>
inline typename Vec<T>::V load(const T* p) {
  typename Vec<T>::V v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

template <typename T>
inline void store(T* p, typename Vec<T>::V v) {
  std::memcpy(p, &v, sizeof(v));
}

// Register tile: kRows output channels x kVecs vectors of positions. 12
// accumulators, kVecs inputs and a broadcast weight fill AVX2's 16 registers.
constexpr int kRows = 4;
constexpr int kVecs = 3;

inline int64_t round_up(int64_t a, int64_t b) {
  return (a + b - 1) / b * b;
}

// Padded-plane layout of one convolution.
struct Plan {
  int64_t Wp, Q, Qr, Ps;      // padded width, flat outputs, rounded to tiles, plane stride
  std::vector<int64_t> taps;  // flat offset of each kernel tap
};

template <typename T>
Plan make_plan(const DirectConvShape& s) {
  constexpr int64_t tile = kVecs * Vec<T>::kLanes;
  Plan p;
  p.Wp = s.W + 2 * s.pw;
  p.Q = s.Ho * p.Wp;
  p.Qr = round_up(p.Q, tile);
  for (int64_t i = 0; i < s.kH; ++i)
    for (int64_t j = 0; j < s.kW; ++j) p.taps.push_back(i * s.dh * p.Wp + j * s.dw);
  // The last tile reads up to Qr - 1 plus the largest tap: zeros past the plane.
  const int64_t padded = (s.H + 2 * s.ph) * p.Wp;
  p.Ps = round_up(std::max(padded, p.Qr + p.taps.back()), Vec<T>::kLanes);
  return p;
}

// Flat positions per chunk (whole tiles): the chunk's window of the Cg padded
// planes, about 128 KB, stays in L2 while each block of channels reads it.
template <typename T>
int64_t chunk_size(int64_t Cg, const Plan& p) {
  constexpr int64_t tile_q = kVecs * Vec<T>::kLanes;
  const int64_t tiles = std::max<int64_t>(1, (int64_t{1} << 15) / (Cg * tile_q));
  return std::min(tiles * tile_q, p.Qr);
}

// Copies the C planes [H, W] at x into zero-padded planes of stride Ps at xp.
template <typename T>
void pad_planes(const T* x, int64_t C, const DirectConvShape& s, const Plan& p, T* xp) {
  for (int64_t c = 0; c < C; ++c) {
    T* d = xp + c * p.Ps;
    const T* src = x + c * s.H * s.W;
    std::fill(d, d + s.ph * p.Wp, T(0));
    for (int64_t h = 0; h < s.H; ++h) {
      T* row = d + (s.ph + h) * p.Wp;
      std::fill(row, row + s.pw, T(0));
      std::memcpy(row + s.pw, src + h * s.W, static_cast<size_t>(s.W) * sizeof(T));
      std::fill(row + s.pw + s.W, row + p.Wp, T(0));
    }
    std::fill(d + (s.ph + s.H) * p.Wp, d + p.Ps, T(0));
  }
}

// One tile: R output channels (weights packed [c][tap][kRows]) by kVecs
// vectors from flat position q0, summed over C channels and all taps, stored
// to rows of stride ld at ys (positions past a row's end included).
template <typename T, int R>
void tile(const T* xp, const T* wp, int64_t C, const Plan& p, int64_t q0, T* ys, int64_t ld) {
  using V = typename Vec<T>::V;
  constexpr int64_t L = Vec<T>::kLanes;
  const int64_t kk = static_cast<int64_t>(p.taps.size());
  const int64_t* taps = p.taps.data();
  V acc[R][kVecs];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < kVecs; ++j) acc[i][j] = V{};
  for (int64_t c = 0; c < C; ++c) {
    const T* xc = xp + c * p.Ps + q0;
    const T* wc = wp + c * kk * kRows;
    for (int64_t t = 0; t < kk; ++t) {
      V xv[kVecs];
#pragma GCC unroll 4
      for (int j = 0; j < kVecs; ++j) xv[j] = load(xc + taps[t] + j * L);
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        const T wv = wc[t * kRows + i];  // scalar * vector broadcasts
#pragma GCC unroll 4
        for (int j = 0; j < kVecs; ++j) acc[i][j] += wv * xv[j];
      }
    }
  }
  // Per vector: copying acc[i] whole would take its address and keep the
  // accumulators in memory instead of registers.
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < kVecs; ++j) store(ys + i * ld + j * L, acc[i][j]);
}

// Copies flat positions [q0, q1) of `rows` planes at ys (stride ld) to their
// valid (ow < Wo) outputs in the planes at y.
template <typename T>
void copy_out(const T* ys, int64_t ld, int64_t rows, int64_t q0, int64_t q1, const Plan& p,
              const DirectConvShape& s, T* y) {
  for (int64_t oh = q0 / p.Wp; oh < s.Ho && oh * p.Wp < q1; ++oh) {
    const int64_t a = std::max(q0, oh * p.Wp), b = std::min(q1, oh * p.Wp + s.Wo);
    if (b <= a) continue;
    for (int64_t i = 0; i < rows; ++i)
      std::memcpy(y + i * s.Ho * s.Wo + oh * s.Wo + (a - oh * p.Wp), ys + i * ld + (a - q0),
                  static_cast<size_t>(b - a) * sizeof(T));
  }
}

// Output channels [ob0, ob1) (in blocks of kRows) of one image's group, whose
// padded planes are at xp. Positions go in chunks sized so that the chunk's
// window of the Cg planes stays in L2 while every block of channels reads it;
// ys holds one block's chunk of results.
template <typename T>
void image_group(const T* xp, const T* wg, int64_t Cg, int64_t Og, int64_t ob0, int64_t ob1,
                 const Plan& p, const DirectConvShape& s, T* ys, T* yg) {
  constexpr int64_t tile_q = kVecs * Vec<T>::kLanes;
  const int64_t kk = static_cast<int64_t>(p.taps.size());
  const int64_t chunk = chunk_size<T>(Cg, p);
  for (int64_t qc = 0; qc < p.Qr; qc += chunk) {
    const int64_t qe = std::min(p.Qr, qc + chunk);
    for (int64_t ob = ob0; ob < ob1; ++ob) {
      const T* wb = wg + ob * Cg * kk * kRows;
      const int64_t rows = std::min<int64_t>(kRows, Og - ob * kRows);
      for (int64_t q0 = qc; q0 < qe; q0 += tile_q) {
        T* yt = ys + (q0 - qc);
        switch (rows) {
          case 4:
            tile<T, 4>(xp, wb, Cg, p, q0, yt, chunk);
            break;
          case 3:
            tile<T, 3>(xp, wb, Cg, p, q0, yt, chunk);
            break;
          case 2:
            tile<T, 2>(xp, wb, Cg, p, q0, yt, chunk);
            break;
          default:
            tile<T, 1>(xp, wb, Cg, p, q0, yt, chunk);
            break;
        }
      }
      copy_out(ys, chunk, rows, qc, std::min(qe, p.Q), p, s, yg + ob * kRows * s.Ho * s.Wo);
    }
  }
}

// ---- weight gradient ----
// gw[o, c, tap] = sum over images and q of gy[o, q] * xp[c, q + tap]. The
// output gradient is transposed per image to gyT [q][Op] (output channels
// contiguous, Op = Og rounded up to whole vectors; zeros at the dropped
// columns), so a tile of kGwVecs vectors of output channels by kGwTaps taps
// accumulates over q with one broadcast of x per tap: no horizontal sums.
constexpr int kGwVecs = 4;
constexpr int kGwTaps = 3;

template <typename T, int NV, int NT>
void gw_tile(const T* gyT, int64_t Op, const T* xc, const int64_t* taps, int64_t q0, int64_t q1,
             T* out) {
  using V = typename Vec<T>::V;
  constexpr int64_t L = Vec<T>::kLanes;
  V acc[NV][NT];
  for (int i = 0; i < NV; ++i)
    for (int j = 0; j < NT; ++j) acc[i][j] = V{};
  for (int64_t q = q0; q < q1; ++q) {
    T xb[NT];
#pragma GCC unroll 4
    for (int j = 0; j < NT; ++j) xb[j] = xc[q + taps[j]];
    const T* g = gyT + q * Op;
#pragma GCC unroll 4
    for (int i = 0; i < NV; ++i) {
      V gv = load(g + i * L);
#if defined(__x86_64__) && defined(__AVX__)
      // Keeps gv in a register: GCC would otherwise fold the load into each of
      // the NT multiply-adds, and the load ports, not the FMAs, set the pace.
      // Only with AVX does a 32-byte vector fit one "x" register (builds
      // without -march=native, such as the fuzzers', split it).
      asm("" : "+x"(gv));
#endif
#pragma GCC unroll 4
      for (int j = 0; j < NT; ++j) acc[i][j] += xb[j] * gv;
    }
  }
  for (int j = 0; j < NT; ++j)
    for (int i = 0; i < NV; ++i)
      store(out + j * Op + i * L, load(out + j * Op + i * L) + acc[i][j]);
}

// All taps of one channel's plane xc over positions [q0, q1), for the NV
// vectors of output channels at gyT (out: [tap][Op] of that channel).
template <typename T, int NV>
void gw_taps(const T* gyT, int64_t Op, const T* xc, const Plan& p, int64_t q0, int64_t q1, T* out) {
  const int64_t kk = static_cast<int64_t>(p.taps.size());
  int64_t t = 0;
  for (; t + kGwTaps <= kk; t += kGwTaps)
    gw_tile<T, NV, kGwTaps>(gyT, Op, xc, p.taps.data() + t, q0, q1, out + t * Op);
  for (; t < kk; ++t) gw_tile<T, NV, 1>(gyT, Op, xc, p.taps.data() + t, q0, q1, out + t * Op);
}

// Adds one image group's contribution to out [Cg][tap][Op]: xp its padded
// planes, gyT its transposed output gradient. Positions go in blocks whose
// rows of gyT (about 16 KB) stay in L1 while every channel reads them.
template <typename T>
void gw_image(const T* xp, const T* gyT, int64_t Cg, int64_t Op, const Plan& p, T* out) {
  constexpr int64_t L = Vec<T>::kLanes;
  const int64_t kk = static_cast<int64_t>(p.taps.size()), vecs = Op / L;
  const int64_t block = std::max<int64_t>(16, 4096 / Op);
  for (int64_t q0 = 0; q0 < p.Q; q0 += block) {
    const int64_t q1 = std::min(p.Q, q0 + block);
    for (int64_t c = 0; c < Cg; ++c) {
      const T* xc = xp + c * p.Ps;
      T* oc = out + c * kk * Op;
      int64_t v = 0;
      for (; v + kGwVecs <= vecs; v += kGwVecs)
        gw_taps<T, kGwVecs>(gyT + v * L, Op, xc, p, q0, q1, oc + v * L);
      const T* g = gyT + v * L;
      switch (vecs - v) {
        case 3:
          gw_taps<T, 3>(g, Op, xc, p, q0, q1, oc + v * L);
          break;
        case 2:
          gw_taps<T, 2>(g, Op, xc, p, q0, q1, oc + v * L);
          break;
        case 1:
          gw_taps<T, 1>(g, Op, xc, p, q0, q1, oc + v * L);
          break;
        default:
          break;
      }
    }
  }
}

}  // namespace

bool direct_conv_applies(const DirectConvShape& s) {
  if (s.sh != 1 || s.sw != 1) return false;
  const bool gemm_1x1 = s.kH == 1 && s.kW == 1 && s.ph == 0 && s.pw == 0;
  // Computing the Wp - Wo dropped columns costs (Wp / Wo - 1) of the work.
  const int64_t Wp = s.W + 2 * s.pw;
  return !gemm_1x1 && s.N > 0 && s.C > 0 && s.O > 0 && s.Wo > 0 && s.Ho > 0 && 2 * Wp <= 3 * s.Wo;
}

template <typename T>
void direct_conv_forward(const T* x, const T* w, T* y, const DirectConvShape& s) {
  static_assert(kRows == 4, "image_group's switch covers 1..4 rows");
  const Plan p = make_plan<T>(s);
  const int64_t G = s.groups, Cg = s.C / G, Og = s.O / G, kk = s.kH * s.kW;
  const int64_t blocks = (Og + kRows - 1) / kRows;
  // Weights packed per group and block of kRows channels as [c][tap][kRows]
  // (zeros past Og), so a tile's broadcasts walk one contiguous run.
  std::vector<T> wp(static_cast<size_t>(G * blocks * Cg * kk * kRows), T(0));
  for (int64_t gr = 0; gr < G; ++gr)
    for (int64_t o = 0; o < Og; ++o)
      for (int64_t c = 0; c < Cg; ++c)
        for (int64_t t = 0; t < kk; ++t)
          wp[static_cast<size_t>((((gr * blocks + o / kRows) * Cg + c) * kk + t) * kRows +
                                 o % kRows)] = w[((gr * Og + o) * Cg + c) * kk + t];
  // Work items: (image, group, share of the channel blocks). A batch smaller
  // than the pool splits each image's channel blocks instead.
  const int64_t images = s.N * G;
  const int64_t shares =
      std::clamp<int64_t>((num_threads() + images - 1) / std::max<int64_t>(images, 1), 1, blocks);
  parallel_for(0, images * shares, 1, [&](int64_t i0, int64_t i1) {
    std::vector<T> xp(static_cast<size_t>(Cg * p.Ps));
    std::vector<T> ys(static_cast<size_t>(kRows * chunk_size<T>(Cg, p)));
    int64_t padded = -1;
    for (int64_t it = i0; it < i1; ++it) {
      const int64_t img = it / shares, sh = it % shares, n = img / G, gr = img % G;
      if (img != padded) {
        pad_planes(x + (n * s.C + gr * Cg) * s.H * s.W, Cg, s, p, xp.data());
        padded = img;
      }
      image_group(xp.data(), wp.data() + gr * blocks * Cg * kk * kRows, Cg, Og,
                  blocks * sh / shares, blocks * (sh + 1) / shares, p, s, ys.data(),
                  y + (n * s.O + gr * Og) * s.Ho * s.Wo);
    }
  });
}

template void direct_conv_forward<float>(const float*, const float*, float*,
                                         const DirectConvShape&);
template void direct_conv_forward<double>(const double*, const double*, double*,
                                          const DirectConvShape&);

bool direct_conv_grad_weight_applies(const DirectConvShape& s) {
  // Few input channels per group leave too little work per transposed
  // gradient element; im2col + GEMM does better there.
  return direct_conv_applies(s) && s.C / s.groups >= 4;
}

template <typename T>
void direct_conv_grad_weight(const T* x, const T* gy, T* gw, const DirectConvShape& s) {
  static_assert(kGwVecs == 4, "gw_image's switch covers 1..3 remaining vectors");
  constexpr int64_t L = Vec<T>::kLanes;
  const Plan p = make_plan<T>(s);
  const int64_t G = s.groups, Cg = s.C / G, Og = s.O / G, kk = s.kH * s.kW;
  const int64_t Op = round_up(Og, L), HWo = s.Ho * s.Wo;
  // Fixed blocks of images (set by N alone, so results do not depend on the
  // threads) sum into their own partial [G][Cg][tap][Op], added in block order.
  const int64_t blocks = std::clamp<int64_t>(s.N, 1, 16), part = G * Cg * kk * Op;
  std::vector<T> parts(static_cast<size_t>(blocks * part), T(0));
  parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    std::vector<T> xp(static_cast<size_t>(Cg * p.Ps));
    // Zero once: only valid positions and real channels are ever written.
    std::vector<T> gyT(static_cast<size_t>(p.Q * Op), T(0));
    for (int64_t blk = b0; blk < b1; ++blk) {
      for (int64_t n = s.N * blk / blocks; n < s.N * (blk + 1) / blocks; ++n) {
        for (int64_t gr = 0; gr < G; ++gr) {
          pad_planes(x + (n * s.C + gr * Cg) * s.H * s.W, Cg, s, p, xp.data());
          for (int64_t o = 0; o < Og; ++o)
            for (int64_t h = 0; h < s.Ho; ++h) {
              const T* src = gy + (n * s.O + gr * Og + o) * HWo + h * s.Wo;
              T* dst = gyT.data() + h * p.Wp * Op + o;
              for (int64_t w = 0; w < s.Wo; ++w) dst[w * Op] = src[w];
            }
          gw_image(xp.data(), gyT.data(), Cg, Op, p, parts.data() + blk * part + gr * Cg * kk * Op);
        }
      }
    }
  });
  for (int64_t blk = 1; blk < blocks; ++blk)
    for (int64_t i = 0; i < part; ++i) parts[i] += parts[blk * part + i];
  for (int64_t gr = 0; gr < G; ++gr)
    for (int64_t o = 0; o < Og; ++o)
      for (int64_t c = 0; c < Cg; ++c)
        for (int64_t t = 0; t < kk; ++t)
          gw[((gr * Og + o) * Cg + c) * kk + t] = parts[((gr * Cg + c) * kk + t) * Op + o];
}

template void direct_conv_grad_weight<float>(const float*, const float*, float*,
                                             const DirectConvShape&);
template void direct_conv_grad_weight<double>(const double*, const double*, double*,
                                              const DirectConvShape&);

}  // namespace kiln::ops
