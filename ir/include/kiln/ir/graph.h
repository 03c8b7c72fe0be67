// kiln IR: an SSA graph of primitive calls, built from the runtime's op table.
//
// Contract (what a Graph means; every pass and backend relies on it):
// - Values are immutable tensors with value semantics. A Value has a dtype and
//   a shape; nothing in the IR has strides, storage or aliasing. Movement ops
//   (reshape, permute, expand, slice) produce new values; whether a backend
//   realises them as views is its own business. Nothing is mutated in place.
// - The node list is in a valid evaluation order (every input is defined
//   earlier: SSA dominance on a straight-line program). There is no control flow.
// - Graph inputs are the traced function's tensor arguments, the tensors it
//   captured from the enclosing scope (module parameters, buffers, optimizer
//   state, .grad) read by reference at each call, and host scalars (learning
//   rates, step counts) computed on the host at each call — in the order the
//   trace met them. The graph does not know which is which; the input names say
//   it ("arg0", "cap3", "host1", "gout0") and the compile driver binds them.
// - Mutation of captured state is expressed as extra graph outputs: the final
//   value of a mutated capture is an output whose name says where it is written
//   back after the run. The IR itself stays pure.
// - Broadcasting is explicit in the op's rule (NumPy rules; binary ops take two
//   operands of broadcast-compatible shapes); dtype promotion already happened
//   (mixed-dtype inputs are only what the op's infer rule accepts).
// - Floating point: IEEE semantics, NaN propagates like the eager kernels; no
//   pass may assume finite values (x*0 is not folded to 0, x-x only for ints).
// - Random ops (kRandom) carry a `seed` and an `offset` attribute. Within a
//   graph the offset is relative to the base drawn from the default generator
//   at each call; `rng_advance` is how far one call moves that generator.
//   Random nodes are never merged, folded or duplicated.
// - Dimensions are static integers or integer polynomials in symbols (s0*s1,
//   2*s0+1), one symbol per dim marked dynamic. Symbols are bound from the
//   first graph input dim that is exactly the symbol. Attributes may hold
//   symbolic entries (`sym_attrs`).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kiln/attrs.h"
#include "kiln/op_table.h"
#include "kiln/tensor.h"

namespace kiln::ir {

/// One non-constant term of a SymInt: coef * s0^e0 * s1^e1 * ..., the exponent
/// of symbol k in bits [4k, 4k + 4) of `mono` (so 16 symbols, exponents <= 15).
struct SymTerm {
  int64_t coef = 0;
  uint64_t mono = 0;
  bool operator==(const SymTerm&) const = default;
};

/// A size: an integer polynomial in the symbols, e.g. 7, s0, 2*s0+1, s0*s1,
/// 3*s0^2*s1-4. Canonical (so == is equality of polynomials): `terms` holds the
/// non-constant terms with nonzero coefficients, distinct monomials, higher
/// degree first; `b` is the constant term. A static size has no terms and
/// allocates nothing. Arithmetic is overflow-checked (kiln::Error).
struct SymInt {
  static constexpr int kMaxSyms = 16;  ///< symbols s0..s15
  static constexpr int kMaxExponent = 15;
  int64_t b = 0;               ///< the constant term (a static size's value)
  std::vector<SymTerm> terms;  ///< the other terms (empty for a static size)

  SymInt() = default;
  /// A static size.
  SymInt(int64_t v) : b(v) {}  // NOLINT(google-explicit-constructor)
  /// a*s_sym + b.
  static SymInt symbolic(int32_t sym, int64_t a = 1, int64_t b = 0);
  /// coef * the monomial `mono` (packed exponents, see SymTerm).
  static SymInt monomial(int64_t coef, uint64_t mono);
  bool is_static() const { return terms.empty(); }
  /// k if this is exactly the symbol s_k, else -1.
  int32_t as_symbol() const;
  /// One more than the highest symbol number used (0 for a static size).
  int32_t syms_used() const;
  /// The value for the given symbol values (syms[k] is s_k).
  int64_t eval(std::span<const int64_t> syms) const;
  bool operator==(const SymInt& o) const = default;
  SymInt operator+(const SymInt& o) const;
  SymInt operator-(const SymInt& o) const;
  SymInt operator*(const SymInt& o) const;
};
/// The exponent of symbol k in a packed monomial.
inline int mono_exponent(uint64_t mono, int k) {
  return static_cast<int>((mono >> (4 * k)) & 15);
}
/// The packed monomial s_k^e (e <= 15, k < 16).
inline uint64_t mono_of(int k, int e) {
  return static_cast<uint64_t>(e) << (4 * k);
}
using SymShape = std::vector<SymInt>;

/// "7", "s0", "2*s0+1", "s0-3", "-1*s0+4", "s0*s1^2-s1" (the IR text form).
std::string to_string(const SymInt& s);
/// "[s0, 784]".
std::string to_string(const SymShape& s);
/// A static shape as a SymShape.
SymShape to_sym_shape(const Dims& d);
/// Evaluates a shape for the given symbol values.
Dims eval_shape(const SymShape& s, std::span<const int64_t> syms);
/// True if every dim is static.
bool is_static(const SymShape& s);

/// An attribute entry (or one element of a Dims attribute, or a constant's
/// value, name "value") that depends on a symbol. `reciprocal` means the value
/// is 1/expr (mean's 1/n with a dynamic n, e.g. 1/(s0*s1)).
struct SymAttr {
  const char* name = nullptr;  ///< interned attribute name
  int32_t index = -1;          ///< element of a Dims attr; -1 for a scalar attr
  SymInt expr;
  bool reciprocal = false;
  bool operator==(const SymAttr& o) const;
};

/// Returns a pointer with static lifetime equal to `name` (Attrs keys must be).
const char* intern_attr_name(std::string_view name);

class Node;

/// An SSA value: a graph input or one output of a node.
class Value {
 public:
  DType dtype = DType::f32;
  SymShape shape;
  /// A 0-d tensor made from a C++ number (does not widen dtypes, see dtype.h);
  /// set on constants and host-scalar inputs.
  bool wrapped_number = false;
  Node* producer = nullptr;  ///< null for graph inputs
  int index = 0;             ///< output number of the producer, or input number
  std::string name;          ///< inputs: binding name; otherwise optional
  /// Nodes that read this value, one entry per use (a node using it twice appears twice).
  std::vector<Node*> users;

  int id() const { return id_; }
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }

 private:
  friend class Graph;
  int id_ = 0;
  int output_uses_ = 0;  // graph outputs that are this value (num_uses in O(1))
};

/// What a graph output is to the code that runs the graph, typed (its name is
/// only a label): printed as a keyword after the output's name in IR text.
enum class OutputRole : uint8_t {
  kValue,     ///< a result, new state, a value saved for backward
  kGradient,  ///< the gradient of an argument or captured tensor (written to its .grad)
};

enum class NodeKind : uint8_t {
  kOp,        ///< a primitive from the op table
  kConstant,  ///< a literal tensor (folded values, scalars from C++ code)
};

/// One primitive call (or a constant) with its inputs, outputs and attributes.
class Node {
 public:
  NodeKind kind = NodeKind::kOp;
  OpId op = OpId::full;  ///< meaningful for kOp
  std::vector<Value*> inputs;
  std::vector<Value*> outputs;
  Attrs attrs;
  std::vector<SymAttr> sym_attrs;  ///< symbolic entries of attrs (see SymAttr)
  Tensor constant;                 ///< kConstant: the data (real, contiguous)
  /// Where IR text defined the node (1-based; 0 = not parsed from text): the
  /// verifier's messages point there.
  uint32_t line = 0, column = 0;

  bool is_op(OpId o) const { return kind == NodeKind::kOp && op == o; }
  bool is_constant() const { return kind == NodeKind::kConstant; }
  const OpInfo& info() const { return op_info(op); }
  Value* output(size_t i = 0) const { return outputs.at(i); }
  /// Attributes with symbolic entries evaluated for `syms`.
  Attrs eval_attrs(std::span<const int64_t> syms) const;

 private:
  friend class Graph;
  int id_ = 0;
  // The neighbours in the graph's order (an intrusive list: O(1) insert-before
  // and erase, no list entry per node), the graph's storage that owns the node,
  // and its cached position (valid while the graph's order is fresh).
  Node* prev_ = nullptr;
  Node* next_ = nullptr;
  const void* owner_ = nullptr;
  mutable size_t pos_ = 0;
};

/// Metadata of one new node output.
struct OutSpec {
  DType dtype = DType::f32;
  SymShape shape;
};

/// An SSA graph: inputs, a node list in evaluation order, named outputs.
class Graph {
 public:
  Graph();
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  /// Nodes and values keep their addresses (they live in the graph's storage).
  Graph(Graph&&) noexcept;
  Graph& operator=(Graph&&) noexcept;

  /// A capacity hint: room for this many more nodes and values without
  /// growing the storage (readers that know the sizes call it first).
  void reserve(size_t nodes, size_t values);

  /// Appends a graph input.
  Value* add_input(DType dtype, SymShape shape, std::string name);
  /// Adds a primitive call before `before` (null: at the end). Output dtypes and
  /// shapes are given (the tracer knows them; passes use infer_outputs).
  Node* add_op(OpId op, std::vector<Value*> inputs, Attrs attrs, std::vector<OutSpec> outs,
               Node* before = nullptr);
  /// add_op with the output specs in the caller's storage, their shapes moved
  /// from (a reader or tracer reuses one buffer instead of a vector per node).
  Node* add_op_specs(OpId op, std::vector<Value*> inputs, Attrs attrs, std::span<OutSpec> outs,
                     Node* before = nullptr);
  /// Adds a primitive call whose outputs come from the op's infer rule
  /// (static shapes only). Throws kiln::Error if the rule rejects the inputs.
  Node* add_op_inferred(OpId op, std::vector<Value*> inputs, Attrs attrs, Node* before = nullptr);
  /// Adds a constant node holding (a contiguous copy of) `t`.
  Node* add_constant(const Tensor& t, Node* before = nullptr);
  /// Appends a graph output.
  void add_output(Value* v, std::string name, OutputRole role = OutputRole::kValue);
  /// Replaces graph output i.
  void set_output(size_t i, Value* v);

  /// Makes every use of `from` (nodes and graph outputs) use `to` instead.
  void replace_all_uses(Value* from, Value* to);
  /// Replaces input slot i of `n` by v, keeping use lists right.
  void set_input(Node* n, size_t i, Value* v);
  /// Removes a node whose outputs have no uses (KILN_ASSERT otherwise).
  void erase(Node* n);
  /// Removes graph input i, which must have no uses.
  void erase_input(size_t i);
  /// True if a graph output refers to v.
  bool is_output(const Value* v) const;
  /// Number of uses of v, counting graph outputs.
  size_t num_uses(const Value* v) const;

  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  const std::vector<std::string>& output_names() const { return output_names_; }
  const std::vector<OutputRole>& output_roles() const { return output_roles_; }
  /// True if graph output i is a gradient (OutputRole::kGradient).
  bool is_gradient_output(size_t i) const { return output_roles_[i] == OutputRole::kGradient; }
  /// Nodes in evaluation order (a snapshot; safe to mutate the graph while iterating).
  /// A copy of a cached vector; the first call after an insertion before a node
  /// or an erase rebuilds the cache (so, like position(), not concurrently then).
  std::vector<Node*> nodes() const;
  size_t num_nodes() const { return num_nodes_; }
  /// Position of a node in the evaluation order (valid until the next insertion/erase).
  /// O(1), after one O(n) renumbering following an insertion before a node or an
  /// erase; not to be called concurrently with another call on a mutated graph.
  size_t position(const Node* n) const;

  /// One more than the largest Value::id() of this graph (ids are dense):
  /// tables indexed by value id need this many entries.
  int value_id_bound() const { return next_value_id_; }

  /// Number of symbols (dynamic dims), named s0, s1, ...
  int num_syms = 0;
  /// How far one call advances the default generator's offset (random ops).
  SymInt rng_advance;

  /// A deep copy (new Values/Nodes, same structure).
  std::unique_ptr<Graph> clone() const;

 private:
  // Owns every Node and Value in arenas (pointer-stable, a few allocations for
  // a whole graph), the node order and its cache; its address identifies this
  // graph's nodes (it survives moves of the Graph). Defined in graph.cpp.
  struct Storage;
  Value* new_value(DType dtype, SymShape shape);
  void refresh_order() const;
  std::unique_ptr<Storage> store_;
  size_t num_nodes_ = 0;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
  std::vector<std::string> output_names_;
  std::vector<OutputRole> output_roles_;
  int next_value_id_ = 0;
  int next_node_id_ = 0;
};

/// Structural equality: same inputs, nodes (op, attrs, constants), outputs and
/// metadata, up to value numbering. On mismatch, `why` (if given) says where.
bool structurally_equal(const Graph& a, const Graph& b, std::string* why = nullptr);

}  // namespace kiln::ir
