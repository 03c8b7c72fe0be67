KILN_KERNEL void kiln_race_keys_bf16(KILN_GLOBAL double* key, KILN_GLOBAL const double* u, KILN_GLOBAL const unsigned short* p, kiln_i64 n) {
  for (kiln_i64 i = (kiln_i64)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (kiln_i64)gridDim.x * blockDim.x) {
    const double w = (double)(kiln_bf16_to_f32(p[i]));
    key[i] = w > 0 ? kiln_race_log(1.0 - u[i]) / w : __longlong_as_double((kiln_i64)0xfff0000000000000);
  }
}
