// A seeded generator of random tensor programs for the compiled-vs-eager
// fuzz suite (random_graphs_test.cpp). A Program is a straight-line sequence
// of kiln calls over 1-4 inputs: elementwise ops with broadcasting, where,
// casts, reductions, movement, matmul, softmax / log_softmax / layer_norm, and
// what the passes look for (constants of any dtype, identity chains, repeated
// and commuted steps, signed zeros) plus random draws. Steps are C++ closures,
// so the same program runs eagerly and under kiln::compile. Shapes stay small
// (numel <= 64) and every op is domain-safe (log(|x|+1), sqrt(|x|+0.1),
// division by |y|+0.5), so values stay finite.
#pragma once

#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::testing {

/// splitmix64: deterministic and independent of the library's random numbers.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed * 0x2545F4914F6CDD1Dull + 0x9E3779B97F4A7C15ull) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform integer in [lo, hi].
  int64_t uniform(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
  }
  double real(double lo, double hi) {
    return lo + (hi - lo) * static_cast<double>(next() >> 11) * 0x1p-53;
  }
  bool chance(double p) { return real(0, 1) < p; }
  template <typename T>
  const T& pick(const std::vector<T>& v) {
    return v[static_cast<size_t>(uniform(0, static_cast<int64_t>(v.size()) - 1))];
  }

 private:
  uint64_t s_;
};

/// A straight-line program over tensors. Value ids number the inputs and the
/// step results in creation order (inputs may be created between steps).
struct Program {
  using Fn = std::function<Tensor(const std::vector<Tensor>&)>;
  struct Step {
    std::vector<int> in;  ///< value ids of the arguments
    Fn fn;                ///< the kiln calls of this step
    int out = 0;          ///< value id of the result
    std::string text;     ///< "v4 = add(v2, x1)"
  };
  uint64_t seed = 0;
  bool grad = false;             ///< f64 inputs, checked with gradients too
  bool uses_rng = false;         ///< draws random numbers (seed before each run)
  std::vector<Tensor> inputs;    ///< example inputs (the generator's data)
  std::vector<int> input_value;  ///< value id of each input
  std::vector<Step> steps;
  std::vector<int> outputs;             ///< value ids returned by run()
  std::vector<std::string> meta;        ///< "f32[2, 3]" per value id
  std::vector<DType> dtypes;            ///< dtype per value id
  std::vector<std::string> gen_errors;  ///< steps kiln rejected while generating (a bug)

  /// Applies the program to `in` (shaped like `inputs`).
  std::vector<Tensor> run(const std::vector<Tensor>& in) const {
    std::vector<Tensor> vals(meta.size());
    for (size_t k = 0; k < input_value.size(); ++k)
      vals[static_cast<size_t>(input_value[k])] = in[k];
    std::vector<Tensor> args;
    for (const Step& s : steps) {
      args.clear();
      for (int i : s.in) args.push_back(vals[static_cast<size_t>(i)]);
      vals[static_cast<size_t>(s.out)] = s.fn(args);
    }
    std::vector<Tensor> outs;
    for (int o : outputs) outs.push_back(vals[static_cast<size_t>(o)]);
    return outs;
  }

  /// The least precise floating dtype of any value (f64 if there is none).
  DType lowest_float() const {
    DType low = DType::f64;
    for (DType t : dtypes)
      if (is_floating(t) && dtype_size(t) < dtype_size(low)) low = t;
    return low;
  }

  /// Fresh input data of the same dtypes and shapes (for a second call).
  std::vector<Tensor> other_inputs(uint64_t salt) const;

  /// The program as text: seed, inputs, one line per step with its result's meta.
  std::string print() const {
    std::ostringstream os;
    os << "program seed " << seed << (grad ? " (with gradients)" : "") << "\n";
    for (size_t k = 0; k < input_value.size(); ++k)
      os << "  x" << k << " = input " << meta[static_cast<size_t>(input_value[k])] << "  (v"
         << input_value[k] << ")\n";
    for (const Step& s : steps)
      os << "  " << s.text << "  -> " << meta[static_cast<size_t>(s.out)] << "\n";
    os << "  return";
    for (int o : outputs) os << " v" << o;
    return os.str() + "\n";
  }
};

/// Values in [-2, 2] of the given dtype and shape (integers: -3..3); with
/// `strided`, a transposed view (last two dims) when the rank allows.
inline Tensor random_tensor(Rng& rng, DType dt, const Dims& shape, bool strided = false) {
  Dims s = shape;
  const bool t = strided && s.size() >= 2;
  if (t) std::swap(s[s.size() - 1], s[s.size() - 2]);
  std::vector<double> v(static_cast<size_t>(numel_of(s)));
  for (double& x : v) {
    x = rng.real(-2, 2);
    if (!is_floating(dt)) x = static_cast<double>(rng.uniform(-3, 3));
  }
  Tensor r = from_vector<double>(v).reshape(s).to(dt).contiguous();
  return t ? r.transpose(-1, -2) : r;
}

inline std::vector<Tensor> Program::other_inputs(uint64_t salt) const {
  Rng rng(seed ^ (salt * 0x9E3779B97F4A7C15ull));
  std::vector<Tensor> out;
  for (const Tensor& t : inputs)
    out.push_back(random_tensor(rng, t.dtype(), t.shape(), rng.chance(0.3)));
  return out;
}

/// Generates program number `seed` (grad: f64 inputs, differentiable float ops).
Program generate_program(uint64_t seed, bool grad);

}  // namespace kiln::testing
