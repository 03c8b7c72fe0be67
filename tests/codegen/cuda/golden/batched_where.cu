#ifndef KILN_BATCH_TABLE
#define KILN_BATCH_TABLE
typedef struct KilnBatch { kiln_i64 w[511]; } KilnBatch;
#ifdef __CUDACC__
#define KILN_BATCH_PARAM const __grid_constant__ KilnBatch
#else
#define KILN_BATCH_PARAM const KilnBatch
#endif
#endif
KILN_KERNEL void kiln_batched(KILN_BATCH_PARAM t) {
  // This block's instance j: the last whose first block is at most blockIdx.x.
  const kiln_i64 m = t.w[0], b = (kiln_i64)blockIdx.x;
  int j = 0;
  for (int h = 16; h > 0; h >>= 1)
    if (j + h < m && t.w[1 + j + h] <= b) j += h;
  const kiln_i64 kiln_b = b - t.w[1 + j], kiln_nb = t.w[2 + j] - t.w[1 + j];
  const int rec = 34 + j * 6;
  const kiln_i64 n = t.w[rec];
  const kiln_i64 s1 = t.w[rec + 1];
  KILN_GLOBAL const float* p0 = (KILN_GLOBAL const float*)t.w[rec + 2];
  KILN_GLOBAL const float* p1 = (KILN_GLOBAL const float*)t.w[rec + 3];
  KILN_GLOBAL const double* p2 = (KILN_GLOBAL const double*)t.w[rec + 4];
  KILN_GLOBAL unsigned short* p3 = (KILN_GLOBAL unsigned short*)t.w[rec + 5];
  if (n <= 2147483647) {
    const unsigned n32 = (unsigned)n, z1 = (unsigned)s1;
    const unsigned stride = (unsigned)kiln_nb * blockDim.x;
    unsigned i = (unsigned)kiln_b * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n32; i += 4 * stride) {
      unsigned r_0 = i;
      const unsigned c1_0 = r_0 % z1; r_0 /= z1;
      const unsigned c0_0 = r_0;
      const unsigned o1_0 = c1_0;
      const unsigned o2_0 = 0;
      float e0_0 = p0[i];
      float e1_0 = p1[o1_0];
      double e2_0 = p2[o2_0];
      unsigned r_1 = (i + 1 * stride);
      const unsigned c1_1 = r_1 % z1; r_1 /= z1;
      const unsigned c0_1 = r_1;
      const unsigned o1_1 = c1_1;
      const unsigned o2_1 = 0;
      float e0_1 = p0[(i + 1 * stride)];
      float e1_1 = p1[o1_1];
      double e2_1 = p2[o2_1];
      unsigned r_2 = (i + 2 * stride);
      const unsigned c1_2 = r_2 % z1; r_2 /= z1;
      const unsigned c0_2 = r_2;
      const unsigned o1_2 = c1_2;
      const unsigned o2_2 = 0;
      float e0_2 = p0[(i + 2 * stride)];
      float e1_2 = p1[o1_2];
      double e2_2 = p2[o2_2];
      unsigned r_3 = (i + 3 * stride);
      const unsigned c1_3 = r_3 % z1; r_3 /= z1;
      const unsigned c0_3 = r_3;
      const unsigned o1_3 = c1_3;
      const unsigned o2_3 = 0;
      float e0_3 = p0[(i + 3 * stride)];
      float e1_3 = p1[o1_3];
      double e2_3 = p2[o2_3];
      KILN_ISSUE("+f"(e0_0), "+f"(e1_0), "+d"(e2_0), "+f"(e0_1), "+f"(e1_1), "+d"(e2_1), "+f"(e0_2), "+f"(e1_2), "+d"(e2_2), "+f"(e0_3), "+f"(e1_3), "+d"(e2_3));
      const float e3_0 = (float)e2_0;
      const float e4_0 = (float)(e0_0 - e3_0);
      const float e5_0 = (float)(e0_0 * e1_0);
      const bool e6_0 = (e0_0 > e1_0);
      const float e7_0 = (e6_0 ? e5_0 : e4_0);
      const float e8_0 = kiln_rt_f16((float)e7_0);
      const float e3_1 = (float)e2_1;
      const float e4_1 = (float)(e0_1 - e3_1);
      const float e5_1 = (float)(e0_1 * e1_1);
      const bool e6_1 = (e0_1 > e1_1);
      const float e7_1 = (e6_1 ? e5_1 : e4_1);
      const float e8_1 = kiln_rt_f16((float)e7_1);
      const float e3_2 = (float)e2_2;
      const float e4_2 = (float)(e0_2 - e3_2);
      const float e5_2 = (float)(e0_2 * e1_2);
      const bool e6_2 = (e0_2 > e1_2);
      const float e7_2 = (e6_2 ? e5_2 : e4_2);
      const float e8_2 = kiln_rt_f16((float)e7_2);
      const float e3_3 = (float)e2_3;
      const float e4_3 = (float)(e0_3 - e3_3);
      const float e5_3 = (float)(e0_3 * e1_3);
      const bool e6_3 = (e0_3 > e1_3);
      const float e7_3 = (e6_3 ? e5_3 : e4_3);
      const float e8_3 = kiln_rt_f16((float)e7_3);
      p3[i] = kiln_f32_to_f16(e8_0);
      p3[(i + 1 * stride)] = kiln_f32_to_f16(e8_1);
      p3[(i + 2 * stride)] = kiln_f32_to_f16(e8_2);
      p3[(i + 3 * stride)] = kiln_f32_to_f16(e8_3);
    }
    for (; i < n32; i += stride) {
      unsigned r = i;
      const unsigned c1 = r % z1; r /= z1;
      const unsigned c0 = r;
      const unsigned o1 = c1;
      const unsigned o2 = 0;
      float e0 = p0[i];
      float e1 = p1[o1];
      double e2 = p2[o2];
      const float e3 = (float)e2;
      const float e4 = (float)(e0 - e3);
      const float e5 = (float)(e0 * e1);
      const bool e6 = (e0 > e1);
      const float e7 = (e6 ? e5 : e4);
      const float e8 = kiln_rt_f16((float)e7);
      p3[i] = kiln_f32_to_f16(e8);
    }
  } else {
    const kiln_i64 stride = (kiln_i64)kiln_nb * blockDim.x;
    kiln_i64 i = (kiln_i64)kiln_b * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
      kiln_i64 r_0 = i;
      const kiln_i64 c1_0 = r_0 % s1; r_0 /= s1;
      const kiln_i64 c0_0 = r_0;
      const kiln_i64 o1_0 = c1_0;
      const kiln_i64 o2_0 = 0;
      float e0_0 = p0[i];
      float e1_0 = p1[o1_0];
      double e2_0 = p2[o2_0];
      kiln_i64 r_1 = (i + 1 * stride);
      const kiln_i64 c1_1 = r_1 % s1; r_1 /= s1;
      const kiln_i64 c0_1 = r_1;
      const kiln_i64 o1_1 = c1_1;
      const kiln_i64 o2_1 = 0;
      float e0_1 = p0[(i + 1 * stride)];
      float e1_1 = p1[o1_1];
      double e2_1 = p2[o2_1];
      kiln_i64 r_2 = (i + 2 * stride);
      const kiln_i64 c1_2 = r_2 % s1; r_2 /= s1;
      const kiln_i64 c0_2 = r_2;
      const kiln_i64 o1_2 = c1_2;
      const kiln_i64 o2_2 = 0;
      float e0_2 = p0[(i + 2 * stride)];
      float e1_2 = p1[o1_2];
      double e2_2 = p2[o2_2];
      kiln_i64 r_3 = (i + 3 * stride);
      const kiln_i64 c1_3 = r_3 % s1; r_3 /= s1;
      const kiln_i64 c0_3 = r_3;
      const kiln_i64 o1_3 = c1_3;
      const kiln_i64 o2_3 = 0;
      float e0_3 = p0[(i + 3 * stride)];
      float e1_3 = p1[o1_3];
      double e2_3 = p2[o2_3];
      KILN_ISSUE("+f"(e0_0), "+f"(e1_0), "+d"(e2_0), "+f"(e0_1), "+f"(e1_1), "+d"(e2_1), "+f"(e0_2), "+f"(e1_2), "+d"(e2_2), "+f"(e0_3), "+f"(e1_3), "+d"(e2_3));
      const float e3_0 = (float)e2_0;
      const float e4_0 = (float)(e0_0 - e3_0);
      const float e5_0 = (float)(e0_0 * e1_0);
      const bool e6_0 = (e0_0 > e1_0);
      const float e7_0 = (e6_0 ? e5_0 : e4_0);
      const float e8_0 = kiln_rt_f16((float)e7_0);
      const float e3_1 = (float)e2_1;
      const float e4_1 = (float)(e0_1 - e3_1);
      const float e5_1 = (float)(e0_1 * e1_1);
      const bool e6_1 = (e0_1 > e1_1);
      const float e7_1 = (e6_1 ? e5_1 : e4_1);
      const float e8_1 = kiln_rt_f16((float)e7_1);
      const float e3_2 = (float)e2_2;
      const float e4_2 = (float)(e0_2 - e3_2);
      const float e5_2 = (float)(e0_2 * e1_2);
      const bool e6_2 = (e0_2 > e1_2);
      const float e7_2 = (e6_2 ? e5_2 : e4_2);
      const float e8_2 = kiln_rt_f16((float)e7_2);
      const float e3_3 = (float)e2_3;
      const float e4_3 = (float)(e0_3 - e3_3);
      const float e5_3 = (float)(e0_3 * e1_3);
      const bool e6_3 = (e0_3 > e1_3);
      const float e7_3 = (e6_3 ? e5_3 : e4_3);
      const float e8_3 = kiln_rt_f16((float)e7_3);
      p3[i] = kiln_f32_to_f16(e8_0);
      p3[(i + 1 * stride)] = kiln_f32_to_f16(e8_1);
      p3[(i + 2 * stride)] = kiln_f32_to_f16(e8_2);
      p3[(i + 3 * stride)] = kiln_f32_to_f16(e8_3);
    }
    for (; i < n; i += stride) {
      kiln_i64 r = i;
      const kiln_i64 c1 = r % s1; r /= s1;
      const kiln_i64 c0 = r;
      const kiln_i64 o1 = c1;
      const kiln_i64 o2 = 0;
      float e0 = p0[i];
      float e1 = p1[o1];
      double e2 = p2[o2];
      const float e3 = (float)e2;
      const float e4 = (float)(e0 - e3);
      const float e5 = (float)(e0 * e1);
      const bool e6 = (e0 > e1);
      const float e7 = (e6 ? e5 : e4);
      const float e8 = kiln_rt_f16((float)e7);
      p3[i] = kiln_f32_to_f16(e8);
    }
  }
}
