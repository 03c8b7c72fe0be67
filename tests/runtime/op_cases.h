// The op-table conformance cases: for every primitive, a list of calls
// (inputs + attrs) and a naive reference written with plain loops over
// doubles, independent of kiln's kernels. conformance_test.cpp runs them
// through kiln::dispatch; registry_test.cpp checks every op has some.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::conformance {

/// A reference tensor: dtype, shape and row-major values as doubles.
struct Ref {
  DType dtype = DType::f64;
  Dims shape;
  std::vector<double> v;
  int64_t numel() const { return numel_of(shape); }
  double& at(std::span<const int64_t> idx);
  double at(std::span<const int64_t> idx) const;
};

/// What a case exercises.
enum class Kind { kContiguous, kStrided, kBroadcast, kZeroSize, kOther };
const char* kind_name(Kind k);

/// Computes the expected outputs from the inputs (read back as Refs).
using RefFn = std::function<std::vector<Ref>(const std::vector<Ref>& in)>;

/// One call of an op and its reference.
struct OpCase {
  std::string name;
  Kind kind = Kind::kContiguous;
  std::vector<Tensor> inputs;
  Attrs attrs;
  RefFn ref;
  bool grad = false;       ///< run gradcheck (floating inputs are f64)
  double tol_scale = 1.0;  ///< multiplies the per-dtype value tolerance
};

/// Every conformance case of `op` (freshly built tensors on each call).
std::vector<OpCase> op_cases(OpId op);

// ---------------- helpers shared by the family builders ----------------

/// How test values are drawn (deterministic, from a seed).
struct Values {
  double lo = -2.0, hi = 2.0;
  double min_abs = 0.0;   ///< push values away from 0 (non-smooth points)
  bool integer = false;   ///< round to integers
  bool distinct = false;  ///< all values differ by at least (hi - lo) / (2 n)
};

/// Memory layout of a generated input.
enum class Layout {
  kContiguous,
  kTransposed,  ///< a transposed view (last two dims swapped in memory)
  kSliced,      ///< every other element of a larger buffer along the last dim
  kExpanded,    ///< a stride-0 view (dim 0 expanded from size 1)
  kOffset,      ///< contiguous, but starting at a nonzero storage offset
};

/// n values drawn per `spec` (bool dtypes use 0/1 elsewhere).
std::vector<double> gen_values(int64_t n, const Values& spec, uint64_t seed);
/// Contiguous tensor of dtype dt holding `v` (converted like a C++ cast).
Tensor from_doubles(const std::vector<double>& v, const Dims& shape, DType dt);
/// A generated input of logical `shape` with the given layout.
Tensor make_input(const Dims& shape, DType dt, const Values& spec, uint64_t seed,
                  Layout layout = Layout::kContiguous);
/// Reads any tensor (any layout) as a Ref.
Ref to_ref(const Tensor& t);
/// A Ref of dtype/shape filled with `fill`.
Ref make_ref(DType dt, const Dims& shape, double fill = 0.0);

/// Multi-index of row-major position `lin` in `shape`.
std::vector<int64_t> unravel(int64_t lin, const Dims& shape);
/// Row-major position of `idx` in `shape`.
int64_t ravel(std::span<const int64_t> idx, const Dims& shape);
/// NumPy broadcast of two shapes (reference version).
Dims bshape(const Dims& a, const Dims& b);
/// Element of `r` seen broadcast to an output index of rank >= r's rank.
double bcast_at(const Ref& r, std::span<const int64_t> out_idx);
/// Elementwise map over broadcast inputs.
Ref map_n(const std::vector<Ref>& in, DType out, const std::function<double(const double*)>& f);
/// True for the floating dtypes (reference version).
bool is_float_dt(DType t);
/// Value a C++ conversion to dtype t gives (truncation for integers, != 0 for bool).
double convert(double v, DType t);

/// Shorthand for a case.
OpCase make_case(std::string name, Kind kind, std::vector<Tensor> inputs, Attrs attrs, RefFn ref,
                 bool grad = false);

// Family builders (one file each).
std::vector<OpCase> unary_cases(OpId op);
std::vector<OpCase> binary_cases(OpId op);
std::vector<OpCase> reduce_cases(OpId op);
std::vector<OpCase> linalg_cases(OpId op);
std::vector<OpCase> conv_cases(OpId op);
std::vector<OpCase> movement_cases(OpId op);
std::vector<OpCase> factory_cases(OpId op);
std::vector<OpCase> scan_cases(OpId op);
std::vector<OpCase> sort_cases(OpId op);

/// The documented Philox stream of factory.cpp: word j of `seed`.
uint32_t philox_word(uint64_t seed, uint64_t j);
/// Reference value of element i of rand_uniform / rand_normal.
double random_reference(bool normal, DType dt, uint64_t seed, uint64_t offset, int64_t i);

}  // namespace kiln::conformance
