KILN_KERNEL void kiln_cumprod_i32(KILN_GLOBAL kiln_i64* out, KILN_GLOBAL const int* x, kiln_i64 lines, kiln_i64 len, int reverse) {
  for (kiln_i64 i = (kiln_i64)blockIdx.x * blockDim.x + threadIdx.x; i < lines;
       i += (kiln_i64)gridDim.x * blockDim.x) {
    kiln_u64 acc = 1;
    for (kiln_i64 j = 0; j < len; ++j) {
      const kiln_i64 at = i * len + (reverse ? len - 1 - j : j);
      acc = acc * (kiln_u64)(kiln_i64)(x[at]);
      out[at] = (kiln_i64)acc;
    }
  }
}
