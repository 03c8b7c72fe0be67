// operator<< for Tensor, following torch/_tensor_str.py (default print
// options: precision 4, linewidth 80, threshold 1000, edgeitems 3) so output
// reads like PyTorch's: one shared format per tensor, right-aligned columns,
// "..." summaries, and dtype / requires_grad / grad_fn suffixes.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kiln/autograd.h"
#include "kiln/dispatch.h"
#include "kiln/tensor.h"

namespace kiln {
namespace {

constexpr int kPrecision = 4;
constexpr int64_t kLineWidth = 80;
constexpr int64_t kThreshold = 1000;  // more elements than this get summarized
constexpr int64_t kEdgeItems = 3;

// One element: floating values in d, integers and bools in i.
struct Val {
  double d = 0;
  int64_t i = 0;
};

// Strided element reader over a tensor's storage.
class Reader {
 public:
  explicit Reader(const Tensor& t)
      : base_(static_cast<const char*>(t.data_ptr())), dtype_(t.dtype()), t_(t) {}
  // `off` is in elements from the tensor's first element.
  Val read(int64_t off) const {
    return visit_dtype(dtype_, [&](auto tag) {
      using T = decltype(tag);
      T v;
      std::memcpy(&v, base_ + off * static_cast<int64_t>(sizeof(T)), sizeof(T));
      Val r;
      if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
        r.d = static_cast<float>(v);
      else if constexpr (std::is_floating_point_v<T>)
        r.d = static_cast<double>(v);
      else
        r.i = static_cast<int64_t>(v);
      return r;
    });
  }
  int64_t size(size_t d) const { return t_.shape()[d]; }
  int64_t stride(size_t d) const { return t_.strides()[d]; }
  size_t rank() const { return t_.shape().size(); }

 private:
  const char* base_;
  DType dtype_;
  const Tensor& t_;
};

// Indices printed along a dim of size n: all, or the edges when summarizing.
std::vector<int64_t> shown(int64_t n, bool summarize) {
  std::vector<int64_t> idx;
  if (summarize && n > 2 * kEdgeItems) {
    for (int64_t i = 0; i < kEdgeItems; ++i) idx.push_back(i);
    for (int64_t i = n - kEdgeItems; i < n; ++i) idx.push_back(i);
  } else {
    for (int64_t i = 0; i < n; ++i) idx.push_back(i);
  }
  return idx;
}

std::string printf_str(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

// PyTorch's _Formatter: picks int / fixed / scientific mode and a common width
// from the nonzero finite values of the (summarized) tensor.
class Formatter {
 public:
  Formatter(DType dt, const std::vector<Val>& vals)
      : floating_(is_floating(dt)), boolean_(dt == DType::b8) {
    if (!floating_) {
      for (const Val& v : vals) width_ = std::max(width_, raw(v).size());
      return;
    }
    std::vector<double> nz;
    for (const Val& v : vals)
      if (std::isfinite(v.d) && v.d != 0) nz.push_back(v.d);
    if (nz.empty()) return;
    double mn = std::fabs(nz[0]), mx = mn;
    for (double x : nz) {
      mn = std::min(mn, std::fabs(x));
      mx = std::max(mx, std::fabs(x));
      if (x != std::ceil(x)) int_mode_ = false;
    }
    sci_ = mx / mn > 1000.0 || mx > 1.0e8 || (!int_mode_ && mn < 1.0e-4);
    for (double x : nz) {
      size_t w = raw({x, 0}).size();
      width_ = std::max(width_, w);
    }
  }

  size_t width() const { return width_; }

  // The value padded on the left to the common width.
  std::string format(const Val& v) const {
    std::string s = raw(v);
    return s.size() < width_ ? std::string(width_ - s.size(), ' ') + s : s;
  }

 private:
  std::string raw(const Val& v) const {
    if (!floating_) return boolean_ ? (v.i ? "True" : "False") : std::to_string(v.i);
    if (std::isnan(v.d)) return "nan";  // Python never prints "-nan"
    if (std::isinf(v.d)) return v.d > 0 ? "inf" : "-inf";
    if (sci_) return printf_str("%.4e", v.d);
    if (int_mode_) return printf_str("%.0f", v.d) + ".";
    return printf_str("%.4f", v.d);
  }

  bool floating_, boolean_;
  bool int_mode_ = true, sci_ = false;
  size_t width_ = 1;
};
static_assert(kPrecision == 4, "the printf formats above hard-code precision 4");

// Gathers the values the formatter sees (get_summarized_data in PyTorch).
void gather(const Reader& r, size_t d, int64_t off, bool summarize, std::vector<Val>& out) {
  if (d == r.rank()) {
    out.push_back(r.read(off));
    return;
  }
  for (int64_t i : shown(r.size(d), summarize))
    gather(r, d + 1, off + i * r.stride(d), summarize, out);
}

struct Printer {
  const Reader& r;
  const Formatter& f;
  bool summarize;

  std::string vector_str(int64_t off, int64_t indent) const {
    size_t d = r.rank() - 1;
    int64_t n = r.size(d);
    int64_t elem_len = static_cast<int64_t>(f.width()) + 2;
    int64_t avail = kLineWidth - indent;
    // floor division (avail may be negative for deep tensors)
    int64_t per_line = avail >= 0 ? avail / elem_len : -((-avail + elem_len - 1) / elem_len);
    per_line = std::max<int64_t>(1, per_line);
    std::vector<std::string> data;
    bool cut = summarize && n > 2 * kEdgeItems;
    for (int64_t i : shown(n, summarize)) {
      if (cut && i == n - kEdgeItems) data.push_back(" ...");
      data.push_back(f.format(r.read(off + i * r.stride(d))));
    }
    std::string s = "[";
    for (size_t i = 0; i < data.size(); ++i) {
      if (i > 0) {
        if (i % static_cast<size_t>(per_line) == 0) {
          s += ",\n";
          s.append(static_cast<size_t>(indent + 1), ' ');
        } else {
          s += ", ";
        }
      }
      s += data[i];
    }
    return s + "]";
  }

  std::string tensor_str(size_t d, int64_t off, int64_t indent) const {
    if (r.rank() == 0) return f.format(r.read(off));
    if (d == r.rank() - 1) return vector_str(off, indent);
    int64_t n = r.size(d);
    bool cut = summarize && n > 2 * kEdgeItems;
    // Built piecewise: GCC 12 misreports `"," + std::string(...)` (-Wrestrict).
    std::string sep = ",";
    sep.append(r.rank() - d - 1, '\n');
    sep.append(static_cast<size_t>(indent + 1), ' ');
    std::string s = "[";
    bool first = true;
    for (int64_t i : shown(n, summarize)) {
      if (!first) s += sep;
      if (cut && i == n - kEdgeItems) s += "..." + sep;
      first = false;
      s += tensor_str(d + 1, off + i * r.stride(d), indent + 1);
    }
    return s + "]";
  }
};

// PyTorch's _add_suffixes: a suffix that would pass the line width goes on a new line.
std::string add_suffixes(const std::string& body, const std::vector<std::string>& suffixes,
                         int64_t indent) {
  std::string out = body;
  size_t nl = body.rfind('\n');
  int64_t last = static_cast<int64_t>(body.size()) -
                 (nl == std::string::npos ? -1 : static_cast<int64_t>(nl)) + 1;
  for (const std::string& s : suffixes) {
    int64_t len = static_cast<int64_t>(s.size());
    if (last + len + 2 > kLineWidth) {
      out += ",\n";
      out.append(static_cast<size_t>(indent), ' ');
      out += s;
      last = indent + len;
    } else {
      out += ", " + s;
      last += len + 2;
    }
  }
  return out + ")";
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(<undefined>)";
  if (t.is_symbolic()) {
    // Printing reads values: the tracer decides (it throws or falls back).
    if (Recorder* rec = current_recorder())
      rec->on_value_read("print", std::source_location::current());
    return os << "tensor(<symbolic>, shape=" << t.shape() << ", dtype=" << t.dtype() << ")";
  }
  const std::string prefix = "tensor(";
  const int64_t indent = static_cast<int64_t>(prefix.size());
  std::vector<std::string> suffixes;
  std::string body;
  const DType dt = t.dtype();
  if (t.numel() == 0) {
    // Like NumPy, spell out shapes other than (0,); with no values to show
    // the dtype is printed unless it is the default float.
    if (t.dim() != 1) {
      std::string sz = "size=(";
      for (int64_t i = 0; i < t.dim(); ++i) sz += (i ? ", " : "") + std::to_string(t.size(i));
      suffixes.push_back(sz + ")");
    }
    if (dt != kDefaultFloat) suffixes.push_back(std::string("dtype=") + dtype_name(dt));
    body = "[]";
  } else {
    if (dt != kDefaultFloat && dt != DType::i64 && dt != DType::b8)
      suffixes.push_back(std::string("dtype=") + dtype_name(dt));
    bool summarize = t.numel() > kThreshold;
    const Tensor host = t.device().is_cpu() ? t : t.detach().cpu();  // values are read on the CPU
    Reader r(host);
    std::vector<Val> vals;
    gather(r, 0, 0, summarize, vals);
    Formatter f(dt, vals);
    body = Printer{r, f, summarize}.tensor_str(0, 0, indent);
  }
  if (!t.device().is_cpu()) suffixes.push_back("device='" + t.device().str() + "'");
  if (auto fn = t.grad_fn())
    suffixes.push_back("grad_fn=<" + fn->name() + ">");
  else if (t.requires_grad())
    suffixes.push_back("requires_grad=True");
  return os << add_suffixes(prefix + body, suffixes, indent);
}

}  // namespace kiln
