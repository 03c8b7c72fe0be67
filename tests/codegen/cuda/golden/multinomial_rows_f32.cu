KILN_KERNEL void kiln_multinomial_rows_f32(KILN_GLOBAL kiln_i64* status, KILN_GLOBAL double* cdf, KILN_GLOBAL kiln_i64* last,
    KILN_GLOBAL const float* p, kiln_i64 rows, kiln_i64 len, kiln_i64 n) {
  for (kiln_i64 i = (kiln_i64)blockIdx.x * blockDim.x + threadIdx.x; i < rows;
       i += (kiln_i64)gridDim.x * blockDim.x) {
    const kiln_i64 base = i * len;
    double total = 0;
    kiln_i64 nonzero = 0, last_nonzero = 0;
    int bad = 0;
    for (kiln_i64 c = 0; c < len; ++c) {
      const double v = (double)(p[base + c]);
      if (!(v >= 0 && v <= (0x1.fffffffffffffp+1023))) bad = 1;
      total = total + v;
      if (v > 0) {
        ++nonzero;
        last_nonzero = c;
      }
    }
    if (!(total > 0 && total <= (0x1.fffffffffffffp+1023))) bad = 1;
    if (nonzero < n) bad = 1;
    status[i] = bad ? rows - i : 0;
  }
}
