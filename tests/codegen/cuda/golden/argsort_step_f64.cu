KILN_FN int kiln_argsort_f64_step_before(double va, kiln_i64 ia, double vb, kiln_i64 ib, kiln_i64 len, int desc) {
  if (ia >= len || ib >= len) return ia < ib;
  const int na = va != va, nb = vb != vb;
  if (na || nb) return na && nb ? ia < ib : (desc ? na : nb);
  if (va != vb) return desc ? va > vb : va < vb;
  return ia < ib;
}
KILN_KERNEL void kiln_argsort_f64_step(KILN_GLOBAL double* gv, KILN_GLOBAL kiln_i64* gi, kiln_i64 lines, kiln_i64 len,
    kiln_i64 width, kiln_i64 kk, kiln_i64 j, int desc) {
  for (kiln_i64 i = (kiln_i64)blockIdx.x * blockDim.x + threadIdx.x; i < lines * (width / 2);
       i += (kiln_i64)gridDim.x * blockDim.x) {
    const kiln_i64 r = i % (width / 2);
    KILN_GLOBAL double* v = gv + (i / (width / 2)) * width;
    KILN_GLOBAL kiln_i64* ix = gi + (i / (width / 2)) * width;
    const kiln_i64 a = ((r & ~(j - 1)) << 1) | (r & (j - 1)), b = a + j;
    {
      const kiln_i64 i = a, l = b;
      const double va = v[i], vb = v[l];
      const kiln_i64 ia = ix[i], ib = ix[l];
      if ((((i) & kk) == 0) ? kiln_argsort_f64_step_before(vb, ib, va, ia, len, desc)
                                   : kiln_argsort_f64_step_before(va, ia, vb, ib, len, desc)) {
        v[i] = vb;
        v[l] = va;
        ix[i] = ib;
        ix[l] = ia;
      }
    }
  }
}
