// The GPU printer's kernels with row reductions (see gpu_printer.h): one block
// (or warp) per row, phases as stride loops, warp shuffles and per-warp partials.
#include <algorithm>
#include <limits>
#include <sstream>

#include "kernels/cuda/gpu_printer_internal.h"
#include "kernels/kernel_ir_util.h"
#include "kiln/error.h"

namespace kiln::cuda::detail {
namespace {

using kir::Expr;
using kir::ExprKind;
using kir::Kernel;

// One block per row (grid-stride over rows), or in warp rows one warp per row
// (blockDim 32 x rows per block). Each phase is a stride loop over the row
// accumulating per thread, then a reduction: warp shuffles, one partial per
// warp in shared memory (per row), every thread combining its row's partials
// in warp order (deterministic). Every thread runs every statement of the
// reduction (uniform control flow). A row's results depend on blockDim.x
// only: a warp row's equal a 32-thread block's. reassoc = false kernels are
// launched with one thread per block, which sums in index order: the
// interpreter's result.

// A reduction's accumulator type and identity.
const char* acc_type(const kir::Reduction& r) {
  if (r.op != OpId::sum) return compute_type(r.dtype);
  if (r.dtype == DType::f32 || r.dtype == DType::f64) return "double";
  if (r.dtype == DType::f16 || r.dtype == DType::bf16) return "float";
  return "kiln_u64";  // integer sums wrap in 64 bits
}

std::string acc_identity(const kir::Reduction& r) {
  if (r.op == OpId::sum) return str("(", acc_type(r), ")0");
  const bool max = r.op == OpId::max;
  const double inf = std::numeric_limits<double>::infinity();
  switch (r.dtype) {
    case DType::f64:
      return hex_float(max ? -inf : inf, false);
    case DType::i64:
      return max ? "((kiln_i64)-9223372036854775807 - 1)" : "((kiln_i64)9223372036854775807)";
    case DType::i32:
      return max ? "(-2147483647 - 1)" : "2147483647";
    case DType::u8:
      return max ? "((unsigned char)0)" : "((unsigned char)255)";
    case DType::b8:
      return max ? "false" : "true";
    default:
      return hex_float(max ? -inf : inf, true);
  }
}

// acc = acc (+) x for an accumulator and a value of the accumulator's type.
std::string acc_combine(const kir::Reduction& r, const std::string& acc, const std::string& x) {
  if (r.op == OpId::sum) return str(acc, " = ", acc, " + ", x, ";");
  const char* cmp = r.op == OpId::max ? " > " : " < ";
  if (!is_floating(r.dtype)) return str(acc, " = (", x, cmp, acc, ") ? ", x, " : ", acc, ";");
  return str(acc, " = ((", x, cmp, acc, ") || (", x, " != ", x, ")) ? ", x, " : ", acc, ";");
}

// The reduction's value from its accumulator, in the compute type of its dtype.
std::string acc_finish(const kir::Reduction& r, const std::string& acc) {
  if (r.op != OpId::sum) return acc;
  switch (r.dtype) {
    case DType::f32:
      return str("(float)", acc);
    case DType::f64:
      return acc;
    case DType::f16:
      return str("kiln_rt_f16(", acc, ")");
    case DType::bf16:
      return str("kiln_rt_bf16(", acc, ")");
    case DType::b8:
      return str("(", acc, " != 0)");
    default:
      return str("(", compute_type(r.dtype), ")(kiln_i64)", acc);
  }
}

// Which statements eval_row prints: all, the loads only, or all but the loads
// (unrolled loops put every lane's loads before any lane's arithmetic).
enum class Part { kAll, kLoads, kMath };

// The needed expressions (need[i] == 1; 2: hoisted, computed before the loop
// and named without a suffix) at inner index `j` (row offsets b<a> in
// scope), named with suffix `sfx`. With `guard`, loads read only where it holds (else 0):
// held rows' slots past the row's end. Loads are declared non-const and
// added to `loaded` (for issue_loads).
void eval_row(std::ostream& os, const Kernel& k, const std::vector<char>& need,
              const std::string& j, const std::string& ind, const std::string& sfx = "",
              Part part = Part::kAll, const std::string& guard = "",
              std::vector<Loaded>* loaded = nullptr, const std::string& vlane = "") {
  const size_t inner = static_cast<size_t>(k.rank - 1);
  auto v = [&](int x) {
    return x < 0 ? std::string() : str("e", x, need[static_cast<size_t>(x)] == 2 ? "" : sfx);
  };
  for (size_t i = 0; i < k.exprs.size(); ++i) {
    if (need[i] != 1) continue;
    const Expr& e = k.exprs[i];
    if (part != Part::kAll && (e.kind == ExprKind::kLoad) != (part == Part::kLoads)) continue;
    os << ind << (e.kind == ExprKind::kLoad ? "" : "const ") << compute_type(e.dtype) << " e" << i
       << sfx << " = ";
    switch (e.kind) {
      case ExprKind::kLoad: {
        if (loaded) loaded->push_back({str("e", i, sfx), e.dtype});
        const auto a = static_cast<size_t>(e.arg);
        const std::string off =
            k.args[a].dense[inner] ? str("b", a, " * inner + ", j) : str("b", a);
        // In a quad loop's aligned path (vlane "_<g>.<c>"), inner-dense
        // arguments' lanes are components of the float4 v<a>_<g>.
        // (A held quad's float4 is already zero past the row's end: no guard.)
        const bool lane = !vlane.empty() && k.args[a].dense[inner];
        const std::string v = lane ? str("v", a, vlane) : load(e.dtype, str("p", a), off);
        os << (guard.empty() || lane
                   ? v
                   : str("(", guard, " ? ", v, " : (", compute_type(e.dtype), ")0)"));
        break;
      }
      case ExprKind::kConst:
        os << constant(e);
        break;
      case ExprKind::kReduced:
        os << "red" << e.arg;
        break;
      case ExprKind::kPrim: {
        os << prim_expr(e, k.exprs[static_cast<size_t>(e.a)].dtype, v(e.a), v(e.b), v(e.c));
        break;
      }
      case ExprKind::kOp: {
        const DType in = e.op == OpId::where ? k.exprs[static_cast<size_t>(e.b)].dtype
                                             : k.exprs[static_cast<size_t>(e.a)].dtype;
        os << rounded(e.dtype, op_expr(e.op, in, e.dtype, v(e.a), v(e.b), v(e.c)));
        break;
      }
    }
    os << ";\n";
  }
}

// Stores (by index) at inner index j; row stores go to the row's element.
// With vlane "_<g>.<c>" (a quad loop's aligned path), inner-dense stores set
// that component of the float4 w<a>_<g> instead.
void emit_stores(std::ostream& os, const Kernel& k, const std::vector<size_t>& which,
                 const std::string& j, const std::string& ind, const std::string& sfx = "",
                 const std::string& vlane = "") {
  const size_t inner = static_cast<size_t>(k.rank - 1);
  for (size_t i : which) {
    const kir::Store& s = k.stores[i];
    const auto a = static_cast<size_t>(s.arg);
    if (s.accumulate) {  // the column's f64 partial of this part: only this thread adds to it
      os << ind << "q" << a << "[" << j << "] = q" << a << "[" << j << "] + e" << s.expr << sfx
         << ";\n";
      continue;
    }
    if (!vlane.empty() && k.args[a].dense[inner]) {
      os << ind << "w" << a << vlane << " = e" << s.expr << sfx << ";\n";
      continue;
    }
    const std::string off = k.args[a].dense[inner] ? str("b", a, " * inner + ", j) : str("b", a);
    os << ind << "p" << a << "[" << off
       << "] = " << store_value(k.args[a].dtype, str("e", s.expr, sfx)) << ";\n";
  }
}

void block_reduce(std::ostream& os, const kir::Reduction& r, size_t idx) {
  const std::string acc = str("acc", idx), sh = str("kiln_sh", idx);
  const std::string t = acc_type(r);
  // Shuffles move 32/64-bit values: narrower accumulators travel as int.
  const bool narrow = t == "bool" || t == "unsigned char";
  // A one-thread block (reassoc = false) has no warp to shuffle in.
  os << "      for (int off = 16; off > 0 && blockDim.x >= 32; off >>= 1) {\n"
     << "        const " << t << " other = (" << t << ")__shfl_xor_sync(0xffffffffu, "
     << (narrow ? "(int)" : "") << acc << ", off);\n"
     << "        " << acc_combine(r, acc, "other")
     << "\n      }\n"
     // Partials per row: warp w of row y at y * (warps per row) + w (32 in all).
     << "      {\n"
     << "        const int nw = (int)((blockDim.x + 31) >> 5), base = (int)threadIdx.y * nw;\n"
     << "        if ((threadIdx.x & 31) == 0) " << sh
     << "[base + (int)(threadIdx.x >> 5)] = " << acc << ";\n"
     << "        KILN_ROW_SYNC();\n"
     << "        " << acc << " = " << sh << "[base];\n"
     << "        for (int w = 1; w < nw; ++w) { " << acc_combine(r, acc, str(sh, "[base + w]"))
     << " }\n"
     << "        KILN_ROW_SYNC();\n"
     << "      }\n";
}

// Elements per thread per step of one row loop: `max_unroll` over the number
// of row loads it needs (at least 4), so about max_unroll loads are in flight
// per thread without spilling registers. (An H200 ran softmax at 72-75% and
// layer_norm at 80-88% of copy bandwidth with 16 against 64-70% with 4.)
int loop_unroll(const Kernel& k, const std::vector<char>& need, int max_unroll) {
  const size_t inner = static_cast<size_t>(k.rank - 1);
  int loads = 0;
  for (size_t i = 0; i < k.exprs.size(); ++i)
    if (need[i] && k.exprs[i].kind == ExprKind::kLoad &&
        k.args[static_cast<size_t>(k.exprs[i].arg)].dense[inner])
      ++loads;
  return std::max(std::min(4, max_unroll), max_unroll / std::max(loads, 1));
}

// The row stores made at point `after` (Analysis::store_after), by thread 0.
void row_stores(std::ostream& os, const Kernel& k, const kir::detail::Analysis& an, int after) {
  std::vector<int> roots;
  std::vector<size_t> which;
  for (size_t i = 0; i < k.stores.size(); ++i)
    if (an.store_after[i] == after) {
      roots.push_back(k.stores[i].expr);
      which.push_back(i);
    }
  if (which.empty()) return;
  os << "    if (threadIdx.x == 0 && kiln_live) {\n";
  eval_row(os, k, kir::detail::needed(k, roots), "0", "      ");
  emit_stores(os, k, which, "0", "      ");
  os << "    }\n";
}

// The reductions' roots of phase p (-1: the elementwise stores' roots, with
// their indices in `which`).
std::vector<int> phase_roots(const Kernel& k, const kir::detail::Analysis& an, int p,
                             std::vector<size_t>* which = nullptr) {
  std::vector<int> roots;
  if (p >= 0) {
    for (const kir::Reduction& r : k.reductions)
      if (r.phase == p) roots.push_back(r.expr);
    return roots;
  }
  for (size_t i = 0; i < k.stores.size(); ++i)
    if (an.store_after[i] == -1) {
      roots.push_back(k.stores[i].expr);
      which->push_back(i);
    }
  return roots;
}

// Phase p's accumulators take the element named with suffix `sfx`.
void accumulate(std::ostream& os, const Kernel& k, int p, const std::string& sfx,
                const std::string& ind, const std::string& guard = "") {
  for (size_t r = 0; r < k.reductions.size(); ++r) {
    const kir::Reduction& red = k.reductions[r];
    if (red.phase != p) continue;
    const DType xt = k.exprs[static_cast<size_t>(red.expr)].dtype;
    std::string x = str("e", red.expr, sfx);
    if (xt != red.dtype) x = rounded(red.dtype, op_expr(OpId::cast, xt, red.dtype, x, "", ""));
    if (red.op == OpId::sum && !is_floating(red.dtype)) x = str("(kiln_u64)(kiln_i64)", x);
    os << ind << (guard.empty() ? "" : str("if (", guard, ") "))
       << acc_combine(red, str("acc", r), str("(", acc_type(red), ")", x)) << "\n";
  }
}

// Phase p's accumulators declared, and after its loop reduced into red<r>.
void phase_open(std::ostream& os, const Kernel& k, int p, const std::string& ind) {
  for (size_t r = 0; r < k.reductions.size(); ++r)
    if (k.reductions[r].phase == p)
      os << ind << acc_type(k.reductions[r]) << " acc" << r << " = "
         << acc_identity(k.reductions[r]) << ";\n";
}
void phase_close(std::ostream& os, const Kernel& k, int p) {
  for (size_t r = 0; r < k.reductions.size(); ++r)
    if (k.reductions[r].phase == p) {
      block_reduce(os, k.reductions[r], r);
      os << "      red" << r << " = " << acc_finish(k.reductions[r], str("acc", r)) << ";\n";
    }
}

// What a row loop does with each element after its arithmetic: add it to
// phase `phase`'s accumulators, or (which != null) make the stores `which`.
struct LoopWork {
  int phase = -1;
  const std::vector<size_t>* which = nullptr;
};

void lane_work(std::ostream& os, const Kernel& k, const LoopWork& w, const std::string& j,
               const std::string& ind, const std::string& sfx, const std::string& vlane = "") {
  if (w.which)
    emit_stores(os, k, *w.which, j, ind, sfx, vlane);
  else
    accumulate(os, k, w.phase, sfx, ind);
}

// A block-stride loop over the row: `unroll` elements a block apart per step,
// loaded before any is used, and worked in the order the plain loop would
// (results do not change), then one element per step.
void element_loops(std::ostream& os, const Kernel& k, const std::vector<char>& need, int unroll,
                   const LoopWork& w, const std::string& ind) {
  const std::string body = ind + "  ";
  os << ind << "kiln_i64 j = threadIdx.x;\n"
     << ind << "for (; j + " << unroll - 1 << " * (kiln_i64)blockDim.x < inner; j += " << unroll
     << " * (kiln_i64)blockDim.x) {\n";
  std::vector<Loaded> loaded;
  auto at = [](int l) { return str("(j + ", l, " * (kiln_i64)blockDim.x)"); };
  for (int l = 0; l < unroll; ++l)
    eval_row(os, k, need, at(l), body, str("_", l), Part::kLoads, "", &loaded);
  os << issue_loads(loaded, body);
  for (int l = 0; l < unroll; ++l) {
    eval_row(os, k, need, "", body, str("_", l), Part::kMath);
    if (!w.which) accumulate(os, k, w.phase, str("_", l), body);
  }
  if (w.which)
    for (int l = 0; l < unroll; ++l) emit_stores(os, k, *w.which, at(l), body, str("_", l));
  os << ind << "}\n" << ind << "for (; j < inner; j += blockDim.x) {\n";
  eval_row(os, k, need, "j", body);
  lane_work(os, k, w, "j", body, "");
  os << ind << "}\n";
}

// One step of a quad loop: `groups` quads a block apart (q the first), four
// consecutive elements each; `vector`: inner-dense arguments move as float4
// (v<a>_<g> loaded, w<a>_<g> stored), else one element at a time. Both
// forms work the elements in the same order (quads ascending, then their
// components), so a row's results do not depend on its alignment.
void quad_step(std::ostream& os, const Kernel& k, const std::vector<char>& need, int groups,
               const LoopWork& w, bool vector, const std::string& ind) {
  const size_t inner = static_cast<size_t>(k.rank - 1);
  std::vector<char> loads(k.args.size(), 0), stores(k.args.size(), 0);
  for (size_t i = 0; i < k.exprs.size(); ++i)
    if (need[i] && k.exprs[i].kind == ExprKind::kLoad)
      loads[static_cast<size_t>(k.exprs[i].arg)] = 1;
  if (w.which)
    for (size_t i : *w.which) stores[static_cast<size_t>(k.stores[i].arg)] = 1;
  auto quad = [](int g) {
    return g == 0 ? std::string("q") : str("(q + ", g, " * (kiln_i64)blockDim.x)");
  };
  auto row_ptr = [](size_t a) { return str("(p", a, " + b", a, " * inner)"); };
  if (vector)
    for (int g = 0; g < groups; ++g)
      for (size_t a = 0; a < k.args.size(); ++a) {
        if (!k.args[a].dense[inner]) continue;
        if (loads[a])
          os << ind << "const float4 v" << a << "_" << g << " = ((KILN_GLOBAL const float4*)"
             << row_ptr(a) << ")[" << quad(g) << "];\n";
        if (stores[a]) os << ind << "float4 w" << a << "_" << g << ";\n";
      }
  std::vector<Loaded> loaded;
  auto lane = [](int g, int c) { return str("_", g, "_", c); };
  auto vlane = [&](int g, int c) { return vector ? str("_", g, ".", "xyzw"[c]) : std::string(); };
  auto elem = [&](int g, int c) { return str("(4 * ", quad(g), " + ", c, ")"); };
  for (int g = 0; g < groups; ++g)
    for (int c = 0; c < 4; ++c)
      eval_row(os, k, need, elem(g, c), ind, lane(g, c), Part::kLoads, "", &loaded, vlane(g, c));
  os << issue_loads(loaded, ind);
  for (int g = 0; g < groups; ++g)
    for (int c = 0; c < 4; ++c) {
      eval_row(os, k, need, "", ind, lane(g, c), Part::kMath);
      if (!w.which) accumulate(os, k, w.phase, lane(g, c), ind);
    }
  if (!w.which) return;
  for (int g = 0; g < groups; ++g)
    for (int c = 0; c < 4; ++c)
      emit_stores(os, k, *w.which, elem(g, c), ind, lane(g, c), vlane(g, c));
  if (vector)
    for (int g = 0; g < groups; ++g)
      for (size_t a = 0; a < k.args.size(); ++a)
        if (stores[a] && k.args[a].dense[inner])
          os << ind << "((KILN_GLOBAL float4*)" << row_ptr(a) << ")[" << quad(g) << "] = w" << a
             << "_" << g << ";\n";
}

// The quad loops over the row (RowLoops::quads): thread t takes quads t,
// t + blockDim.x, ... of four consecutive elements (float4 where the row's
// inner-dense pointers are 16-byte aligned, kiln_al; else element by element
// in the same order), then the one thread whose quad is the row's partial
// last one takes its elements.
void quad_loops(std::ostream& os, const Kernel& k, const std::vector<char>& need, int unroll,
                const LoopWork& w, const std::string& ind) {
  const int groups = (unroll + 3) / 4;  // at least the element loops' loads per step
  const std::string in = ind + "  ", body = ind + "    ";
  os << ind << "kiln_i64 q = threadIdx.x;\n" << ind << "const kiln_i64 n4 = inner / 4;\n";
  for (const bool vector : {true, false}) {
    os << ind << (vector ? "if (kiln_al) {\n" : "} else {\n");
    if (groups > 1) {
      os << in << "for (; q + " << groups - 1 << " * (kiln_i64)blockDim.x < n4; q += " << groups
         << " * (kiln_i64)blockDim.x) {\n";
      quad_step(os, k, need, groups, w, vector, body);
      os << in << "}\n";
    }
    os << in << "for (; q < n4; q += blockDim.x) {\n";
    quad_step(os, k, need, 1, w, vector, body);
    os << in << "}\n";
  }
  os << ind << "}\n" << ind << "for (kiln_i64 j = 4 * q; j < inner; ++j) {\n";
  eval_row(os, k, need, "j", in);
  lane_work(os, k, w, "j", in, "");
  os << ind << "}\n";
}

// Hoists what a row loop needs that is the same for the whole row (constants,
// reduced values, loads of arguments not read along the row, and what is
// computed from those alone), except the loop's roots: printed once at `ind`
// and marked 2 in `need` (eval_row names them without a suffix). NVVM left
// layer_norm's mean and rsqrt of the variance in its store loop (2 MUFU and 2
// slow-path branches per step). Only where some arithmetic moves.
void hoist_row_values(std::ostream& os, const Kernel& k, std::vector<char>& need,
                      const std::vector<int>& roots, const std::string& ind) {
  const size_t inner = static_cast<size_t>(k.rank - 1);
  std::vector<char> row(k.exprs.size(), 0), hoisted(k.exprs.size(), 0);
  bool arithmetic = false;
  for (size_t i = 0; i < k.exprs.size(); ++i) {
    const Expr& e = k.exprs[i];
    if (e.kind == ExprKind::kLoad) {
      row[i] = !k.args[static_cast<size_t>(e.arg)].dense[inner];
      continue;
    }
    int ops[3];
    const int m = kir::detail::operands(e, ops);
    row[i] = 1;
    for (int o = 0; o < m; ++o) row[i] = row[i] && row[static_cast<size_t>(ops[o])];
  }
  for (int r : roots) row[static_cast<size_t>(r)] = 0;
  for (size_t i = 0; i < k.exprs.size(); ++i) {
    hoisted[i] = need[i] && row[i];
    const ExprKind kind = k.exprs[i].kind;
    arithmetic = arithmetic || (hoisted[i] && (kind == ExprKind::kOp || kind == ExprKind::kPrim));
  }
  if (!arithmetic) return;
  eval_row(os, k, hoisted, "", ind);
  for (size_t i = 0; i < k.exprs.size(); ++i)
    if (hoisted[i]) need[i] = 2;
}

// One row's work: each phase streams the row from memory (loop_unroll loads in
// flight per thread), then the final store loop; quad loops with `quads`.
void row_body(std::ostream& os, const Kernel& k, const kir::detail::Analysis& an,
              const int max_unroll, bool quads, bool hoist) {
  auto loops = [&](const std::vector<int>& roots, const LoopWork& w, const std::string& ind) {
    std::vector<char> need = kir::detail::needed(k, roots);
    if (hoist) hoist_row_values(os, k, need, roots, ind);
    const int unroll = loop_unroll(k, need, max_unroll);
    if (quads)
      quad_loops(os, k, need, unroll, w, ind);
    else
      element_loops(os, k, need, unroll, w, ind);
  };
  row_stores(os, k, an, kir::detail::Analysis::kRowStart);
  for (int p = 0; p < an.num_phases; ++p) {
    os << "    {  // phase " << p << "\n";
    phase_open(os, k, p, "      ");
    LoopWork w;
    w.phase = p;
    loops(phase_roots(k, an, p), w, "      ");
    phase_close(os, k, p);
    os << "    }\n";
    row_stores(os, k, an, p);
  }
  std::vector<size_t> which;
  const std::vector<int> roots = phase_roots(k, an, -1, &which);
  if (which.empty()) return;
  LoopWork w;
  w.which = &which;
  if (hoist) os << "    {\n";  // the hoisted names' scope
  loops(roots, w, "    ");
  if (hoist) os << "    }\n";
}

// Whether a row kernel can take quad loops: every argument read or written
// along the row is f32, and it has such an argument; the elementwise stores
// all go along the row; no column sums (their partials keep the element
// loops' mapping).
bool quad_rows(const Kernel& k, const kir::detail::Analysis& an) {
  const size_t inner = static_cast<size_t>(k.rank - 1);
  bool any = false;
  for (const kir::Arg& a : k.args) {
    if (!a.dense[inner]) continue;
    if (a.dtype != DType::f32) return false;
    any = true;
  }
  for (size_t i = 0; i < k.stores.size(); ++i) {
    if (k.stores[i].accumulate) return false;
    if (an.store_after[i] == -1 && !k.args[static_cast<size_t>(k.stores[i].arg)].dense[inner])
      return false;
  }
  return any;
}

// A held row's element slots in thread t: suffix, index in the row, guard
// (inside the row; "" where every slot is), and its quad and component
// (quads) or -1.
struct HeldSlot {
  std::string sfx, j, in;
  int quad = -1, comp = -1;
};

// Declares the slots of a held row: held elements a block apart, or (quads)
// ceil(held / 4) quads a block apart, four consecutive elements each, in
// 32-bit indices (a held row has at most 64 * 1024 elements). `full`: every
// quad lies in the row and is aligned (no guards); else full_<l> says which.
std::vector<HeldSlot> held_slots(std::ostream& os, int held, bool quads, bool full,
                                 const std::string& ind) {
  std::vector<HeldSlot> slots;
  if (!quads) {
    for (int l = 0; l < held; ++l) {
      os << ind << "const kiln_i64 j_" << l << " = threadIdx.x + " << l
         << " * (kiln_i64)blockDim.x;\n"
         << ind << "const bool in_" << l << " = j_" << l << " < inner;\n";
      slots.push_back({str("_", l), str("j_", l), str("in_", l)});
    }
    return slots;
  }
  for (int l = 0; l < (held + 3) / 4; ++l) {
    os << ind << "const int qh_" << l << " = (int)threadIdx.x + " << l << " * (int)blockDim.x;\n";
    if (!full)
      os << ind << "const bool full_" << l << " = kiln_al && 4 * qh_" << l << " + 3 < hn;\n";
    for (int c = 0; c < 4; ++c) {
      const std::string j = str("(4 * qh_", l, " + ", c, ")");
      const std::string in = full ? "" : str("in_", l, "_", c);
      if (!full) os << ind << "const bool " << in << " = " << j << " < hn;\n";
      slots.push_back({str("_", l, "_", c), j, in, l, c});
    }
  }
  return slots;
}

// A held quad slot's component of the float4s (eval_row's vlane), or "".
std::string held_lane(const HeldSlot& s) {
  return s.quad < 0 ? std::string() : str("_", s.quad, ".", "xyzw"[s.comp]);
}

// Quad l's float4 of argument a's row (a pointer expression).
std::string held_quad(size_t a, int l, bool write) {
  return str("((KILN_GLOBAL ", write ? "" : "const ", "float4*)(p", a, " + b", a, " * inner))[qh_",
             l, "]");
}

// The float4s v<a>_<l> of the inner-dense arguments `args` for every held
// quad: one load where full_<l>, else the elements inside the row (0 past it).
void held_quad_loads(std::ostream& os, const std::vector<size_t>& args,
                     const std::vector<HeldSlot>& slots, const std::string& ind) {
  for (size_t s = 0; s < slots.size(); s += 4)
    for (size_t a : args) {
      const int l = slots[s].quad;
      const std::string v = str("v", a, "_", l);
      if (slots[s].in.empty()) {
        os << ind << "const float4 " << v << " = " << held_quad(a, l, false) << ";\n";
        continue;
      }
      os << ind << "float4 " << v << ";\n"
         << ind << "if (full_" << l << ") {\n"
         << ind << "  " << v << " = " << held_quad(a, l, false) << ";\n"
         << ind << "} else {\n";
      for (size_t c = 0; c < 4; ++c)
        os << ind << "  " << v << "."
           << "xyzw"[c] << " = " << slots[s + c].in << " ? "
           << load(DType::f32, str("p", a), str("b", a, " * inner + ", slots[s + c].j))
           << " : 0.0f;\n";
      os << ind << "}\n";
    }
}

// The held row's elementwise stores `which`: a float4 per argument where
// full_<l>, else element by element inside the row.
void held_stores(std::ostream& os, const Kernel& k, const std::vector<size_t>& which,
                 const std::vector<HeldSlot>& slots, const std::string& ind) {
  if (slots.front().quad < 0) {
    for (const HeldSlot& s : slots) {
      os << ind << "if (" << s.in << ") {\n";
      emit_stores(os, k, which, s.j, ind + "  ", s.sfx);
      os << ind << "}\n";
    }
    return;
  }
  std::vector<char> stored(k.args.size(), 0);
  for (size_t i : which) stored[static_cast<size_t>(k.stores[i].arg)] = 1;
  for (size_t s = 0; s < slots.size(); s += 4) {
    const int l = slots[s].quad;
    const bool full = slots[s].in.empty();
    const std::string in = full ? ind : ind + "  ";
    os << ind << (full ? "{\n" : str("if (full_", l, ") {\n"));
    for (size_t a = 0; a < k.args.size(); ++a)
      if (stored[a]) os << in << "float4 w" << a << "_" << l << ";\n";
    for (size_t c = 0; c < 4; ++c)
      emit_stores(os, k, which, slots[s + c].j, in, slots[s + c].sfx, held_lane(slots[s + c]));
    for (size_t a = 0; a < k.args.size(); ++a)
      if (stored[a]) os << in << held_quad(a, l, true) << " = w" << a << "_" << l << ";\n";
    if (full) {
      os << ind << "}\n";
      continue;
    }
    os << ind << "} else {\n";
    for (size_t c = 0; c < 4; ++c) {
      os << ind << "  if (" << slots[s + c].in << ") {\n";
      emit_stores(os, k, which, slots[s + c].j, ind + "    ", slots[s + c].sfx);
      os << ind << "  }\n";
    }
    os << ind << "}\n";
  }
}

// A held row's phases over `slots` (held_body), at indent `ind`.
void held_phases(std::ostream& os, const Kernel& k, const kir::detail::Analysis& an,
                 const std::vector<HeldSlot>& slots, const std::string& ind) {
  const size_t inner = static_cast<size_t>(k.rank - 1);
  const bool quads = slots.front().quad >= 0;
  std::vector<char> done(k.exprs.size(), 0);
  auto compute = [&](const std::vector<int>& roots) {  // what was not computed yet
    std::vector<char> need = kir::detail::needed(k, roots);
    std::vector<size_t> args;  // inner-dense arguments first loaded here
    for (size_t i = 0; i < need.size(); ++i) {
      if (done[i]) need[i] = 0;
      const auto a = static_cast<size_t>(k.exprs[i].arg);
      if (quads && need[i] && k.exprs[i].kind == ExprKind::kLoad && k.args[a].dense[inner] &&
          std::find(args.begin(), args.end(), a) == args.end())
        args.push_back(a);
    }
    held_quad_loads(os, args, slots, ind);
    std::vector<Loaded> loaded;
    for (const HeldSlot& s : slots)
      eval_row(os, k, need, s.j, ind, s.sfx, Part::kLoads, s.in, &loaded, held_lane(s));
    os << issue_loads(loaded, ind);
    for (const HeldSlot& s : slots) eval_row(os, k, need, "", ind, s.sfx, Part::kMath);
    for (size_t i = 0; i < need.size(); ++i) done[i] = done[i] || need[i];
  };
  // Thread 0's row stores sit in their own block: their names do not meet the slots'.
  row_stores(os, k, an, kir::detail::Analysis::kRowStart);
  for (int p = 0; p < an.num_phases; ++p) {
    phase_open(os, k, p, ind);
    compute(phase_roots(k, an, p));
    for (const HeldSlot& s : slots) accumulate(os, k, p, s.sfx, ind, s.in);
    phase_close(os, k, p);
    row_stores(os, k, an, p);
  }
  std::vector<size_t> which;
  const std::vector<int> roots = phase_roots(k, an, -1, &which);
  if (which.empty()) return;
  compute(roots);
  held_stores(os, k, which, slots, ind);
}

// One row held in registers (rows of at most held * blockDim.x elements):
// thread t takes elements t, t + blockDim.x, ..., t + (held - 1) * blockDim.x
// (with `quads`, the quad loops' quads t, t + blockDim.x, ..., as float4 where
// aligned; rows filling every quad of an aligned block take a copy of the
// phases without guards), the streaming loops' elements in their order (so
// the sums are the same for the same block size), reads the row from memory
// once and computes each expression once (by its index in the kernel IR),
// keeping it for the later phases: softmax's exp(x - max), computed for the
// sum, is what the division takes. Slots past the row's end load nothing and
// add nothing. (Held with 256 threads for every row length, it ran slower on
// an H200 than streaming: 20-38% of copy bandwidth against 45-69%, from idle
// slots on short rows and 69+ registers; launch_kernel now fits the block.)
void held_body(std::ostream& os, const Kernel& k, const kir::detail::Analysis& an, int held,
               bool quads) {
  const std::string ind = "      ";
  if (!quads) {
    held_phases(os, k, an, held_slots(os, held, false, false, ind), ind);
    return;
  }
  os << ind << "const int hn = (int)inner;\n"
     << ind << "if (kiln_al && hn == " << 4 * ((held + 3) / 4) << " * (int)blockDim.x) {\n";
  held_phases(os, k, an, held_slots(os, held, true, true, ind + "  "), ind + "  ");
  os << ind << "} else {\n";
  held_phases(os, k, an, held_slots(os, held, true, false, ind + "  "), ind + "  ");
  os << ind << "}\n";
}

// The part loops of a row kernel with column sums (`summed`: their partial
// arguments) around `one` (one row's work). Column warps (blockDim.y > 1, the
// launch's choice: row_block; each warp's shared row the block's
// kColumnWarps * cap doubles over blockDim.y): warp y of a part's block takes its
// rows y, y + blockDim.y, ... (all warps the same number of steps, past the
// part's end as empty rows, for the barriers), adding each column into its
// own shared-memory partial row; the block then adds the warps' rows in
// order into the part's partial. A part's rows run blockDim.y at a time, not
// one by one on a block (the form below): on an H200 that form's row
// kernel with a column sum over [8192, 512] ran at a quarter of copy
// bandwidth (cuda_probe, 2026-11-27), its 8 rows a part in series. Else each
// block takes whole parts, its thread t the columns t, t + blockDim.x, ...
// of the part's partials in global memory, in row order.
void column_rows(std::ostream& os, const Kernel& k, const std::vector<int>& summed,
                 const std::string& one) {
  // Each sum's partial row q<a> (in `space`, at `at(a)`), zeroed over `n` columns.
  auto partial_rows = [&](const char* space, auto at, const char* n) {
    for (int a : summed)
      os << "  " << space << " double* q" << a << " = " << at(a) << ";\n"
         << "  for (kiln_i64 j = threadIdx.x; j < " << n << "; j += blockDim.x) q" << a
         << "[j] = 0.0;\n";
  };
  const int64_t total = kColumnWarps * column_warps_cap(k);
  for (int a : summed) os << "  __shared__ double kiln_cw" << a << "[" << total << "];\n";
  os << "  const kiln_i64 cols = s" << k.rank - 1 << ";\n"
     << "  if (blockDim.y > 1) {\n"
     << "  const kiln_i64 wrow = " << total << " / blockDim.y;  // a warp's shared row\n"
     << "  for (kiln_i64 part = blockIdx.x; part < parts; part += gridDim.x) {\n";
  partial_rows(
      "KILN_SHARED_PTR", [](int a) { return str("kiln_cw", a, " + threadIdx.y * wrow"); }, "cols");
  os << "  const kiln_i64 r0 = rows * part / parts, r1 = rows * (part + 1) / parts;\n"
     << "  const kiln_i64 steps = ((rows + parts - 1) / parts + blockDim.y - 1) / blockDim.y;\n"
     << "  for (kiln_i64 t = threadIdx.y; t < steps * blockDim.y; t += blockDim.y) {\n"
     << "    const bool kiln_live = r0 + t < r1;\n"
     << "    const kiln_i64 row = kiln_live ? r0 + t : r0;\n"
     << "    const kiln_i64 inner = kiln_live ? cols : 0;\n"
     << one << "  }\n"
     << "  __syncthreads();\n";
  for (int a : summed)
    os << "  for (kiln_i64 j = threadIdx.y * blockDim.x + threadIdx.x; j < cols;\n"
       << "       j += (kiln_i64)blockDim.x * blockDim.y) {\n"
       << "    double s = kiln_cw" << a << "[j];\n"
       << "    for (unsigned w = 1; w < blockDim.y; ++w) s = s + kiln_cw" << a
       << "[w * wrow + j];\n"
       << "    p" << a << "[part * cols + j] = s;\n"
       << "  }\n";
  os << "  __syncthreads();\n"
     << "  }\n"
     << "  } else {\n"
     << "  const kiln_i64 inner = cols;\n"
     << "  for (kiln_i64 part = blockIdx.x; part < parts; part += gridDim.x) {\n";
  partial_rows(
      "KILN_GLOBAL", [](int a) { return str("p", a, " + part * inner"); }, "inner");
  os << "  const kiln_i64 end = rows * (part + 1) / parts;\n"
     << "  for (kiln_i64 row = rows * part / parts; row < end; ++row) {\n"
     << "    const bool kiln_live = true;\n"
     << one << "  }\n  }\n  }\n}\n";
}

}  // namespace

std::string print_row_kernel(const Kernel& k, const std::string& symbol, int max_unroll, int held,
                             const RowLoops& loops) {
  KILN_ASSERT(max_unroll >= 1 && held >= 0, "row kernel unroll ", max_unroll, ", held ", held);
  const kir::detail::Analysis an = kir::detail::analyze(k);
  const bool quads = loops.quads && quad_rows(k, an);
  std::ostringstream os;
  os << kernel_head(k, symbol, "rows");
  std::vector<int> summed;  // column sums: a part of rows per block (see gpu_printer.h)
  for (const kir::Store& s : k.stores)
    if (s.accumulate) summed.push_back(s.arg);
  // Local memory at the kernel's top scope (OpenCL requires it there): the
  // per-warp partials, and the emulated device's shuffle scratch.
  os << "  KILN_SHUFFLE_SCRATCH;\n";
  for (size_t r = 0; r < k.reductions.size(); ++r)
    os << "  __shared__ " << acc_type(k.reductions[r]) << " kiln_sh" << r << "[32];\n";
  // One row's work (row, inner and kiln_live in scope), printed once and
  // placed in each loop below.
  std::ostringstream one;
  {
    std::ostream& os = one;
    if (k.rank > 1) {
      os << "    kiln_i64 rr = row;\n";
      for (int d = k.rank - 2; d > 0; --d)
        os << "    const kiln_i64 c" << d << " = rr % s" << d << "; rr /= s" << d << ";\n";
      os << "    const kiln_i64 c0 = rr;\n";
    }
    for (size_t a = 0; a < k.args.size(); ++a) {
      std::string b = "0";
      for (int d = 0; d + 1 < k.rank; ++d)
        if (k.args[a].dense[static_cast<size_t>(d)])
          b = b == "0" ? str("c", d) : str("(", b, ") * s", d, " + c", d);
      os << "    const kiln_i64 b" << a << " = " << b << ";\n";
    }
    if (quads) {  // the quad loops' float4 path: every row pointer 16-byte aligned
      os << "    const bool kiln_al = ((0";
      for (size_t a = 0; a < k.args.size(); ++a)
        if (k.args[a].dense[static_cast<size_t>(k.rank - 1)])
          os << " | (kiln_u64)(p" << a << " + b" << a << " * inner)";
      os << ") & 15) == 0;\n";
    }
    for (size_t r = 0; r < k.reductions.size(); ++r)
      os << "    " << compute_type(k.reductions[r].dtype) << " red" << r << ";\n";
    if (held > 0) {
      os << "    if (KILN_HELD_ROWS && inner <= " << held << " * (kiln_i64)blockDim.x) {\n";
      held_body(os, k, an, held, quads);
      os << "    } else {\n";
    }
    row_body(os, k, an, max_unroll, quads, loops.hoist);
    if (held > 0) os << "    }\n";
  }
  if (summed.empty()) {
    // A block's warps (threadIdx.y) take consecutive rows: one block per row
    // when blockDim.y is 1, one warp per row in warp rows (row_block). A warp
    // past the last row runs an empty row (inner 0, no stores) so that every
    // thread meets the block's barriers (the emulated shuffles').
    os << "  for (kiln_i64 rb = (kiln_i64)blockIdx.x * blockDim.y; rb < rows;\n"
       << "       rb += (kiln_i64)gridDim.x * blockDim.y) {\n"
       << "    const bool kiln_live = rb + threadIdx.y < rows;\n"
       << "    const kiln_i64 row = kiln_live ? rb + threadIdx.y : rows - 1;\n"
       << "    const kiln_i64 inner = kiln_live ? s" << k.rank - 1 << " : 0;\n"
       << one.str() << "  }\n}\n";
    return os.str();
  }
  column_rows(os, k, summed, one.str());
  return os.str();
}

}  // namespace kiln::cuda::detail
