KILN_KERNEL void kiln_argsort_f32(KILN_GLOBAL kiln_i64* out, KILN_GLOBAL const float* x, kiln_i64 n, kiln_i64 len, kiln_i64 k, int desc) {
  for (kiln_i64 i = (kiln_i64)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (kiln_i64)gridDim.x * blockDim.x) {
    const kiln_i64 line = i / len, e = i % len, base = line * len;
    const float va = x[base + e];
    kiln_i64 place = 0;
    for (kiln_i64 j = 0; j < len && place < k; ++j) {
      if (j == e) continue;
      const float vb = x[base + j];
      int before;
      const int na = va != va, nb = vb != vb;
      if (na || nb) before = na && nb ? j < e : (desc ? nb : na);
      else if (va != vb) before = desc ? vb > va : vb < va;
      else before = j < e;
      place += before;
    }
    if (place < k) out[line * k + place] = e;
  }
}
