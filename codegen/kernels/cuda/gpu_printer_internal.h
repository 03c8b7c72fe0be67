// Internal to the GPU printer: the scalar rules shared by its pointwise,
// row-reduction and copy kernels (one definition each).
#pragma once

#include <string>
#include <vector>

#include "kernels/cuda/gpu_printer.h"
#include "kernels/kernel_ir.h"
#include "kiln/error.h"

namespace kiln::cuda::detail {

/// The C type a value of dtype t is computed in (float for f16/bf16).
const char* compute_type(DType t);
/// The C type an element of dtype t is stored as.
const char* storage_type(DType t);
/// A double as a C literal (hex; inf/NaN through bit casts), single or double.
std::string hex_float(double v, bool single);
/// A kConst expression in its compute type, rounded as the interpreter rounds it.
std::string constant(const kir::Expr& e);
/// Op `op` over operands x, y, z of dtype `in` yielding `out` (before rounding).
std::string op_expr(OpId op, DType in, DType out, const std::string& x, const std::string& y,
                    const std::string& z);
/// Primitive e.prim (kPrim: math expansions) over operands x, y, z of dtype
/// `in`, exactly as the interpreter computes it.
std::string prim_expr(const kir::Expr& e, DType in, const std::string& x, const std::string& y,
                      const std::string& z);
/// The constant tables (math_table) `k` reads, as guarded file-scope arrays
/// printed ahead of its kernel ("" if none).
std::string tables_for(const kir::Kernel& k);
/// v rounded to f16/bf16 after an op (other dtypes: v).
std::string rounded(DType t, const std::string& v);
/// Element `off` of buffer p as its compute type.
std::string load(DType t, const std::string& p, const std::string& off);
/// A compute-type value converted for storing as dtype t.
std::string store_value(DType t, const std::string& v);
/// A loaded value's name and dtype (what issue_loads holds).
struct Loaded {
  std::string name;
  DType dtype;
};
/// KILN_ISSUE statements over `values` (the loads of an unrolled loop's lanes,
/// declared non-const): on CUDA every load is issued before the statements
/// after them (the prelude's KILN_ISSUE); 8-bit values are left out (no asm
/// constraint); "" if nothing is held.
std::string issue_loads(const std::vector<Loaded>& values, const std::string& indent);
/// The head of a grid-stride loop of i (kiln_i64) over [0, count).
std::string grid_loop(const std::string& count);
/// A grid-stride loop over `count` items whose body, `body(t)`, works out
/// coordinates in the type t it is given: 32-bit unsigned when the count is at
/// most narrow_index_limit() (a 64-bit division is a long software routine on
/// a GPU: an H200's synchronized profile took about 50 us per index_select of
/// [8192, 512] rows, where moving the bytes takes 10), else kiln_i64; offsets
/// stay 64-bit. A negative limit (a test hook) prints the 64-bit loop alone.
template <typename Body>
std::string index_loops(const char* count, Body body) {
  auto loop = [&](const char* t, const std::string& n) {
    return str("  for (", t, " i = (", t, ")blockIdx.x * blockDim.x + threadIdx.x; i < ", n,
               ";\n       i += (", t, ")gridDim.x * blockDim.x) {\n", body(t), "  }\n");
  };
  const int64_t limit = narrow_index_limit();
  if (limit < 0) return loop("kiln_i64", count);
  return str("  if (", count, " <= ", limit, ") {\n", loop("unsigned", str("(unsigned)", count)),
             "  } else {\n", loop("kiln_i64", count), "  }\n");
}

/// A printed kernel's signature and opening brace: a pointer per argument,
/// the work-item count named `count`, the sizes, and `parts` when `k` has
/// column sums (gpu_printer.h's launch ABI).
std::string kernel_head(const kir::Kernel& k, const std::string& symbol, const char* count);

/// The statements of one element ("lane") at flat index `idx`, in three parts
/// so a thread can issue the loads of several elements before computing any:
/// the loads (with coordinates and offsets), the arithmetic, the stores. Names
/// carry the lane's suffix `sfx`; a column sum's store adds to the register
/// acc<arg>.
struct LaneText {
  std::string loads, math, stores;
  std::vector<Loaded> loaded;  ///< the values `loads` declares
};
/// The C type of a lane's index arithmetic and the prefix of the sizes' names
/// (s0, s1, ...: the kernel's parameters).
struct IndexNames {
  const char* type = "kiln_i64";
  const char* size = "s";
  /// Non-empty in a vector loop (print_pointwise_variant): the lane is
  /// component `vector_lane` (e.g. "_1.y") of the float4 registers v<arg>
  /// (loaded) and w<arg> (stored) instead of an element of memory.
  std::string vector_lane;
  /// Per expression: a division printed as the prelude's kiln_fdiv_fast
  /// (kir::normal_divisions); null: none.
  const std::vector<char>* fast_div = nullptr;
  /// A pointwise loop's block index and block count (a batched kernel's are
  /// its instance's: print_batched_kernel).
  const char* block = "blockIdx.x";
  const char* blocks = "gridDim.x";
};
/// Whether a pointwise kernel's lanes compute coordinates (an argument, other
/// than a column sum, broadcast along some dim).
bool has_coordinates(const kir::Kernel& k);
LaneText lane_text(const kir::Kernel& k, const std::string& idx, const std::string& sfx,
                   const std::string& indent, const IndexNames& names = {});
/// The loads of `lanes` (issued together: issue_loads), then their arithmetic,
/// then their stores, each in lane order.
std::string lanes_text(const std::vector<LaneText>& lanes, const std::string& ind);

/// How print_pointwise_variant prints a pointwise kernel (default_pointwise()
/// holds print_kernel's choices).
struct PointwiseOptions {
  bool libm = false;   ///< transcendentals as device libm calls (KILN_CUDA_LIBM=1)
  int per_thread = 4;  ///< elements per thread per loop step (4 for launch_kernel's grid)
  /// Kernels of dense f32 arguments only: float4 loads and stores where every
  /// pointer is 16-byte aligned (per_thread / 4 of them per step).
  bool vector = false;
  bool narrow_dense = false;  ///< 32-bit indices for dense kernels too (n permitting)
  /// The expansions' normal-range divisions (tanh's) without div.rn's slow
  /// path (kiln_fdiv_fast: the same bits there).
  bool fast_division = false;
};
/// The options print_kernel prints pointwise kernels with.
PointwiseOptions default_pointwise();
/// print_kernel for a kernel without row reductions, with `o`'s choices
/// (benchmarks' and tests' variants; launch_kernel's grid assumes per_thread 4).
std::string print_pointwise_variant(const kir::Kernel& k, const std::string& symbol,
                                    const PointwiseOptions& o);

/// The body of print_pointwise_variant's kernel (after its head): the loops
/// over n elements of `k` (math expanded unless o.libm; `normal_div` from
/// kir::expand_math), reading p<arg>, n and the sizes s<d>, with `block` of
/// `blocks` for the loops' blockIdx.x and gridDim.x.
std::string pointwise_body(const kir::Kernel& k, const std::vector<char>& normal_div,
                           const PointwiseOptions& o, const char* block = "blockIdx.x",
                           const char* blocks = "gridDim.x");

/// A pointwise kernel with column sums (print_kernel's third form).
std::string print_column_kernel(const kir::Kernel& k, const std::string& symbol);

/// Row loads in flight per thread per step of a row kernel's loops.
constexpr int kRowUnroll = 16;
/// How a row kernel's streaming loops are printed (print_row_kernel).
struct RowLoops {
  /// Kernels whose row arguments are all f32 (no column sums) stream in quads:
  /// thread t takes elements 4q..4q+3 for q = t, t + blockDim.x, ..., as
  /// float4 loads and stores where the row's pointers are 16-byte aligned,
  /// else one by one in the same order (the same bits either way; the order
  /// differs from the element loops', as reassoc allows; with one thread both
  /// are index order).
  bool quads = false;
  /// What a loop needs that is the same for the whole row (layer_norm's mean
  /// and rsqrt of the variance) is computed once before it: the same bits.
  bool hoist = false;
};
/// The loops print_kernel prints row kernels with.
RowLoops default_row_loops();
/// A kernel with row reductions (print_kernel's second half); each row loop
/// takes max_unroll / (its row loads) elements per thread per step (at least 4).
/// With held > 0, rows of at most held * blockDim.x elements are instead held
/// in registers (held elements per thread, read from memory once, each
/// expression computed once for all phases; launch_kernel's `held` fits the
/// block to the row; with loops.quads, f32 rows hold the quad loops' quads,
/// float4 where aligned: the streaming quads' bits on the same block); longer
/// rows stream as without, printed as `loops` says.
std::string print_row_kernel(const kir::Kernel& k, const std::string& symbol,
                             int max_unroll = kRowUnroll, int held = 0, const RowLoops& loops = {});
/// print_kernel for a kernel with row reductions, with the unroll, held and
/// loop options of print_row_kernel (benchmarks' and tests' variants); libm:
/// transcendentals as device libm calls, as KILN_CUDA_LIBM=1 prints them.
std::string print_row_variant(const kir::Kernel& k, const std::string& symbol, int max_unroll,
                              int held, bool libm = false, const RowLoops& loops = {});

}  // namespace kiln::cuda::detail
