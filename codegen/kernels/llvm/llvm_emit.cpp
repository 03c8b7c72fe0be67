// Kernel IR -> LLVM IR text. Layout of the generated function:
//
//   entry:  load sizes and argument pointers, derive per-arg strides, guard
//   setup:  decompose `begin` into a row multi-index (and a column, pointwise)
//   rowhdr: per-row offsets, row-level loads and values, row stores
//           pointwise:  one inner loop over the row's columns in [begin, end)
//           reductions: one loop per phase (accumulators in phis; f32 sums
//                       in float chunks when reassociated), then the final
//                       elementwise store loop; expensive values a phase loop
//                       computes are stored once into an output row the final
//                       loop reads back (plan_saved)
//   latch:  odometer increment of the row index, loop or exit
//
// Inner loops are plain scalar loops over unit-or-zero strides; every memory
// access carries alias-scope metadata (one scope per argument) so the loop
// vectorizer needs no run-time alias checks. That claim holds because the
// executor never lets an output overlap an input except exactly in place
// (same element), and every load of an element precedes its store. Row-level
// values (loads broadcast along the inner dim, and what depends only on them)
// are computed once per row, before the loops that read them.
//
// Semantics follow the eager kernels (runtime/src/ops/scalar_ops.h): no
// fast-math except on reductions when Kernel::reassoc: `reassoc nsz` sums
// (partial sums in vector lanes; f32 sums in float per chunk of the row, chunks
// added in double; without reassoc f32 sums accumulate in double as eager
// does), and `nnan nsz` maxnum/minnum with a separate NaN flag that restores
// NaN propagation; also, in kernels with reductions, `arcp` divisions, so a
// division by a value that is invariant in the loop (softmax's row sum)
// becomes one reciprocal per row and a multiply per element (within an ulp of
// the division). Pointwise kernels divide exactly, so they equal the
// interpreter bit for bit. f16/bf16 values live in float registers and are
// rounded after every op.
#include "kernels/llvm/llvm_emit.h"

#include <bit>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "kernels/kernel_ir_util.h"
#include "kernels/llvm/llvm_emit_ops.h"
#include "kiln/error.h"

namespace kiln::kir {

namespace {

using detail::is_f;
using detail::is_signed_int;

std::string ty(DType t) {
  return detail::ir_type(t);
}
std::string mem_ty(DType t) {
  return detail::ir_mem_type(t);
}
std::string literal(DType t, double v) {
  return detail::ir_literal(t, v);
}

// Lanes per vector for the inner loops: the register width over the widest
// element a loop computes or accesses, LLVM's own bound, except that f16/bf16
// count as the float they compute in, and neither the double arithmetic inside
// the f32 math functions (pow, erf, log1p, sin, cos) nor a column sum's f64
// accumulator (the value it adds and its buffer) counts. LLVM's bound would
// count them and run those f32 loops at half width on 256-bit hosts (znver3:
// <4 x float>; GELU's backward with its bias gradient ran its erf and exp at 4
// lanes); at full width their float parts run twice as wide and the double
// parts as fast as before. A column's sum adds in row order at any width.
int loop_lanes(const Kernel& k, const detail::Analysis& an, int vector_bits) {
  auto bits = [](DType t) {
    return t == DType::f16 || t == DType::bf16 ? 32 : static_cast<int>(dtype_size(t)) * 8;
  };
  std::vector<char> accumulated_expr(k.exprs.size(), 0), accumulator(k.args.size(), 0);
  for (const Store& st : k.stores)
    if (st.accumulate) accumulated_expr[static_cast<size_t>(st.expr)] = accumulator[st.arg] = 1;
  int widest = 8;
  for (size_t i = 0; i < k.exprs.size(); ++i)
    if (an.inner[i] && !accumulated_expr[i]) widest = std::max(widest, bits(k.exprs[i].dtype));
  for (size_t i = 0; i < k.args.size(); ++i)
    if (k.args[i].dense.back() && !accumulator[i]) widest = std::max(widest, bits(k.args[i].dtype));
  return vector_bits / widest;
}

class Emitter : public detail::IrText {
 public:
  Emitter(const Kernel& k, std::string symbol, int vector_bits)
      : k_(k),
        an_(detail::analyze(k)),
        lanes_(loop_lanes(k, an_, vector_bits)),
        vector_bits_(vector_bits),
        sym_(std::move(symbol)),
        row_(k.exprs.size()),
        loop_(k.exprs.size()),
        red_(k.reductions.size()) {
    arcp_ = k.reassoc && k.has_reductions();  // pointwise kernels stay bit-exact
  }

  std::string run() {
    entry();
    if (k_.has_reductions())
      rows();
    else
      pointwise();
    return module();
  }

 private:
  void block(const std::string& l) {
    body_ += l + ":\n";
    cur_ = l;
  }

  std::string size(int d) const { return str("%sz", d); }
  // ---- structure ----
  void entry() {
    block("entry");
    for (int d = 0; d < k_.rank; ++d) {
      std::string p =
          d == 0 ? "%sizes" : emit(str("getelementptr inbounds i64, ptr %sizes, i64 ", d));
      line(str(size(d), " = load i64, ptr ", p));
    }
    const size_t na = k_.args.size();
    ptr_.resize(na);
    stride_.assign(na, std::vector<std::string>(static_cast<size_t>(k_.rank), "0"));
    for (size_t a = 0; a < na; ++a) {
      std::string p =
          a == 0 ? "%ptrs" : emit(str("getelementptr inbounds ptr, ptr %ptrs, i64 ", a));
      ptr_[a] = str("%p", a);
      line(str(ptr_[a], " = load ptr, ptr ", p));
      std::string run = "1";
      for (int d = k_.rank - 1; d >= 0; --d) {
        if (!k_.args[a].dense[static_cast<size_t>(d)]) continue;
        stride_[a][static_cast<size_t>(d)] = run;
        run = run == "1" ? size(d) : emit(str("mul i64 ", run, ", ", size(d)));
      }
    }
    // Nothing to do for an empty range or an empty leading dim (no division by zero below).
    std::string bad = emit("icmp sge i64 %begin, %end");
    const int dims = k_.has_reductions() ? k_.rank - 1 : k_.rank;
    for (int d = 0; d < dims; ++d) {
      std::string z = emit(str("icmp sle i64 ", size(d), ", 0"));
      bad = emit(str("or i1 ", bad, ", ", z));
    }
    line(str("br i1 ", bad, ", label %exit, label %setup"));
  }

  // Splits `row` into the leading-dim indices (idx[d] for d < rank-1).
  std::vector<std::string> decompose(std::string row) {
    std::vector<std::string> idx(static_cast<size_t>(std::max(0, k_.rank - 1)));
    for (int d = k_.rank - 2; d >= 0; --d) {
      if (d == 0) {
        idx[0] = row;
      } else {
        idx[static_cast<size_t>(d)] = emit(str("urem i64 ", row, ", ", size(d)));
        row = emit(str("udiv i64 ", row, ", ", size(d)));
      }
    }
    return idx;
  }

  // Row header: phis of the leading indices, per-arg row offsets.
  void row_header(const std::vector<std::string>& idx0) {
    for (int d = 0; d + 1 < k_.rank; ++d)
      line(str("%i", d, " = phi i64 [ ", idx0[static_cast<size_t>(d)], ", %setup ], [ %i", d,
               ".next, %latch ]"));
    rowoff_.assign(k_.args.size(), "0");
    for (size_t a = 0; a < k_.args.size(); ++a) {
      std::string off = "0";
      for (int d = 0; d + 1 < k_.rank; ++d) {
        const std::string& st = stride_[a][static_cast<size_t>(d)];
        if (st == "0") continue;
        std::string term = st == "1" ? str("%i", d) : emit(str("mul i64 %i", d, ", ", st));
        off = off == "0" ? term : emit(str("add i64 ", off, ", ", term));
      }
      rowoff_[a] = off;
    }
  }

  // Latch: odometer increment of the leading indices.
  void odometer() {
    std::string carry;
    for (int d = k_.rank - 2; d >= 0; --d) {
      std::string inc;
      if (carry.empty()) {
        inc = emit(str("add i64 %i", d, ", 1"));
      } else {
        std::string c = emit(str("zext i1 ", carry, " to i64"));
        inc = emit(str("add i64 %i", d, ", ", c));
      }
      if (d == 0) {
        line(str("%i0.next = add i64 ", inc, ", 0"));
      } else {
        carry = emit(str("icmp eq i64 ", inc, ", ", size(d)));
        line(str("%i", d, ".next = select i1 ", carry, ", i64 0, i64 ", inc));
      }
    }
  }

  void pointwise() {
    block("setup");
    const std::string inner = size(k_.rank - 1);
    const std::string row0 = emit(str("udiv i64 %begin, ", inner));
    const std::string col0 = emit(str("urem i64 %begin, ", inner));
    const std::vector<std::string> idx0 = decompose(row0);
    line("br label %rowhdr");
    block("rowhdr");
    line("%flat = phi i64 [ %begin, %setup ], [ %flat.next, %latch ]");
    line(str("%cs = phi i64 [ ", col0, ", %setup ], [ 0, %latch ]"));
    row_header(idx0);
    const std::string rem = emit("sub i64 %end, %flat");
    const std::string avail = emit(str("sub i64 ", inner, ", %cs"));
    const std::string lt = emit(str("icmp ult i64 ", rem, ", ", avail));
    line(str("%n = select i1 ", lt, ", i64 ", rem, ", i64 ", avail));
    const std::string ce = emit("add i64 %cs, %n");
    std::vector<int> roots;
    for (const Store& s : k_.stores) roots.push_back(s.expr);
    const std::vector<char> need = detail::needed(k_, roots);
    materialize_row(need);
    const std::string pre = cur_;
    line("br label %body");
    block("body");
    begin_loop();
    j_ = "%j";
    line(str("%j = phi i64 [ %cs, %", pre, " ], [ %j.next, %body ]"));
    for (const Store& s : k_.stores) store(s);
    line("%j.next = add nuw nsw i64 %j, 1");
    const std::string more = emit(str("icmp ult i64 %j.next, ", ce));
    line(str("br i1 ", more, ", label %body, label %latch", loop_md()));
    end_loop();
    block("latch");
    line("%flat.next = add i64 %flat, %n");
    const std::string done = emit("icmp sge i64 %flat.next, %end");
    odometer();
    line(str("br i1 ", done, ", label %exit, label %rowhdr"));
    block("exit");
    line("ret void");
  }

  void rows() {
    plan_saved();
    block("setup");
    const std::vector<std::string> idx0 = decompose("%begin");
    line(str("%has = icmp sgt i64 ", size(k_.rank - 1), ", 0"));
    line("br label %rowhdr");
    block("rowhdr");
    line("%row = phi i64 [ %begin, %setup ], [ %row.next, %latch ]");
    row_header(idx0);
    row_stores(detail::Analysis::kRowStart);
    for (int p = 0; p < an_.num_phases; ++p) phase(p);
    std::vector<int> roots;
    for (size_t i = 0; i < k_.stores.size(); ++i)
      if (an_.store_after[i] == -1) roots.push_back(k_.stores[i].expr);
    if (!roots.empty()) {
      materialize_row(detail::needed(k_, roots));
      const std::string body = label("final"), exit = label("final.exit"), pre = cur_;
      line(str("br i1 %has, label %", body, ", label %", exit));
      block(body);
      begin_loop(an_.num_phases);
      j_ = "%j" + body;
      line(str(j_, " = phi i64 [ 0, %", pre, " ], [ %j.next", body, ", %", body, " ]"));
      // Saved values first: the stores below may overwrite their scratch elements.
      for (size_t e = 0; e < saved_.size(); ++e)
        if (saved_[e] >= 0) value(static_cast<int>(e));
      for (size_t i = 0; i < k_.stores.size(); ++i)
        if (an_.store_after[i] == -1) store(k_.stores[i]);
      loop_back(body, exit);
      end_loop();
      block(exit);
    }
    line("br label %latch");
    block("latch");
    line("%row.next = add i64 %row, 1");
    const std::string done = emit("icmp sge i64 %row.next, %end");
    odometer();
    line(str("br i1 ", done, ", label %exit, label %rowhdr"));
    block("exit");
    line("ret void");
  }

  // %j.next<body> and the back edge of a loop over [0, inner).
  void loop_back(const std::string& body, const std::string& exit) {
    line(str("%j.next", body, " = add nuw nsw i64 ", j_, ", 1"));
    const std::string more = emit(str("icmp slt i64 %j.next", body, ", ", size(k_.rank - 1)));
    line(str("br i1 ", more, ", label %", body, ", label %", exit, loop_md()));
  }

  // One loop over the row computing phase p's reductions. Reassociated f32
  // sums accumulate in float (twice the vector width of double, no
  // conversions) over chunks of kSumChunk elements, each chunk's sum added to
  // a double: the error stays that of a short float sum however long the row.
  void phase(int p) {
    std::vector<size_t> rs;
    std::vector<int> roots;
    bool chunks = false;
    for (size_t r = 0; r < k_.reductions.size(); ++r)
      if (k_.reductions[r].phase == p) {
        rs.push_back(r);
        roots.push_back(k_.reductions[r].expr);
        chunks = chunks || chunked(k_.reductions[r]);
      }
    if (rs.empty()) return;
    materialize_row(detail::needed(k_, roots));
    const std::string outer = label("phase"), body = label("phase.body"),
                      done = label("phase.chunk"), exit = label("phase.exit"), pre = cur_;
    const std::string n = size(k_.rank - 1), c = "%c" + outer, cend = "%cend" + outer;
    // Per reduction: the accumulator across chunks (oacc/onext) and inside the
    // loop (acc/next); NaN-tracked max/min also carry an i1 "saw a NaN" flag.
    std::vector<std::string> init, oacc, onext, acc, next, noacc, nacc, nnext;
    for (size_t r : rs) {
      init.push_back(acc_init(k_.reductions[r]));
      oacc.push_back(tmp());
      acc.push_back(tmp());
      next.push_back(tmp());
      // An unchunked accumulator carries its loop value straight through.
      onext.push_back(chunked(k_.reductions[r]) ? tmp() : next.back());
      const bool nt = nan_tracked(k_.reductions[r]);
      noacc.push_back(nt ? tmp() : "");
      nacc.push_back(nt ? tmp() : "");
      nnext.push_back(nt ? tmp() : "");
    }
    line(str("br i1 %has, label %", outer, ", label %", exit));
    block(outer);
    line(str(c, " = phi i64 [ 0, %", pre, " ], [ ", cend, ", %", done, " ]"));
    for (size_t i = 0; i < rs.size(); ++i) {
      line(str(oacc[i], " = phi ", acc_ty(k_.reductions[rs[i]]), " [ ", init[i], ", %", pre,
               " ], [ ", onext[i], ", %", done, " ]"));
      if (!nacc[i].empty())
        line(str(noacc[i], " = phi i1 [ false, %", pre, " ], [ ", nnext[i], ", %", done, " ]"));
    }
    if (chunks) {
      const std::string ce = emit(str("add i64 ", c, ", ", kSumChunk));
      const std::string lt = emit(str("icmp slt i64 ", ce, ", ", n));
      line(str(cend, " = select i1 ", lt, ", i64 ", ce, ", i64 ", n));
    } else {
      line(str(cend, " = add i64 ", n, ", 0"));
    }
    line(str("br label %", body));
    block(body);
    begin_loop(p);
    j_ = "%j" + body;
    line(str(j_, " = phi i64 [ ", c, ", %", outer, " ], [ %j.next", body, ", %", body, " ]"));
    for (size_t i = 0; i < rs.size(); ++i) {
      const Reduction& r = k_.reductions[rs[i]];
      const std::string start = chunked(r) ? "0.0" : oacc[i];
      line(str(acc[i], " = phi ", chunk_ty(r), " [ ", start, ", %", outer, " ], [ ", next[i], ", %",
               body, " ]"));
      if (!nacc[i].empty())
        line(str(nacc[i], " = phi i1 [ ", noacc[i], ", %", outer, " ], [ ", nnext[i], ", %", body,
                 " ]"));
    }
    for (size_t i = 0; i < rs.size(); ++i)
      acc_step(k_.reductions[rs[i]], acc[i], next[i], nacc[i], nnext[i]);
    // Values later loops read back instead of recomputing them.
    for (size_t e = 0; e < saved_.size(); ++e)
      if (saved_[e] >= 0 && first_loop_[e] == p) store_value(saved_[e], value(static_cast<int>(e)));
    line(str("%j.next", body, " = add nuw nsw i64 ", j_, ", 1"));
    const std::string more = emit(str("icmp slt i64 %j.next", body, ", ", cend));
    line(str("br i1 ", more, ", label %", body, ", label %", done, loop_md()));
    end_loop();
    block(done);
    for (size_t i = 0; i < rs.size(); ++i) {
      const Reduction& r = k_.reductions[rs[i]];
      if (!chunked(r)) continue;
      const std::string w = emit(str("fpext float ", next[i], " to double"));
      line(str(onext[i], " = fadd double ", oacc[i], ", ", w));
    }
    const std::string again = emit(str("icmp slt i64 ", cend, ", ", n));
    line(str("br i1 ", again, ", label %", outer, ", label %", exit));
    block(exit);
    std::vector<std::string> out, saw(rs.size());
    for (size_t i = 0; i < rs.size(); ++i) {
      out.push_back(emit(str("phi ", acc_ty(k_.reductions[rs[i]]), " [ ", init[i], ", %", pre,
                             " ], [ ", onext[i], ", %", done, " ]")));
      if (!nacc[i].empty())
        saw[i] = emit(str("phi i1 [ false, %", pre, " ], [ ", nnext[i], ", %", done, " ]"));
    }
    for (size_t i = 0; i < rs.size(); ++i)  // after every phi of the block
      if (!saw[i].empty())
        out[i] = sel(saw[i], acc_ty(k_.reductions[rs[i]]), "0x7FF8000000000000", out[i]);
    for (size_t i = 0; i < rs.size(); ++i) red_[rs[i]] = acc_finish(k_.reductions[rs[i]], out[i]);
    row_stores(p);
  }

  void row_stores(int after) {
    std::vector<int> roots;
    for (size_t i = 0; i < k_.stores.size(); ++i)
      if (an_.store_after[i] == after) roots.push_back(k_.stores[i].expr);
    if (roots.empty()) return;
    materialize_row(detail::needed(k_, roots));
    for (size_t i = 0; i < k_.stores.size(); ++i)
      if (an_.store_after[i] == after) store(k_.stores[i]);
  }

  // Computes, at the current point of the row, the row-level values in `need`.
  void materialize_row(const std::vector<char>& need) {
    for (size_t i = 0; i < need.size(); ++i)
      if (need[i] && !an_.inner[i]) value(static_cast<int>(i));
  }
  // The back edge's loop ID: each inner loop asks for lanes_ lanes (module()).
  std::string loop_md() {
    if (lanes_ <= 1) return "";
    return str(", !llvm.loop !", loop_md_base() + 1 + num_loops_++);
  }
  size_t loop_md_base() const { return 1 + 3 * k_.args.size(); }  // after the alias scopes

  void begin_loop(int id = 0) {
    in_loop_ = true;
    loop_id_ = id;
    std::fill(loop_.begin(), loop_.end(), std::string());
  }

  // Expensive inner values (with a transcendental) that a phase loop computes
  // and the final loop needs again are stored once, into the row of an output
  // that only the final loop writes (e.g. softmax's exp(x - max), stored by the
  // sum loop, then divided in place), so each element pays one exp. The final
  // loop reads every saved element before it stores anything, and the output
  // has the value's dtype (exact round trip). Without a free output of that
  // dtype the value is recomputed.
  void plan_saved() {
    const size_t n = k_.exprs.size();
    saved_.assign(n, -1);
    first_loop_.assign(n, -1);
    const int final_id = an_.num_phases;
    std::vector<char> expensive(n, 0);
    for (size_t i = 0; i < n; ++i) {
      const Expr& e = k_.exprs[i];
      if (e.kind != ExprKind::kOp || !an_.inner[i]) continue;
      expensive[i] = detail::is_float_math(e.op);
      int ops[3];
      const int m = detail::operands(e, ops);
      for (int j = 0; j < m; ++j) expensive[i] |= expensive[static_cast<size_t>(ops[j])];
    }
    // The first loop computing each inner value.
    for (int p = 0; p <= final_id; ++p) {
      std::vector<int> roots;
      if (p < final_id) {
        for (const Reduction& r : k_.reductions)
          if (r.phase == p) roots.push_back(r.expr);
      } else {
        for (size_t i = 0; i < k_.stores.size(); ++i)
          if (an_.store_after[i] == -1) roots.push_back(k_.stores[i].expr);
      }
      const std::vector<char> need = detail::needed(k_, roots);
      for (size_t i = 0; i < n; ++i)
        if (need[i] && an_.inner[i] && first_loop_[i] < 0) first_loop_[i] = p;
    }
    // Walk the final loop's values from its stores down; stop at the first
    // expensive value an earlier loop already computed.
    std::vector<char> reach(n, 0), used_arg(k_.args.size(), 0);
    for (size_t i = 0; i < k_.stores.size(); ++i)
      if (an_.store_after[i] == -1) reach[static_cast<size_t>(k_.stores[i].expr)] = 1;
    for (size_t i = n; i-- > 0;) {
      if (!reach[i] || !an_.inner[i]) continue;
      if (expensive[i] && first_loop_[i] < final_id) {
        const int a = scratch_output(static_cast<int>(i), used_arg);
        if (a >= 0) {
          saved_[i] = a;
          used_arg[static_cast<size_t>(a)] = 1;
          continue;
        }
      }
      int ops[3];
      const int m = detail::operands(k_.exprs[i], ops);
      for (int j = 0; j < m; ++j) reach[static_cast<size_t>(ops[j])] = 1;
    }
  }

  // An unused output of e's dtype that only the final loop writes (a plain
  // store, dense along the row), or -1.
  int scratch_output(int e, const std::vector<char>& used_arg) const {
    for (size_t i = 0; i < k_.stores.size(); ++i) {
      const Store& s = k_.stores[i];
      // A column sum's partials are not row storage: they hold the sums so far.
      if (an_.store_after[i] != -1 || s.accumulate || used_arg[static_cast<size_t>(s.arg)])
        continue;
      if (k_.args[static_cast<size_t>(s.arg)].dtype == k_.exprs[static_cast<size_t>(e)].dtype)
        return s.arg;
    }
    return -1;
  }
  void end_loop() { in_loop_ = false; }

  // ---- reductions ----
  // Elements per chunk of a chunked sum (phase()).
  static constexpr int kSumChunk = 2048;
  // A reassociated f32 sum: float partial sums per chunk, chunks added in double.
  bool chunked(const Reduction& r) const {
    return r.op == OpId::sum && r.dtype == DType::f32 && k_.reassoc;
  }
  // A reassociated float max/min: fast max plus a NaN flag (acc_step).
  bool nan_tracked(const Reduction& r) const {
    return r.op != OpId::sum && is_f(r.dtype) && k_.reassoc;
  }
  // Accumulator type inside a phase loop (the chunk's).
  std::string chunk_ty(const Reduction& r) const { return chunked(r) ? "float" : acc_ty(r); }
  // Accumulator type: eager's (f32 sums in double, f16/bf16 in float, ints in i64).
  std::string acc_ty(const Reduction& r) const {
    if (r.op == OpId::sum) {
      if (r.dtype == DType::f32 || r.dtype == DType::f64) return "double";
      if (is_f(r.dtype)) return "float";
      return "i64";
    }
    return ty(r.dtype);
  }
  std::string acc_init(const Reduction& r) const {
    if (r.op == OpId::sum) return is_f(r.dtype) ? "0.0" : "0";
    const bool mx = r.op == OpId::max;
    switch (r.dtype) {
      case DType::i64:
        return mx ? "-9223372036854775808" : "9223372036854775807";
      case DType::i32:
        return mx ? "-2147483648" : "2147483647";
      case DType::u8:
        return mx ? "0" : "-1";
      case DType::b8:
        return mx ? "false" : "true";
      default:
        return mx ? "0xFFF0000000000000" : "0x7FF0000000000000";
    }
  }
  void acc_step(const Reduction& r, const std::string& acc, const std::string& next,
                const std::string& nan_acc, const std::string& nan_next) {
    const DType xt = k_.exprs[static_cast<size_t>(r.expr)].dtype;
    std::string x = value(r.expr);
    const std::string at = chunk_ty(r);
    if (r.op == OpId::sum) {
      if (is_f(xt)) {
        if (at != ty(xt)) x = emit(str("fpext ", ty(xt), " ", x, " to ", at));
        line(str(next, " = fadd ", k_.reassoc ? "reassoc nsz " : "", at, " ", acc, ", ", x));
      } else {
        if (xt != DType::i64)
          x = emit(str(is_signed_int(xt) ? "sext " : "zext ", ty(xt), " ", x, " to i64"));
        line(str(next, " = add i64 ", acc, ", ", x));
      }
      return;
    }
    const bool mx = r.op == OpId::max;
    if (is_f(xt)) {
      if (k_.reassoc) {
        // maxnum/minnum assuming no NaN (one vmaxps; lane-wise partials) plus a
        // separate "saw a NaN" flag that makes the result NaN after the loop
        // (the nnan result is poison only when that flag is set).
        const std::string fn =
            str(mx ? "llvm.maxnum." : "llvm.minnum.", at == "double" ? "f64" : "f32");
        declare(str("declare ", at, " @", fn, "(", at, ", ", at, ")"));
        line(
            str(next, " = call nnan nsz ", at, " @", fn, "(", at, " ", acc, ", ", at, " ", x, ")"));
        const std::string u = emit(str("fcmp uno ", at, " ", x, ", 0.0"));
        line(str(nan_next, " = or i1 ", nan_acc, ", ", u));
      } else {  // eager's sequential rule: NaN is sticky, ties keep the first
        const std::string c = emit(str("fcmp ", mx ? "ogt " : "olt ", at, " ", x, ", ", acc));
        const std::string n = emit(str("fcmp uno ", at, " ", x, ", ", x));
        const std::string t = emit(str("or i1 ", c, ", ", n));
        line(str(next, " = select i1 ", t, ", ", at, " ", x, ", ", at, " ", acc));
      }
      return;
    }
    const char* pred = is_signed_int(xt) ? (mx ? "sgt" : "slt") : (mx ? "ugt" : "ult");
    const std::string c = emit(str("icmp ", pred, " ", at, " ", x, ", ", acc));
    line(str(next, " = select i1 ", c, ", ", at, " ", x, ", ", at, " ", acc));
  }
  std::string acc_finish(const Reduction& r, const std::string& v) {
    if (r.op != OpId::sum) return v;
    const std::string at = acc_ty(r);
    switch (r.dtype) {
      case DType::f64:
      case DType::i64:
        return v;
      case DType::f32:
        return emit(str("fptrunc double ", v, " to float"));
      case DType::f16:
      case DType::bf16:
        return round(r.dtype, v);
      case DType::b8:
        return emit(str("icmp ne i64 ", v, ", 0"));
      default:
        return emit(str("trunc i64 ", v, " to ", ty(r.dtype)));
    }
  }

  // ---- memory ----
  std::string metadata(size_t arg) const {
    if (k_.args.size() < 2) return "";
    const size_t n = k_.args.size();
    return str(", !alias.scope !", 1 + n + arg, ", !noalias !", 1 + 2 * n + arg);
  }
  std::string address(int arg) {
    const auto a = static_cast<size_t>(arg);
    std::string off = rowoff_[a];
    if (!detail::row_arg(k_, arg)) {
      KILN_ASSERT(in_loop_, "inner-dim access outside a loop");
      off = off == "0" ? j_ : emit(str("add i64 ", off, ", ", j_));
    }
    return emit(
        str("getelementptr inbounds ", mem_ty(k_.args[a].dtype), ", ptr ", ptr_[a], ", i64 ", off));
  }
  std::string load(int arg) {
    const DType t = k_.args[static_cast<size_t>(arg)].dtype;
    const std::string p = address(arg);
    const std::string v =
        emit(str("load ", mem_ty(t), ", ptr ", p, metadata(static_cast<size_t>(arg))));
    switch (t) {
      case DType::f16:
        return emit(str("fpext half ", v, " to float"));
      case DType::bf16: {
        const std::string w = emit(str("zext i16 ", v, " to i32"));
        const std::string s = emit(str("shl i32 ", w, ", 16"));
        return emit(str("bitcast i32 ", s, " to float"));
      }
      case DType::b8:
        return emit(str("icmp ne i8 ", v, ", 0"));
      default:
        return v;
    }
  }
  void store(const Store& s) {
    if (!s.accumulate) return store_value(s.arg, value(s.expr));
    // A column sum (f64): this launch's partial for the element's column.
    const std::string v = value(s.expr), p = address(s.arg);
    const std::string md = metadata(static_cast<size_t>(s.arg));
    const std::string old = emit(str("load double, ptr ", p, md));
    const std::string sum = emit(str("fadd double ", old, ", ", v));
    line(str("store double ", sum, ", ptr ", p, md));
  }
  void store_value(int arg, std::string v) {
    const DType t = k_.args[static_cast<size_t>(arg)].dtype;
    switch (t) {
      case DType::f16:
        v = emit(str("fptrunc float ", v, " to half"));
        break;
      case DType::bf16: {
        const std::string b = emit(str("bitcast float ", v, " to i32"));
        const std::string h = emit(str("lshr i32 ", b, ", 16"));
        v = emit(str("trunc i32 ", h, " to i16"));
        break;
      }
      case DType::b8:
        v = emit(str("zext i1 ", v, " to i8"));
        break;
      default:
        break;
    }
    const std::string p = address(arg);
    line(str("store ", mem_ty(t), " ", v, ", ptr ", p, metadata(static_cast<size_t>(arg))));
  }

  // ---- values ----
  std::string value(int e) {
    const auto i = static_cast<size_t>(e);
    std::string& slot = an_.inner[i] ? loop_[i] : row_[i];
    if (!slot.empty()) return slot;
    KILN_ASSERT(an_.inner[i] || !in_loop_, "row-level %", e, " was not computed before the loop");
    const Expr& x = k_.exprs[i];
    std::string v;
    if (in_loop_ && !saved_.empty() && saved_[i] >= 0 && loop_id_ > first_loop_[i]) {
      slot = load(saved_[i]);  // stored by an earlier loop of this row
      return slot;
    }
    switch (x.kind) {
      case ExprKind::kLoad:
        v = load(x.arg);
        break;
      case ExprKind::kConst:
        v = literal(x.dtype, x.value);
        break;
      case ExprKind::kReduced:
        v = red_[static_cast<size_t>(x.arg)];
        KILN_ASSERT(!v.empty(), "reduction r", x.arg, " read before its phase ended");
        break;
      case ExprKind::kOp:
        v = op(x);
        break;
      case ExprKind::kPrim: {
        int ops[3];
        const int m = detail::operands(x, ops);
        const std::string a = value(ops[0]);
        const std::string b = m > 1 ? value(ops[1]) : "", c = m > 2 ? value(ops[2]) : "";
        v = prim(x, k_.exprs[static_cast<size_t>(ops[0])].dtype, a, b, c);
        break;
      }
    }
    slot = v;
    return v;
  }

  std::string op(const Expr& e);

  const Kernel& k_;
  detail::Analysis an_;
  int lanes_;        // vectorization width every inner loop asks for (<= 1: none)
  int vector_bits_;  // the target's width (0: LLVM's own choice)
  size_t num_loops_ = 0;
  std::string sym_;
  std::string cur_;  // the current block
  bool in_loop_ = false;
  int loop_id_ = 0;  // the current loop: phase p, or num_phases for the final loop
  std::string j_;    // the current loop's column index
  // Per expr: the output arg an earlier loop stores it into (-1: recomputed),
  // and the first loop that computes it (plan_saved).
  std::vector<int> saved_, first_loop_;
  std::vector<std::string> row_, loop_, red_;
  std::vector<std::string> ptr_, rowoff_;
  std::vector<std::vector<std::string>> stride_;

  std::string module() const;
};

std::string Emitter::op(const Expr& e) {
  int ops[3];
  const int m = detail::operands(e, ops);
  const std::string a = value(ops[0]);
  const std::string b = m > 1 ? value(ops[1]) : "", c = m > 2 ? value(ops[2]) : "";
  return scalar_op(e.op, k_.exprs[static_cast<size_t>(ops[0])].dtype, e.dtype, a, b, c);
}

std::string Emitter::module() const {
  std::string m = str("; kiln kernel ", k_.name, "\n");
  m += str("define void @", sym_,
           "(i64 %begin, i64 %end, ptr noalias nocapture readonly %ptrs, "
           "ptr noalias nocapture readonly %sizes) #1 {\n",
           body_, "}\n\n");
  for (const auto& [name, text] : helpers_) m += text + "\n";
  for (const std::string& d : decls_) m += d + " #2\n";
  // The width the loops ask for is also the backend's preferred width, else
  // LLVM splits 512-bit vectors in two on CPUs it tunes down to 256 bits.
  m += vector_bits_ > 0
           ? str("attributes #1 = { nounwind \"prefer-vector-width\"=\"", vector_bits_, "\" }\n")
           : std::string("attributes #1 = { nounwind }\n");
  m += "attributes #2 = { nounwind willreturn memory(none) }\n";
  // One alias domain; one scope per argument; each access is in its scope and
  // does not alias the others.
  const size_t n = k_.args.size();
  if (n >= 2) {
    m += "!0 = distinct !{!0, !\"kiln\"}\n";
    for (size_t a = 0; a < n; ++a) m += str("!", 1 + a, " = distinct !{!", 1 + a, ", !0}\n");
    for (size_t a = 0; a < n; ++a) m += str("!", 1 + n + a, " = !{!", 1 + a, "}\n");
    for (size_t a = 0; a < n; ++a) {
      m += str("!", 1 + 2 * n + a, " = !{");
      bool first = true;
      for (size_t o = 0; o < n; ++o) {
        if (o == a) continue;
        m += str(first ? "!" : ", !", 1 + o);
        first = false;
      }
      m += "}\n";
    }
  }
  // One distinct ID per inner loop, all asking for the same width.
  const size_t w = loop_md_base();
  if (num_loops_ > 0) m += str("!", w, " = !{!\"llvm.loop.vectorize.width\", i32 ", lanes_, "}\n");
  for (size_t l = 0; l < num_loops_; ++l)
    m += str("!", w + 1 + l, " = distinct !{!", w + 1 + l, ", !", w, "}\n");
  return m;
}

}  // namespace

std::string emit_llvm(const Kernel& k, const std::string& symbol, int vector_bits) {
  return Emitter(k, symbol, vector_bits).run();
}

}  // namespace kiln::kir
