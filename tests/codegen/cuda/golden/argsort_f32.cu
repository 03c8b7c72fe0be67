KILN_FN int kiln_argsort_f32_before(float va, kiln_i64 ia, float vb, kiln_i64 ib, kiln_i64 len, int desc) {
  if (ia >= len || ib >= len) return ia < ib;
  const int na = va != va, nb = vb != vb;
  if (na || nb) return na && nb ? ia < ib : (desc ? na : nb);
  if (va != vb) return desc ? va > vb : va < vb;
  return ia < ib;
}
KILN_KERNEL void kiln_argsort_f32(KILN_GLOBAL kiln_i64* out, KILN_GLOBAL const float* x,
    KILN_GLOBAL float* gv, KILN_GLOBAL kiln_i64* gi, kiln_i64 lines, kiln_i64 len, kiln_i64 k,
    kiln_i64 width, kiln_i64 stage, int desc) {
  __shared__ float sv[2048];
  __shared__ kiln_i64 si[2048];
  const kiln_i64 tile = width < 2048 ? width : 2048, per = width / tile;
  const int last = stage == width || tile == width;  /* the line ends sorted */
  for (kiln_i64 b = blockIdx.x; b < lines * per; b += gridDim.x) {
    const kiln_i64 line = b / per, start = (b % per) * tile;
    for (kiln_i64 e = threadIdx.x; e < tile; e += blockDim.x) {
      const kiln_i64 pos = start + e;
      if (stage == 0) {
        si[e] = pos;
        sv[e] = pos < len ? x[line * len + pos] : (float)0;
      } else {
        si[e] = gi[line * width + pos];
        sv[e] = gv[line * width + pos];
      }
    }
    __syncthreads();
    for (kiln_i64 kk = stage == 0 ? 2 : stage; kk <= (stage == 0 ? tile : stage); kk *= 2)
      for (int j = (int)(kk < tile ? kk : tile) / 2; j > 0; j /= 2) {
        for (int q = (int)threadIdx.x; q < (int)tile / 2; q += (int)blockDim.x) {
          /* pair q's lower element: q with a 0 bit inserted at j (a power of 2) */
          const int i = ((q & ~(j - 1)) << 1) | (q & (j - 1)), l = i + j;
          const float va = sv[i], vb = sv[l];
          const kiln_i64 ia = si[i], ib = si[l];
          if ((((start + i) & kk) == 0) ? kiln_argsort_f32_before(vb, ib, va, ia, len, desc)
                                       : kiln_argsort_f32_before(va, ia, vb, ib, len, desc)) {
            sv[i] = vb;
            sv[l] = va;
            si[i] = ib;
            si[l] = ia;
          }
        }
        __syncthreads();
      }
    for (kiln_i64 e = threadIdx.x; e < tile; e += blockDim.x) {
      const kiln_i64 pos = start + e;
      if (!last) {
        gv[line * width + pos] = sv[e];
        gi[line * width + pos] = si[e];
      } else if (pos < k) {
        out[line * k + pos] = si[e];
      }
    }
    __syncthreads();
  }
}
