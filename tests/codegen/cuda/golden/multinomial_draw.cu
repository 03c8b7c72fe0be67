KILN_KERNEL void kiln_multinomial_draw(KILN_GLOBAL kiln_i64* out, KILN_GLOBAL const double* cdf, KILN_GLOBAL const kiln_i64* last,
    KILN_GLOBAL const double* u, kiln_i64 count, kiln_i64 len, kiln_i64 n) {
  for (kiln_i64 i = (kiln_i64)blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += (kiln_i64)gridDim.x * blockDim.x) {
    const kiln_i64 row = i / n;
    KILN_GLOBAL const double* sums = cdf + row * len;
    const double t = u[i] * sums[len - 1];
    kiln_i64 lo = 0, hi = len;
    while (lo < hi) {
      const kiln_i64 mid = lo + (hi - lo) / 2;
      if (t < sums[mid]) hi = mid;
      else lo = mid + 1;
    }
    out[i] = lo < last[row] ? lo : last[row];  /* u * total rounding up to total */
  }
}
