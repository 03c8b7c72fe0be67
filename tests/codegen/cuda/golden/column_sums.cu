KILN_KERNEL void kiln_colsum(KILN_GLOBAL const float* p0, KILN_GLOBAL const float* p1, KILN_GLOBAL float* p2, KILN_GLOBAL double* p3, kiln_i64 n, kiln_i64 s0, kiln_i64 s1, kiln_i64 parts) {
  const kiln_i64 inner = s1;
  const kiln_i64 rows = n / inner;
  const kiln_i64 tiles = (inner + blockDim.x - 1) / blockDim.x;
  for (kiln_i64 w = blockIdx.x; w < parts * tiles; w += gridDim.x) {
    const kiln_i64 part = w / tiles;
    const kiln_i64 j = (w % tiles) * blockDim.x + threadIdx.x;
    if (j < inner) {
      double acc3 = 0.0;
      const kiln_i64 end = rows * (part + 1) / parts;
      kiln_i64 row = rows * part / parts;
      for (; row + 7 < end; row += 8) {
        float e0_0 = p0[((row + 0) * inner + j)];
        float e1_0 = p1[((row + 0) * inner + j)];
        float e0_1 = p0[((row + 1) * inner + j)];
        float e1_1 = p1[((row + 1) * inner + j)];
        float e0_2 = p0[((row + 2) * inner + j)];
        float e1_2 = p1[((row + 2) * inner + j)];
        float e0_3 = p0[((row + 3) * inner + j)];
        float e1_3 = p1[((row + 3) * inner + j)];
        float e0_4 = p0[((row + 4) * inner + j)];
        float e1_4 = p1[((row + 4) * inner + j)];
        float e0_5 = p0[((row + 5) * inner + j)];
        float e1_5 = p1[((row + 5) * inner + j)];
        float e0_6 = p0[((row + 6) * inner + j)];
        float e1_6 = p1[((row + 6) * inner + j)];
        float e0_7 = p0[((row + 7) * inner + j)];
        float e1_7 = p1[((row + 7) * inner + j)];
        KILN_ISSUE("+f"(e0_0), "+f"(e1_0), "+f"(e0_1), "+f"(e1_1), "+f"(e0_2), "+f"(e1_2), "+f"(e0_3), "+f"(e1_3), "+f"(e0_4), "+f"(e1_4), "+f"(e0_5), "+f"(e1_5), "+f"(e0_6), "+f"(e1_6), "+f"(e0_7), "+f"(e1_7));
        const float e2_0 = (0x0p+0f);
        const bool e3_0 = (e0_0 > e2_0);
        const float e4_0 = (0x0p+0f);
        const float e5_0 = (e3_0 ? e1_0 : e4_0);
        const double e6_0 = (double)e5_0;
        const float e2_1 = (0x0p+0f);
        const bool e3_1 = (e0_1 > e2_1);
        const float e4_1 = (0x0p+0f);
        const float e5_1 = (e3_1 ? e1_1 : e4_1);
        const double e6_1 = (double)e5_1;
        const float e2_2 = (0x0p+0f);
        const bool e3_2 = (e0_2 > e2_2);
        const float e4_2 = (0x0p+0f);
        const float e5_2 = (e3_2 ? e1_2 : e4_2);
        const double e6_2 = (double)e5_2;
        const float e2_3 = (0x0p+0f);
        const bool e3_3 = (e0_3 > e2_3);
        const float e4_3 = (0x0p+0f);
        const float e5_3 = (e3_3 ? e1_3 : e4_3);
        const double e6_3 = (double)e5_3;
        const float e2_4 = (0x0p+0f);
        const bool e3_4 = (e0_4 > e2_4);
        const float e4_4 = (0x0p+0f);
        const float e5_4 = (e3_4 ? e1_4 : e4_4);
        const double e6_4 = (double)e5_4;
        const float e2_5 = (0x0p+0f);
        const bool e3_5 = (e0_5 > e2_5);
        const float e4_5 = (0x0p+0f);
        const float e5_5 = (e3_5 ? e1_5 : e4_5);
        const double e6_5 = (double)e5_5;
        const float e2_6 = (0x0p+0f);
        const bool e3_6 = (e0_6 > e2_6);
        const float e4_6 = (0x0p+0f);
        const float e5_6 = (e3_6 ? e1_6 : e4_6);
        const double e6_6 = (double)e5_6;
        const float e2_7 = (0x0p+0f);
        const bool e3_7 = (e0_7 > e2_7);
        const float e4_7 = (0x0p+0f);
        const float e5_7 = (e3_7 ? e1_7 : e4_7);
        const double e6_7 = (double)e5_7;
        p2[((row + 0) * inner + j)] = e5_0;
        acc3 = acc3 + e6_0;
        p2[((row + 1) * inner + j)] = e5_1;
        acc3 = acc3 + e6_1;
        p2[((row + 2) * inner + j)] = e5_2;
        acc3 = acc3 + e6_2;
        p2[((row + 3) * inner + j)] = e5_3;
        acc3 = acc3 + e6_3;
        p2[((row + 4) * inner + j)] = e5_4;
        acc3 = acc3 + e6_4;
        p2[((row + 5) * inner + j)] = e5_5;
        acc3 = acc3 + e6_5;
        p2[((row + 6) * inner + j)] = e5_6;
        acc3 = acc3 + e6_6;
        p2[((row + 7) * inner + j)] = e5_7;
        acc3 = acc3 + e6_7;
      }
      for (; row < end; ++row) {
        const kiln_i64 i = row * inner + j;
        float e0 = p0[i];
        float e1 = p1[i];
        const float e2 = (0x0p+0f);
        const bool e3 = (e0 > e2);
        const float e4 = (0x0p+0f);
        const float e5 = (e3 ? e1 : e4);
        const double e6 = (double)e5;
        p2[i] = e5;
        acc3 = acc3 + e6;
      }
      p3[part * inner + j] = acc3;
    }
  }
}
KILN_KERNEL void kiln_row_colsum(KILN_GLOBAL const float* p0, KILN_GLOBAL float* p1, KILN_GLOBAL double* p2, kiln_i64 rows, kiln_i64 s0, kiln_i64 s1, kiln_i64 s2, kiln_i64 parts) {
  KILN_SHUFFLE_SCRATCH;
  __shared__ double kiln_sh0[32];
  __shared__ double kiln_cw2[4096];
  const kiln_i64 cols = s2;
  if (blockDim.y > 1) {
  const kiln_i64 wrow = 4096 / blockDim.y;  // a warp's shared row
  for (kiln_i64 part = blockIdx.x; part < parts; part += gridDim.x) {
  KILN_SHARED_PTR double* q2 = kiln_cw2 + threadIdx.y * wrow;
  for (kiln_i64 j = threadIdx.x; j < cols; j += blockDim.x) q2[j] = 0.0;
  const kiln_i64 r0 = rows * part / parts, r1 = rows * (part + 1) / parts;
  const kiln_i64 steps = ((rows + parts - 1) / parts + blockDim.y - 1) / blockDim.y;
  for (kiln_i64 t = threadIdx.y; t < steps * blockDim.y; t += blockDim.y) {
    const bool kiln_live = r0 + t < r1;
    const kiln_i64 row = kiln_live ? r0 + t : r0;
    const kiln_i64 inner = kiln_live ? cols : 0;
    kiln_i64 rr = row;
    const kiln_i64 c1 = rr % s1; rr /= s1;
    const kiln_i64 c0 = rr;
    const kiln_i64 b0 = (c0) * s1 + c1;
    const kiln_i64 b1 = (c0) * s1 + c1;
    const kiln_i64 b2 = 0;
    float red0;
    {  // phase 0
      double acc0 = (double)0;
      kiln_i64 j = threadIdx.x;
      for (; j + 15 * (kiln_i64)blockDim.x < inner; j += 16 * (kiln_i64)blockDim.x) {
        float e0_0 = p0[b0 * inner + (j + 0 * (kiln_i64)blockDim.x)];
        float e0_1 = p0[b0 * inner + (j + 1 * (kiln_i64)blockDim.x)];
        float e0_2 = p0[b0 * inner + (j + 2 * (kiln_i64)blockDim.x)];
        float e0_3 = p0[b0 * inner + (j + 3 * (kiln_i64)blockDim.x)];
        float e0_4 = p0[b0 * inner + (j + 4 * (kiln_i64)blockDim.x)];
        float e0_5 = p0[b0 * inner + (j + 5 * (kiln_i64)blockDim.x)];
        float e0_6 = p0[b0 * inner + (j + 6 * (kiln_i64)blockDim.x)];
        float e0_7 = p0[b0 * inner + (j + 7 * (kiln_i64)blockDim.x)];
        float e0_8 = p0[b0 * inner + (j + 8 * (kiln_i64)blockDim.x)];
        float e0_9 = p0[b0 * inner + (j + 9 * (kiln_i64)blockDim.x)];
        float e0_10 = p0[b0 * inner + (j + 10 * (kiln_i64)blockDim.x)];
        float e0_11 = p0[b0 * inner + (j + 11 * (kiln_i64)blockDim.x)];
        float e0_12 = p0[b0 * inner + (j + 12 * (kiln_i64)blockDim.x)];
        float e0_13 = p0[b0 * inner + (j + 13 * (kiln_i64)blockDim.x)];
        float e0_14 = p0[b0 * inner + (j + 14 * (kiln_i64)blockDim.x)];
        float e0_15 = p0[b0 * inner + (j + 15 * (kiln_i64)blockDim.x)];
        KILN_ISSUE("+f"(e0_0), "+f"(e0_1), "+f"(e0_2), "+f"(e0_3), "+f"(e0_4), "+f"(e0_5), "+f"(e0_6), "+f"(e0_7), "+f"(e0_8), "+f"(e0_9), "+f"(e0_10), "+f"(e0_11), "+f"(e0_12), "+f"(e0_13), "+f"(e0_14), "+f"(e0_15));
        acc0 = acc0 + (double)e0_0;
        acc0 = acc0 + (double)e0_1;
        acc0 = acc0 + (double)e0_2;
        acc0 = acc0 + (double)e0_3;
        acc0 = acc0 + (double)e0_4;
        acc0 = acc0 + (double)e0_5;
        acc0 = acc0 + (double)e0_6;
        acc0 = acc0 + (double)e0_7;
        acc0 = acc0 + (double)e0_8;
        acc0 = acc0 + (double)e0_9;
        acc0 = acc0 + (double)e0_10;
        acc0 = acc0 + (double)e0_11;
        acc0 = acc0 + (double)e0_12;
        acc0 = acc0 + (double)e0_13;
        acc0 = acc0 + (double)e0_14;
        acc0 = acc0 + (double)e0_15;
      }
      for (; j < inner; j += blockDim.x) {
        float e0 = p0[b0 * inner + j];
        acc0 = acc0 + (double)e0;
      }
      for (int off = 16; off > 0 && blockDim.x >= 32; off >>= 1) {
        const double other = (double)__shfl_xor_sync(0xffffffffu, acc0, off);
        acc0 = acc0 + other;
      }
      {
        const int nw = (int)((blockDim.x + 31) >> 5), base = (int)threadIdx.y * nw;
        if ((threadIdx.x & 31) == 0) kiln_sh0[base + (int)(threadIdx.x >> 5)] = acc0;
        KILN_ROW_SYNC();
        acc0 = kiln_sh0[base];
        for (int w = 1; w < nw; ++w) { acc0 = acc0 + kiln_sh0[base + w]; }
        KILN_ROW_SYNC();
      }
      red0 = (float)acc0;
    }
    kiln_i64 j = threadIdx.x;
    for (; j + 15 * (kiln_i64)blockDim.x < inner; j += 16 * (kiln_i64)blockDim.x) {
      float e0_0 = p0[b0 * inner + (j + 0 * (kiln_i64)blockDim.x)];
      float e0_1 = p0[b0 * inner + (j + 1 * (kiln_i64)blockDim.x)];
      float e0_2 = p0[b0 * inner + (j + 2 * (kiln_i64)blockDim.x)];
      float e0_3 = p0[b0 * inner + (j + 3 * (kiln_i64)blockDim.x)];
      float e0_4 = p0[b0 * inner + (j + 4 * (kiln_i64)blockDim.x)];
      float e0_5 = p0[b0 * inner + (j + 5 * (kiln_i64)blockDim.x)];
      float e0_6 = p0[b0 * inner + (j + 6 * (kiln_i64)blockDim.x)];
      float e0_7 = p0[b0 * inner + (j + 7 * (kiln_i64)blockDim.x)];
      float e0_8 = p0[b0 * inner + (j + 8 * (kiln_i64)blockDim.x)];
      float e0_9 = p0[b0 * inner + (j + 9 * (kiln_i64)blockDim.x)];
      float e0_10 = p0[b0 * inner + (j + 10 * (kiln_i64)blockDim.x)];
      float e0_11 = p0[b0 * inner + (j + 11 * (kiln_i64)blockDim.x)];
      float e0_12 = p0[b0 * inner + (j + 12 * (kiln_i64)blockDim.x)];
      float e0_13 = p0[b0 * inner + (j + 13 * (kiln_i64)blockDim.x)];
      float e0_14 = p0[b0 * inner + (j + 14 * (kiln_i64)blockDim.x)];
      float e0_15 = p0[b0 * inner + (j + 15 * (kiln_i64)blockDim.x)];
      KILN_ISSUE("+f"(e0_0), "+f"(e0_1), "+f"(e0_2), "+f"(e0_3), "+f"(e0_4), "+f"(e0_5), "+f"(e0_6), "+f"(e0_7), "+f"(e0_8), "+f"(e0_9), "+f"(e0_10), "+f"(e0_11), "+f"(e0_12), "+f"(e0_13), "+f"(e0_14), "+f"(e0_15));
      const float e1_0 = red0;
      const float e2_0 = (float)(e0_0 - e1_0);
      const double e3_0 = (double)e2_0;
      const float e1_1 = red0;
      const float e2_1 = (float)(e0_1 - e1_1);
      const double e3_1 = (double)e2_1;
      const float e1_2 = red0;
      const float e2_2 = (float)(e0_2 - e1_2);
      const double e3_2 = (double)e2_2;
      const float e1_3 = red0;
      const float e2_3 = (float)(e0_3 - e1_3);
      const double e3_3 = (double)e2_3;
      const float e1_4 = red0;
      const float e2_4 = (float)(e0_4 - e1_4);
      const double e3_4 = (double)e2_4;
      const float e1_5 = red0;
      const float e2_5 = (float)(e0_5 - e1_5);
      const double e3_5 = (double)e2_5;
      const float e1_6 = red0;
      const float e2_6 = (float)(e0_6 - e1_6);
      const double e3_6 = (double)e2_6;
      const float e1_7 = red0;
      const float e2_7 = (float)(e0_7 - e1_7);
      const double e3_7 = (double)e2_7;
      const float e1_8 = red0;
      const float e2_8 = (float)(e0_8 - e1_8);
      const double e3_8 = (double)e2_8;
      const float e1_9 = red0;
      const float e2_9 = (float)(e0_9 - e1_9);
      const double e3_9 = (double)e2_9;
      const float e1_10 = red0;
      const float e2_10 = (float)(e0_10 - e1_10);
      const double e3_10 = (double)e2_10;
      const float e1_11 = red0;
      const float e2_11 = (float)(e0_11 - e1_11);
      const double e3_11 = (double)e2_11;
      const float e1_12 = red0;
      const float e2_12 = (float)(e0_12 - e1_12);
      const double e3_12 = (double)e2_12;
      const float e1_13 = red0;
      const float e2_13 = (float)(e0_13 - e1_13);
      const double e3_13 = (double)e2_13;
      const float e1_14 = red0;
      const float e2_14 = (float)(e0_14 - e1_14);
      const double e3_14 = (double)e2_14;
      const float e1_15 = red0;
      const float e2_15 = (float)(e0_15 - e1_15);
      const double e3_15 = (double)e2_15;
      p1[b1 * inner + (j + 0 * (kiln_i64)blockDim.x)] = e2_0;
      q2[(j + 0 * (kiln_i64)blockDim.x)] = q2[(j + 0 * (kiln_i64)blockDim.x)] + e3_0;
      p1[b1 * inner + (j + 1 * (kiln_i64)blockDim.x)] = e2_1;
      q2[(j + 1 * (kiln_i64)blockDim.x)] = q2[(j + 1 * (kiln_i64)blockDim.x)] + e3_1;
      p1[b1 * inner + (j + 2 * (kiln_i64)blockDim.x)] = e2_2;
      q2[(j + 2 * (kiln_i64)blockDim.x)] = q2[(j + 2 * (kiln_i64)blockDim.x)] + e3_2;
      p1[b1 * inner + (j + 3 * (kiln_i64)blockDim.x)] = e2_3;
      q2[(j + 3 * (kiln_i64)blockDim.x)] = q2[(j + 3 * (kiln_i64)blockDim.x)] + e3_3;
      p1[b1 * inner + (j + 4 * (kiln_i64)blockDim.x)] = e2_4;
      q2[(j + 4 * (kiln_i64)blockDim.x)] = q2[(j + 4 * (kiln_i64)blockDim.x)] + e3_4;
      p1[b1 * inner + (j + 5 * (kiln_i64)blockDim.x)] = e2_5;
      q2[(j + 5 * (kiln_i64)blockDim.x)] = q2[(j + 5 * (kiln_i64)blockDim.x)] + e3_5;
      p1[b1 * inner + (j + 6 * (kiln_i64)blockDim.x)] = e2_6;
      q2[(j + 6 * (kiln_i64)blockDim.x)] = q2[(j + 6 * (kiln_i64)blockDim.x)] + e3_6;
      p1[b1 * inner + (j + 7 * (kiln_i64)blockDim.x)] = e2_7;
      q2[(j + 7 * (kiln_i64)blockDim.x)] = q2[(j + 7 * (kiln_i64)blockDim.x)] + e3_7;
      p1[b1 * inner + (j + 8 * (kiln_i64)blockDim.x)] = e2_8;
      q2[(j + 8 * (kiln_i64)blockDim.x)] = q2[(j + 8 * (kiln_i64)blockDim.x)] + e3_8;
      p1[b1 * inner + (j + 9 * (kiln_i64)blockDim.x)] = e2_9;
      q2[(j + 9 * (kiln_i64)blockDim.x)] = q2[(j + 9 * (kiln_i64)blockDim.x)] + e3_9;
      p1[b1 * inner + (j + 10 * (kiln_i64)blockDim.x)] = e2_10;
      q2[(j + 10 * (kiln_i64)blockDim.x)] = q2[(j + 10 * (kiln_i64)blockDim.x)] + e3_10;
      p1[b1 * inner + (j + 11 * (kiln_i64)blockDim.x)] = e2_11;
      q2[(j + 11 * (kiln_i64)blockDim.x)] = q2[(j + 11 * (kiln_i64)blockDim.x)] + e3_11;
      p1[b1 * inner + (j + 12 * (kiln_i64)blockDim.x)] = e2_12;
      q2[(j + 12 * (kiln_i64)blockDim.x)] = q2[(j + 12 * (kiln_i64)blockDim.x)] + e3_12;
      p1[b1 * inner + (j + 13 * (kiln_i64)blockDim.x)] = e2_13;
      q2[(j + 13 * (kiln_i64)blockDim.x)] = q2[(j + 13 * (kiln_i64)blockDim.x)] + e3_13;
      p1[b1 * inner + (j + 14 * (kiln_i64)blockDim.x)] = e2_14;
      q2[(j + 14 * (kiln_i64)blockDim.x)] = q2[(j + 14 * (kiln_i64)blockDim.x)] + e3_14;
      p1[b1 * inner + (j + 15 * (kiln_i64)blockDim.x)] = e2_15;
      q2[(j + 15 * (kiln_i64)blockDim.x)] = q2[(j + 15 * (kiln_i64)blockDim.x)] + e3_15;
    }
    for (; j < inner; j += blockDim.x) {
      float e0 = p0[b0 * inner + j];
      const float e1 = red0;
      const float e2 = (float)(e0 - e1);
      const double e3 = (double)e2;
      p1[b1 * inner + j] = e2;
      q2[j] = q2[j] + e3;
    }
  }
  __syncthreads();
  for (kiln_i64 j = threadIdx.y * blockDim.x + threadIdx.x; j < cols;
       j += (kiln_i64)blockDim.x * blockDim.y) {
    double s = kiln_cw2[j];
    for (unsigned w = 1; w < blockDim.y; ++w) s = s + kiln_cw2[w * wrow + j];
    p2[part * cols + j] = s;
  }
  __syncthreads();
  }
  } else {
  const kiln_i64 inner = cols;
  for (kiln_i64 part = blockIdx.x; part < parts; part += gridDim.x) {
  KILN_GLOBAL double* q2 = p2 + part * inner;
  for (kiln_i64 j = threadIdx.x; j < inner; j += blockDim.x) q2[j] = 0.0;
  const kiln_i64 end = rows * (part + 1) / parts;
  for (kiln_i64 row = rows * part / parts; row < end; ++row) {
    const bool kiln_live = true;
    kiln_i64 rr = row;
    const kiln_i64 c1 = rr % s1; rr /= s1;
    const kiln_i64 c0 = rr;
    const kiln_i64 b0 = (c0) * s1 + c1;
    const kiln_i64 b1 = (c0) * s1 + c1;
    const kiln_i64 b2 = 0;
    float red0;
    {  // phase 0
      double acc0 = (double)0;
      kiln_i64 j = threadIdx.x;
      for (; j + 15 * (kiln_i64)blockDim.x < inner; j += 16 * (kiln_i64)blockDim.x) {
        float e0_0 = p0[b0 * inner + (j + 0 * (kiln_i64)blockDim.x)];
        float e0_1 = p0[b0 * inner + (j + 1 * (kiln_i64)blockDim.x)];
        float e0_2 = p0[b0 * inner + (j + 2 * (kiln_i64)blockDim.x)];
        float e0_3 = p0[b0 * inner + (j + 3 * (kiln_i64)blockDim.x)];
        float e0_4 = p0[b0 * inner + (j + 4 * (kiln_i64)blockDim.x)];
        float e0_5 = p0[b0 * inner + (j + 5 * (kiln_i64)blockDim.x)];
        float e0_6 = p0[b0 * inner + (j + 6 * (kiln_i64)blockDim.x)];
        float e0_7 = p0[b0 * inner + (j + 7 * (kiln_i64)blockDim.x)];
        float e0_8 = p0[b0 * inner + (j + 8 * (kiln_i64)blockDim.x)];
        float e0_9 = p0[b0 * inner + (j + 9 * (kiln_i64)blockDim.x)];
        float e0_10 = p0[b0 * inner + (j + 10 * (kiln_i64)blockDim.x)];
        float e0_11 = p0[b0 * inner + (j + 11 * (kiln_i64)blockDim.x)];
        float e0_12 = p0[b0 * inner + (j + 12 * (kiln_i64)blockDim.x)];
        float e0_13 = p0[b0 * inner + (j + 13 * (kiln_i64)blockDim.x)];
        float e0_14 = p0[b0 * inner + (j + 14 * (kiln_i64)blockDim.x)];
        float e0_15 = p0[b0 * inner + (j + 15 * (kiln_i64)blockDim.x)];
        KILN_ISSUE("+f"(e0_0), "+f"(e0_1), "+f"(e0_2), "+f"(e0_3), "+f"(e0_4), "+f"(e0_5), "+f"(e0_6), "+f"(e0_7), "+f"(e0_8), "+f"(e0_9), "+f"(e0_10), "+f"(e0_11), "+f"(e0_12), "+f"(e0_13), "+f"(e0_14), "+f"(e0_15));
        acc0 = acc0 + (double)e0_0;
        acc0 = acc0 + (double)e0_1;
        acc0 = acc0 + (double)e0_2;
        acc0 = acc0 + (double)e0_3;
        acc0 = acc0 + (double)e0_4;
        acc0 = acc0 + (double)e0_5;
        acc0 = acc0 + (double)e0_6;
        acc0 = acc0 + (double)e0_7;
        acc0 = acc0 + (double)e0_8;
        acc0 = acc0 + (double)e0_9;
        acc0 = acc0 + (double)e0_10;
        acc0 = acc0 + (double)e0_11;
        acc0 = acc0 + (double)e0_12;
        acc0 = acc0 + (double)e0_13;
        acc0 = acc0 + (double)e0_14;
        acc0 = acc0 + (double)e0_15;
      }
      for (; j < inner; j += blockDim.x) {
        float e0 = p0[b0 * inner + j];
        acc0 = acc0 + (double)e0;
      }
      for (int off = 16; off > 0 && blockDim.x >= 32; off >>= 1) {
        const double other = (double)__shfl_xor_sync(0xffffffffu, acc0, off);
        acc0 = acc0 + other;
      }
      {
        const int nw = (int)((blockDim.x + 31) >> 5), base = (int)threadIdx.y * nw;
        if ((threadIdx.x & 31) == 0) kiln_sh0[base + (int)(threadIdx.x >> 5)] = acc0;
        KILN_ROW_SYNC();
        acc0 = kiln_sh0[base];
        for (int w = 1; w < nw; ++w) { acc0 = acc0 + kiln_sh0[base + w]; }
        KILN_ROW_SYNC();
      }
      red0 = (float)acc0;
    }
    kiln_i64 j = threadIdx.x;
    for (; j + 15 * (kiln_i64)blockDim.x < inner; j += 16 * (kiln_i64)blockDim.x) {
      float e0_0 = p0[b0 * inner + (j + 0 * (kiln_i64)blockDim.x)];
      float e0_1 = p0[b0 * inner + (j + 1 * (kiln_i64)blockDim.x)];
      float e0_2 = p0[b0 * inner + (j + 2 * (kiln_i64)blockDim.x)];
      float e0_3 = p0[b0 * inner + (j + 3 * (kiln_i64)blockDim.x)];
      float e0_4 = p0[b0 * inner + (j + 4 * (kiln_i64)blockDim.x)];
      float e0_5 = p0[b0 * inner + (j + 5 * (kiln_i64)blockDim.x)];
      float e0_6 = p0[b0 * inner + (j + 6 * (kiln_i64)blockDim.x)];
      float e0_7 = p0[b0 * inner + (j + 7 * (kiln_i64)blockDim.x)];
      float e0_8 = p0[b0 * inner + (j + 8 * (kiln_i64)blockDim.x)];
      float e0_9 = p0[b0 * inner + (j + 9 * (kiln_i64)blockDim.x)];
      float e0_10 = p0[b0 * inner + (j + 10 * (kiln_i64)blockDim.x)];
      float e0_11 = p0[b0 * inner + (j + 11 * (kiln_i64)blockDim.x)];
      float e0_12 = p0[b0 * inner + (j + 12 * (kiln_i64)blockDim.x)];
      float e0_13 = p0[b0 * inner + (j + 13 * (kiln_i64)blockDim.x)];
      float e0_14 = p0[b0 * inner + (j + 14 * (kiln_i64)blockDim.x)];
      float e0_15 = p0[b0 * inner + (j + 15 * (kiln_i64)blockDim.x)];
      KILN_ISSUE("+f"(e0_0), "+f"(e0_1), "+f"(e0_2), "+f"(e0_3), "+f"(e0_4), "+f"(e0_5), "+f"(e0_6), "+f"(e0_7), "+f"(e0_8), "+f"(e0_9), "+f"(e0_10), "+f"(e0_11), "+f"(e0_12), "+f"(e0_13), "+f"(e0_14), "+f"(e0_15));
      const float e1_0 = red0;
      const float e2_0 = (float)(e0_0 - e1_0);
      const double e3_0 = (double)e2_0;
      const float e1_1 = red0;
      const float e2_1 = (float)(e0_1 - e1_1);
      const double e3_1 = (double)e2_1;
      const float e1_2 = red0;
      const float e2_2 = (float)(e0_2 - e1_2);
      const double e3_2 = (double)e2_2;
      const float e1_3 = red0;
      const float e2_3 = (float)(e0_3 - e1_3);
      const double e3_3 = (double)e2_3;
      const float e1_4 = red0;
      const float e2_4 = (float)(e0_4 - e1_4);
      const double e3_4 = (double)e2_4;
      const float e1_5 = red0;
      const float e2_5 = (float)(e0_5 - e1_5);
      const double e3_5 = (double)e2_5;
      const float e1_6 = red0;
      const float e2_6 = (float)(e0_6 - e1_6);
      const double e3_6 = (double)e2_6;
      const float e1_7 = red0;
      const float e2_7 = (float)(e0_7 - e1_7);
      const double e3_7 = (double)e2_7;
      const float e1_8 = red0;
      const float e2_8 = (float)(e0_8 - e1_8);
      const double e3_8 = (double)e2_8;
      const float e1_9 = red0;
      const float e2_9 = (float)(e0_9 - e1_9);
      const double e3_9 = (double)e2_9;
      const float e1_10 = red0;
      const float e2_10 = (float)(e0_10 - e1_10);
      const double e3_10 = (double)e2_10;
      const float e1_11 = red0;
      const float e2_11 = (float)(e0_11 - e1_11);
      const double e3_11 = (double)e2_11;
      const float e1_12 = red0;
      const float e2_12 = (float)(e0_12 - e1_12);
      const double e3_12 = (double)e2_12;
      const float e1_13 = red0;
      const float e2_13 = (float)(e0_13 - e1_13);
      const double e3_13 = (double)e2_13;
      const float e1_14 = red0;
      const float e2_14 = (float)(e0_14 - e1_14);
      const double e3_14 = (double)e2_14;
      const float e1_15 = red0;
      const float e2_15 = (float)(e0_15 - e1_15);
      const double e3_15 = (double)e2_15;
      p1[b1 * inner + (j + 0 * (kiln_i64)blockDim.x)] = e2_0;
      q2[(j + 0 * (kiln_i64)blockDim.x)] = q2[(j + 0 * (kiln_i64)blockDim.x)] + e3_0;
      p1[b1 * inner + (j + 1 * (kiln_i64)blockDim.x)] = e2_1;
      q2[(j + 1 * (kiln_i64)blockDim.x)] = q2[(j + 1 * (kiln_i64)blockDim.x)] + e3_1;
      p1[b1 * inner + (j + 2 * (kiln_i64)blockDim.x)] = e2_2;
      q2[(j + 2 * (kiln_i64)blockDim.x)] = q2[(j + 2 * (kiln_i64)blockDim.x)] + e3_2;
      p1[b1 * inner + (j + 3 * (kiln_i64)blockDim.x)] = e2_3;
      q2[(j + 3 * (kiln_i64)blockDim.x)] = q2[(j + 3 * (kiln_i64)blockDim.x)] + e3_3;
      p1[b1 * inner + (j + 4 * (kiln_i64)blockDim.x)] = e2_4;
      q2[(j + 4 * (kiln_i64)blockDim.x)] = q2[(j + 4 * (kiln_i64)blockDim.x)] + e3_4;
      p1[b1 * inner + (j + 5 * (kiln_i64)blockDim.x)] = e2_5;
      q2[(j + 5 * (kiln_i64)blockDim.x)] = q2[(j + 5 * (kiln_i64)blockDim.x)] + e3_5;
      p1[b1 * inner + (j + 6 * (kiln_i64)blockDim.x)] = e2_6;
      q2[(j + 6 * (kiln_i64)blockDim.x)] = q2[(j + 6 * (kiln_i64)blockDim.x)] + e3_6;
      p1[b1 * inner + (j + 7 * (kiln_i64)blockDim.x)] = e2_7;
      q2[(j + 7 * (kiln_i64)blockDim.x)] = q2[(j + 7 * (kiln_i64)blockDim.x)] + e3_7;
      p1[b1 * inner + (j + 8 * (kiln_i64)blockDim.x)] = e2_8;
      q2[(j + 8 * (kiln_i64)blockDim.x)] = q2[(j + 8 * (kiln_i64)blockDim.x)] + e3_8;
      p1[b1 * inner + (j + 9 * (kiln_i64)blockDim.x)] = e2_9;
      q2[(j + 9 * (kiln_i64)blockDim.x)] = q2[(j + 9 * (kiln_i64)blockDim.x)] + e3_9;
      p1[b1 * inner + (j + 10 * (kiln_i64)blockDim.x)] = e2_10;
      q2[(j + 10 * (kiln_i64)blockDim.x)] = q2[(j + 10 * (kiln_i64)blockDim.x)] + e3_10;
      p1[b1 * inner + (j + 11 * (kiln_i64)blockDim.x)] = e2_11;
      q2[(j + 11 * (kiln_i64)blockDim.x)] = q2[(j + 11 * (kiln_i64)blockDim.x)] + e3_11;
      p1[b1 * inner + (j + 12 * (kiln_i64)blockDim.x)] = e2_12;
      q2[(j + 12 * (kiln_i64)blockDim.x)] = q2[(j + 12 * (kiln_i64)blockDim.x)] + e3_12;
      p1[b1 * inner + (j + 13 * (kiln_i64)blockDim.x)] = e2_13;
      q2[(j + 13 * (kiln_i64)blockDim.x)] = q2[(j + 13 * (kiln_i64)blockDim.x)] + e3_13;
      p1[b1 * inner + (j + 14 * (kiln_i64)blockDim.x)] = e2_14;
      q2[(j + 14 * (kiln_i64)blockDim.x)] = q2[(j + 14 * (kiln_i64)blockDim.x)] + e3_14;
      p1[b1 * inner + (j + 15 * (kiln_i64)blockDim.x)] = e2_15;
      q2[(j + 15 * (kiln_i64)blockDim.x)] = q2[(j + 15 * (kiln_i64)blockDim.x)] + e3_15;
    }
    for (; j < inner; j += blockDim.x) {
      float e0 = p0[b0 * inner + j];
      const float e1 = red0;
      const float e2 = (float)(e0 - e1);
      const double e3 = (double)e2;
      p1[b1 * inner + j] = e2;
      q2[j] = q2[j] + e3;
    }
  }
  }
  }
}
KILN_KERNEL void kiln_eager_colsum(KILN_GLOBAL float* partial, KILN_GLOBAL const unsigned short* x, kiln_i64 rows, kiln_i64 cols, kiln_i64 parts) {
  const kiln_i64 tiles = (cols + blockDim.x - 1) / blockDim.x;
  for (kiln_i64 w = blockIdx.x; w < parts * tiles; w += gridDim.x) {
    const kiln_i64 part = w / tiles;
    const kiln_i64 j = (w % tiles) * blockDim.x + threadIdx.x;
    if (j < cols) {
      float acc = (float)0;
      const kiln_i64 end = rows * (part + 1) / parts;
      kiln_i64 r = rows * part / parts;
      for (; r + 8 <= end; r += 8) {
        const float v0 = (float)kiln_f16_to_f32(x[(r + 0) * cols + j]);
        const float v1 = (float)kiln_f16_to_f32(x[(r + 1) * cols + j]);
        const float v2 = (float)kiln_f16_to_f32(x[(r + 2) * cols + j]);
        const float v3 = (float)kiln_f16_to_f32(x[(r + 3) * cols + j]);
        const float v4 = (float)kiln_f16_to_f32(x[(r + 4) * cols + j]);
        const float v5 = (float)kiln_f16_to_f32(x[(r + 5) * cols + j]);
        const float v6 = (float)kiln_f16_to_f32(x[(r + 6) * cols + j]);
        const float v7 = (float)kiln_f16_to_f32(x[(r + 7) * cols + j]);
        acc = acc + v0;
        acc = acc + v1;
        acc = acc + v2;
        acc = acc + v3;
        acc = acc + v4;
        acc = acc + v5;
        acc = acc + v6;
        acc = acc + v7;
      }
      for (; r < end; ++r) acc = acc + (float)kiln_f16_to_f32(x[r * cols + j]);
      partial[part * cols + j] = (float)acc;
    }
  }
}
KILN_KERNEL void kiln_colsum_combine(KILN_GLOBAL float* out, KILN_GLOBAL const double* partial, kiln_i64 cols, kiln_i64 parts) {
  __shared__ double kiln_slice[1024];
  const kiln_i64 S = parts < 32 ? (parts > 0 ? parts : 1) : 32;
  const kiln_i64 c = blockDim.x / S;
  const kiln_i64 lane = threadIdx.x % c, slice = threadIdx.x / c;
  const kiln_i64 lo = slice < S ? parts * slice / S : 0, hi = slice < S ? parts * (slice + 1) / S : 0;
  for (kiln_i64 base = (kiln_i64)blockIdx.x * c; base < cols; base += (kiln_i64)gridDim.x * c) {
    const kiln_i64 j = base + lane;
    double s = (double)0;
    if (j < cols) {
      kiln_i64 p = lo;
      for (; p + 8 <= hi; p += 8) {
        const double v0 = (double)partial[(p + 0) * cols + j];
        const double v1 = (double)partial[(p + 1) * cols + j];
        const double v2 = (double)partial[(p + 2) * cols + j];
        const double v3 = (double)partial[(p + 3) * cols + j];
        const double v4 = (double)partial[(p + 4) * cols + j];
        const double v5 = (double)partial[(p + 5) * cols + j];
        const double v6 = (double)partial[(p + 6) * cols + j];
        const double v7 = (double)partial[(p + 7) * cols + j];
        s = s + v0;
        s = s + v1;
        s = s + v2;
        s = s + v3;
        s = s + v4;
        s = s + v5;
        s = s + v6;
        s = s + v7;
      }
      for (; p < hi; ++p) s = s + (double)partial[p * cols + j];
    }
    kiln_slice[threadIdx.x] = s;
    __syncthreads();
    if (slice == 0 && j < cols) {
      double t = kiln_slice[lane];
      for (kiln_i64 q = 1; q < S; ++q) t = t + kiln_slice[q * c + lane];
      out[j] = (float)t;
    }
    __syncthreads();
  }
}
