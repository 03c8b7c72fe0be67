// copy_into: the cast-and-broadcast copy every kernel and in-place op uses.
#include <cstring>

#include "kiln/dispatch.h"
#include "ops/loops.h"

namespace kiln::ops {

namespace {
template <typename S, typename D>
void copy_typed(const Tensor& dst, const Tensor& src) {
  std::array<char*, 2> base{static_cast<char*>(dst.data_ptr()),
                            static_cast<char*>(src.data_ptr())};
  std::array<Dims, 2> st{broadcast_byte_strides(dst, dst.shape()),
                         broadcast_byte_strides(src, dst.shape())};
  strided_loop<2>(dst.shape(), base, st, [](char** p, const int64_t* s, int64_t n) {
    char* d = p[0];
    const char* x = p[1];
    if constexpr (std::is_same_v<S, D>) {
      if (s[0] == sizeof(D) && s[1] == sizeof(S)) {
        std::memcpy(d, x, static_cast<size_t>(n) * sizeof(D));
        return;
      }
    }
    if (s[0] == sizeof(D) && s[1] == sizeof(S)) {
      D* dp = reinterpret_cast<D*>(d);
      const S* xp = reinterpret_cast<const S*>(x);
      for (int64_t i = 0; i < n; ++i) dp[i] = static_cast<D>(static_cast<compute_t<S>>(xp[i]));
      return;
    }
    for (int64_t i = 0; i < n; ++i) {
      S v;
      std::memcpy(&v, x + i * s[1], sizeof(S));
      D r;
      if constexpr (std::is_same_v<D, bool>) r = static_cast<compute_t<S>>(v) != 0;
      else r = static_cast<D>(static_cast<compute_t<S>>(v));
      std::memcpy(d + i * s[0], &r, sizeof(D));
    }
  });
}
}  // namespace

void copy_into(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  visit_dtype(src.dtype(), [&](auto s) {
    visit_dtype(dst.dtype(), [&](auto d) { copy_typed<decltype(s), decltype(d)>(dst, src); });
  });
}

Tensor to_dtype_raw(const Tensor& x, DType dt) {
  if (x.dtype() == dt) return x;
  Tensor out = make_tensor(x.shape(), dt);
  copy_into(out, x);
  return out;
}

}  // namespace kiln::ops
