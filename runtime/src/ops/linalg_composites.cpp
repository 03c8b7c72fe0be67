// Linear-algebra composites: bmm/baddbmm/outer, a documented subset of einsum
// (lowered to sums, permutes, reshapes and batched matmuls), and the norms
// (vector_norm/norm, normalize, cosine_similarity). Written with primitives,
// so autograd and tracing come for free.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>

#include "ops/helpers.h"

namespace kiln {

Tensor bmm(const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.dim() == 3 && b.dim() == 3, "[bmm] expects two 3-D tensors, got shapes ", a.shape(),
             " and ", b.shape());
  KILN_CHECK(a.size(0) == b.size(0) && a.size(2) == b.size(1), "[bmm] shapes ", a.shape(), " and ",
             b.shape(),
             " cannot be multiplied (batch sizes must be equal and a's last "
             "size must equal b's middle size)");
  return matmul(a, b);
}

Tensor baddbmm(const Tensor& input, const Tensor& batch1, const Tensor& batch2, const Scalar& beta,
               const Scalar& alpha) {
  Tensor r = bmm(batch1, batch2);
  KILN_CHECK(broadcast_shapes(input.shape(), r.shape(), "baddbmm") == r.shape(),
             "[baddbmm] input of shape ", input.shape(),
             " does not broadcast to the product's "
             "shape ",
             r.shape());
  if (alpha.to_double() != 1.0) r = r * alpha;
  if (beta.to_double() == 0.0) return r;  // input ignored, NaNs too (PyTorch)
  return r + (beta.to_double() == 1.0 ? input : input * beta);
}

Tensor outer(const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.dim() == 1 && b.dim() == 1, "[outer] expects two 1-D tensors, got shapes ",
             a.shape(), " and ", b.shape());
  return reshape(a, {-1, 1}) * reshape(b, {1, -1});
}

// ---------------- einsum ----------------
namespace {

struct Term {
  std::string labels;
  Tensor t;
};

// Sums out the labels of `x` that are not in `keep`.
Term sum_unkept(Term x, const std::string& keep) {
  Dims dims;
  std::string rest;
  for (size_t i = 0; i < x.labels.size(); ++i) {
    if (keep.find(x.labels[i]) == std::string::npos)
      dims.push_back(static_cast<int64_t>(i));
    else
      rest += x.labels[i];
  }
  if (dims.empty()) return x;
  return {rest, sum(x.t, dims, false)};
}

// x permuted to the label order `order` (a permutation of x's labels).
Tensor arrange(const Term& x, const std::string& order) {
  Dims perm;
  for (char c : order) perm.push_back(static_cast<int64_t>(x.labels.find(c)));
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i)
    identity = identity && perm[i] == static_cast<int64_t>(i);
  return identity ? x.t : permute(x.t, perm);
}

int64_t size_of(const Term& x, char c) {
  return x.t.size(static_cast<int64_t>(x.labels.find(c)));
}

// a * b summed over the shared labels not in `keep`, as one batched matmul:
// [batch, a-only, shared] x [batch, shared, b-only].
Term contract(Term a, Term b, const std::string& keep) {
  std::string both_keep = keep + b.labels, a_keep = keep + a.labels;
  a = sum_unkept(std::move(a), both_keep);
  b = sum_unkept(std::move(b), a_keep);
  std::string batch, shared, a_only, b_only;
  for (char c : a.labels) {
    if (b.labels.find(c) == std::string::npos)
      a_only += c;
    else
      (keep.find(c) != std::string::npos ? batch : shared) += c;
  }
  for (char c : b.labels)
    if (a.labels.find(c) == std::string::npos) b_only += c;
  auto prod = [](const Term& x, const std::string& ls) {
    int64_t p = 1;
    for (char c : ls) p *= size_of(x, c);
    return p;
  };
  const int64_t B = prod(a, batch), M = prod(a, a_only), K = prod(a, shared), N = prod(b, b_only);
  Tensor am = reshape(arrange(a, batch + a_only + shared), {B, M, K});
  Tensor bm = reshape(arrange(b, batch + shared + b_only), {B, K, N});
  Dims shape;
  for (char c : batch) shape.push_back(size_of(a, c));
  for (char c : a_only) shape.push_back(size_of(a, c));
  for (char c : b_only) shape.push_back(size_of(b, c));
  return {batch + a_only + b_only, reshape(matmul(am, bm), shape)};
}

[[noreturn]] void einsum_error(const std::string& eq, const std::string& why) {
  throw Error(str("[einsum] '", eq, "': ", why,
                  " (supported: letter labels, each at most once "
                  "per operand and in the output, no '...')"));
}

// Parses "ab,bc->ac" into the operand terms and the output labels.
std::vector<std::string> parse_einsum(const std::string& equation, std::string& output,
                                      bool& has_arrow) {
  std::string eq;
  for (char c : equation)
    if (c != ' ') eq += c;
  const size_t arrow = eq.find("->");
  has_arrow = arrow != std::string::npos;
  const std::string lhs = has_arrow ? eq.substr(0, arrow) : eq;
  output = has_arrow ? eq.substr(arrow + 2) : std::string();
  std::vector<std::string> terms(1);
  for (char c : lhs) {
    if (c == ',') {
      terms.emplace_back();
      continue;
    }
    if (!std::isalpha(static_cast<unsigned char>(c)))
      einsum_error(equation, str("unsupported character '", c, "'"));
    if (terms.back().find(c) != std::string::npos)
      einsum_error(equation, str("label '", c,
                                 "' repeats in one operand (traces and diagonals "
                                 "are not supported)"));
    terms.back() += c;
  }
  for (char c : output) {
    if (!std::isalpha(static_cast<unsigned char>(c)))
      einsum_error(equation, str("unsupported character '", c, "' in the output"));
    if (std::count(output.begin(), output.end(), c) > 1)
      einsum_error(equation, str("label '", c, "' repeats in the output"));
  }
  return terms;
}

}  // namespace

Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands) {
  std::string output;
  bool has_arrow = false;
  const std::vector<std::string> labels = parse_einsum(equation, output, has_arrow);
  if (labels.size() != operands.size())
    einsum_error(equation, str(labels.size(), " operand terms but ", operands.size(), " tensors"));
  std::map<char, int64_t> count, size;
  std::vector<Term> terms;
  for (size_t i = 0; i < labels.size(); ++i) {
    const Tensor& t = operands[i];
    if (static_cast<int64_t>(labels[i].size()) != t.dim())
      einsum_error(equation, str("operand ", i, " has ", t.dim(), " dims (shape ", t.shape(),
                                 ") but its term '", labels[i], "' has ", labels[i].size()));
    for (size_t k = 0; k < labels[i].size(); ++k) {
      const char c = labels[i][k];
      ++count[c];
      const int64_t s = t.size(static_cast<int64_t>(k));
      auto [it, fresh] = size.emplace(c, s);
      if (!fresh && it->second != s)
        einsum_error(equation, str("label '", c, "' has sizes ", it->second, " and ", s));
    }
    terms.push_back({labels[i], t});
  }
  if (!has_arrow)  // implicit output: the labels seen once, in alphabetical order
    for (const auto& [c, n] : count)
      if (n == 1) output += c;
  for (char c : output)
    if (!count.count(c)) einsum_error(equation, str("output label '", c, "' is in no operand"));
  if (terms.empty()) einsum_error(equation, "no operands");
  // Left to right; each step keeps the labels the output or a later operand needs.
  Term cur = terms[0];
  for (size_t i = 1; i < terms.size(); ++i) {
    std::string keep = output;
    for (size_t j = i + 1; j < terms.size(); ++j) keep += terms[j].labels;
    cur = contract(std::move(cur), terms[i], keep);
  }
  cur = sum_unkept(std::move(cur), output);
  return arrange(cur, output);
}

// ---------------- norms ----------------
namespace {
// f(s) where s != 0, else 0 with a zero gradient (the root's slope at 0 is
// infinite; PyTorch's norm gradient at a zero norm is 0).
template <typename F>
Tensor root_or_zero(const Tensor& s, F f) {
  Tensor z = eq(s, 0.0);
  return where(z, 0.0, f(where(z, 1.0, s)));
}
}  // namespace

Tensor vector_norm(const Tensor& x, double ord, const Dims& dims, bool keepdim) {
  KILN_CHECK(is_floating(x.dtype()), "[vector_norm] expects a floating tensor, got dtype ",
             x.dtype());
  const double inf = std::numeric_limits<double>::infinity();
  if (ord == inf) return amax(abs(x), dims, keepdim);
  if (ord == -inf) return amin(abs(x), dims, keepdim);
  if (ord == 0) return cast(sum(ne(x, 0.0), dims, keepdim), x.dtype());
  if (ord == 1) return sum(abs(x), dims, keepdim);
  if (ord == 2)
    return root_or_zero(sum(x * x, dims, keepdim), [](const Tensor& s) { return sqrt(s); });
  return root_or_zero(sum(pow(abs(x), ord), dims, keepdim),
                      [ord](const Tensor& s) { return pow(s, 1.0 / ord); });
}

Tensor norm(const Tensor& x, double p, const Dims& dims, bool keepdim) {
  return vector_norm(x, p, dims, keepdim);
}

Tensor normalize(const Tensor& x, double p, int64_t dim, double eps) {
  return x / clamp_min(vector_norm(x, p, {dim}, true), eps);
}

// Each operand is divided by its (clamped) norm first, as PyTorch does, so
// large values do not overflow the product of norms.
Tensor cosine_similarity(const Tensor& a, const Tensor& b, int64_t dim, double eps) {
  const Dims shape = broadcast_shapes(a.shape(), b.shape(), "cosine_similarity");
  Tensor x = expand(a, shape), y = expand(b, shape);
  Tensor xn = x / clamp_min(vector_norm(x, 2.0, {dim}, true), eps);
  Tensor yn = y / clamp_min(vector_norm(y, 2.0, {dim}, true), eps);
  return sum(xn * yn, {dim}, false);
}

}  // namespace kiln
