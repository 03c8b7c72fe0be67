KILN_KERNEL void kiln_multinomial_rows_repl_f16(KILN_GLOBAL kiln_i64* status, KILN_GLOBAL double* cdf, KILN_GLOBAL kiln_i64* last,
    KILN_GLOBAL const unsigned short* p, kiln_i64 rows, kiln_i64 len, kiln_i64 n) {
  for (kiln_i64 i = (kiln_i64)blockIdx.x * blockDim.x + threadIdx.x; i < rows;
       i += (kiln_i64)gridDim.x * blockDim.x) {
    const kiln_i64 base = i * len;
    double total = 0;
    kiln_i64 nonzero = 0, last_nonzero = 0;
    int bad = 0;
    for (kiln_i64 c = 0; c < len; ++c) {
      const double v = (double)(kiln_f16_to_f32(p[base + c]));
      if (!(v >= 0 && v <= (0x1.fffffffffffffp+1023))) bad = 1;
      total = total + v;
      if (v > 0) {
        ++nonzero;
        last_nonzero = c;
      }
      cdf[base + c] = total;
    }
    if (!(total > 0 && total <= (0x1.fffffffffffffp+1023))) bad = 1;
    status[i] = bad ? rows - i : 0;
    last[i] = last_nonzero;
  }
}
