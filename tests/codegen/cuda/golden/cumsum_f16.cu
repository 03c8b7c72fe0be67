KILN_KERNEL void kiln_cumsum_f16(KILN_GLOBAL unsigned short* out, KILN_GLOBAL const unsigned short* x, kiln_i64 lines, kiln_i64 len, int reverse) {
  for (kiln_i64 i = (kiln_i64)blockIdx.x * blockDim.x + threadIdx.x; i < lines;
       i += (kiln_i64)gridDim.x * blockDim.x) {
    double acc = 0;
    for (kiln_i64 j = 0; j < len; ++j) {
      const kiln_i64 at = i * len + (reverse ? len - 1 - j : j);
      acc = acc + (double)(float)(kiln_f16_to_f32(x[at]));
      out[at] = kiln_f32_to_f16((float)acc);
    }
  }
}
