// Test helper: random reference values and tensors <-> std::vector, shared by
// the op tests that compare against naive references.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "kiln/functional.h"

namespace kiln::testing {

/// n values uniform in [lo, hi) from a fixed seed.
inline std::vector<double> randv(size_t n, uint32_t seed, double lo = -2.0, double hi = 2.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = d(gen);
  return v;
}
/// An f64 tensor of `shape` holding v.
inline Tensor f64(const std::vector<double>& v, const Dims& shape) {
  return from_vector<double>(v, shape);
}
/// t's elements as doubles / as int64s.
inline std::vector<double> vals(const Tensor& t) {
  return t.to_vector<double>();
}
inline std::vector<int64_t> ints(const Tensor& t) {
  return t.to_vector<int64_t>();
}

}  // namespace kiln::testing
