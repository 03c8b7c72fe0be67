// IR text parser: the printer's format (ir/README.md) plus `#` comments.
// Grammar (tokens may be separated by whitespace and `# ...` comments):
//
//   graph    := 'graph' '(' [input {',' input}] ')' ['syms' '=' INT]
//               ['rng_advance' '=' symint] '{' {stmt} 'return' [output {',' output}] '}'
//   input    := VALUE ':' type [STRING]
//   output   := VALUE [STRING] ['gradient']
//   stmt     := [VALUE {',' VALUE} '='] (constant | call)
//   call     := OP '(' [VALUE {',' VALUE}] ')' ['{' [attr {',' attr}] '}']
//               [':' type {',' type}]                     (one type per defined value)
//   constant := 'constant' type (number | '[' [number {',' number}] ']')
//               ['{' 'value' '=' symattr '}']             (data row-major, 0-d: one number)
//   type     := ['wrapped'] DTYPE '[' [symint {',' symint}] ']'
//   attr     := NAME '=' (symattr | FLOAT | 'inf' | 'nan' | '-' FLOAT | 'true' | 'false'
//                         | DTYPE | '[' [symint {',' symint}] ']')
//   symattr  := symint | '1' '/' '(' symint ')' | '1.0' '*' '(' symint ')'
//   symint   := ['-'] term {('+' | '-') term}        (an integer polynomial in symbols)
//   term     := INT ['*' mono] | mono                   mono := power {'*' power}
//   power    := SYM ['^' INT]
//   number   := ['-'] (INT | FLOAT | 'inf' | 'nan') | 'true' | 'false'
//   VALUE    := '%' [A-Za-z0-9_.]+       SYM := 's' [0-9]+       INT := [0-9]+
//   FLOAT    := INT ['.' [0-9]*] [[eE] [+-] INT] with a '.' or an exponent
//   STRING   := '"' {char | \" | \\ | \n | \t | \r | \xHH} '"'
//
// Nothing nests, so the parser never recurses. A symbolic attribute entry is
// stored as 0 (0.0 for the double forms `1/(e)` and `1.0*(e)`) in Attrs with a
// SymAttr beside it: the text carries no concrete value, and eval_attrs
// replaces the placeholder. SymAttrs come out in attribute order (Dims entries
// by index). `1.0*(e)` keeps a double attribute
// that equals e a double; a bare `e` would read back as an int64.
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kiln/functional.h"
#include "kiln/ir/text.h"

namespace kiln::ir {
namespace {

// Sizes beyond these are rejected: they only come from corrupt or hostile text.
constexpr int64_t kMaxConstantElements = int64_t{1} << 28;
constexpr size_t kMaxRank = 64;
constexpr size_t kMaxAttrs = 256;
constexpr size_t kMaxDimsAttr = size_t{1} << 20;
constexpr int64_t kMaxSyms = SymInt::kMaxSyms;

enum class Tok : uint8_t { kEnd, kIdent, kValue, kInt, kFloat, kString, kPunct };

struct Token {
  Tok kind = Tok::kEnd;
  std::string_view text;  // as written; kValue without the '%'
  std::string str;        // kString: the decoded contents
  size_t line = 1;
  size_t col = 1;
};

[[noreturn]] void fail_at(size_t line, size_t col, const std::string& what) {
  throw_error("[ir.parse] line " + std::to_string(line) + ", column " + std::to_string(col) + ": " +
              what);
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_alpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
int hex_digit(char c) {
  if (is_digit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string show_char(char c) {
  auto u = static_cast<unsigned char>(c);
  if (u >= 0x20 && u < 0x7f) return std::string("'") + c + "'";
  static const char kHex[] = "0123456789abcdef";
  return std::string("byte 0x") + kHex[u >> 4] + kHex[u & 15];
}

class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(src) {}

  Token next() {
    skip_space();
    Token t;
    t.line = line_;
    t.col = col();
    if (!more()) return t;
    size_t start = pos_;
    char c = cur();
    if (is_alpha(c)) {
      while (more() && (is_alpha(cur()) || is_digit(cur()))) ++pos_;
      t.kind = Tok::kIdent;
    } else if (is_digit(c)) {
      t.kind = lex_number();
    } else if (c == '%') {
      start = ++pos_;
      while (more() && (is_alpha(cur()) || is_digit(cur()) || cur() == '.')) ++pos_;
      if (pos_ == start) fail_at(t.line, t.col, "expected a value name after '%'");
      t.kind = Tok::kValue;
    } else if (c == '"') {
      lex_string(t);
      return t;
    } else if (std::string_view("()[]{},:=*+-/^").find(c) != std::string_view::npos) {
      ++pos_;
      t.kind = Tok::kPunct;
    } else {
      fail_at(t.line, t.col, "unexpected character " + show_char(c));
    }
    t.text = src_.substr(start, pos_ - start);
    return t;
  }

 private:
  bool more() const { return pos_ < src_.size(); }
  char cur() const { return src_[pos_]; }
  size_t col() const { return pos_ - line_start_ + 1; }

  void skip_space() {
    while (more()) {
      char c = cur();
      if (c == '\n') {
        ++line_;
        line_start_ = ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (more() && cur() != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  Tok lex_number() {
    Tok kind = Tok::kInt;
    while (more() && is_digit(cur())) ++pos_;
    if (more() && cur() == '.') {
      kind = Tok::kFloat;
      ++pos_;
      while (more() && is_digit(cur())) ++pos_;
    }
    if (more() && (cur() == 'e' || cur() == 'E')) {
      size_t k = pos_ + 1;
      if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
      if (k < src_.size() && is_digit(src_[k])) {
        kind = Tok::kFloat;
        pos_ = k;
        while (more() && is_digit(cur())) ++pos_;
      }
    }
    return kind;
  }

  void lex_string(Token& t) {
    size_t start = pos_++;
    for (;;) {
      if (!more() || cur() == '\n') fail_at(t.line, t.col, "unterminated string");
      char c = src_[pos_++];
      if (c == '"') break;
      if (c != '\\') {
        t.str += c;
        continue;
      }
      size_t ecol = col() - 1;  // the backslash
      if (!more()) fail_at(t.line, t.col, "unterminated string");
      char e = src_[pos_++];
      switch (e) {
        case 'n':
          t.str += '\n';
          break;
        case 't':
          t.str += '\t';
          break;
        case 'r':
          t.str += '\r';
          break;
        case '"':
          t.str += '"';
          break;
        case '\\':
          t.str += '\\';
          break;
        case 'x': {
          int hi = more() ? hex_digit(cur()) : -1;
          int lo = pos_ + 1 < src_.size() ? hex_digit(src_[pos_ + 1]) : -1;
          if (hi < 0 || lo < 0) fail_at(line_, ecol, "expected two hex digits after \\x");
          t.str += static_cast<char>(hi * 16 + lo);
          pos_ += 2;
          break;
        }
        default:
          fail_at(line_, ecol, "unknown escape \\" + (e == '\n' ? "(newline)" : show_char(e)));
      }
    }
    t.kind = Tok::kString;
    t.text = src_.substr(start, pos_ - start);
  }

  std::string_view src_;
  size_t pos_ = 0;
  size_t line_ = 1;
  size_t line_start_ = 0;
};

bool dtype_from(std::string_view s, DType& out) {
  for (int i = 0; i < kNumDTypes; ++i) {
    auto t = static_cast<DType>(i);
    if (s == dtype_name(t)) {
      out = t;
      return true;
    }
  }
  return false;
}

struct Type {
  bool wrapped = false;
  DType dtype = DType::f32;
  SymShape shape;
  Token at;
};

// A symbolic attribute entry whose name is interned only once its node is
// complete, so rejected text does not grow the global name table.
struct PendingSym {
  std::string_view name;
  int32_t index = -1;
  SymInt expr;
  bool reciprocal = false;
};

template <typename T>
inline constexpr bool kIsFloat =
    std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

class Parser {
 public:
  explicit Parser(std::string_view src) : lex_(src) { advance(); }

  std::unique_ptr<Graph> run() {
    if (!is_ident("graph")) expected("'graph'");
    advance();
    expect('(');
    if (!is_punct(')')) {
      do {
        parse_input();
      } while (accept(','));
    }
    expect(')');
    if (is_ident("syms")) {
      advance();
      expect('=');
      Token at = tok_;
      int64_t n = take_int(false, at);
      if (n > kMaxSyms) fail(at, "too many symbols (at most " + std::to_string(kMaxSyms) + ")");
      g_->num_syms = static_cast<int>(n);
    }
    syms_known_ = true;
    if (max_sym_ >= g_->num_syms) fail_at(max_sym_line_, max_sym_col_, undeclared(max_sym_));
    if (is_ident("rng_advance")) {
      advance();
      expect('=');
      g_->rng_advance = parse_symint();
    }
    expect('{');
    while (!is_ident("return")) parse_stmt();
    advance();
    if (tok_.kind == Tok::kValue) {
      do {
        Value* v = use_value();
        std::string name;
        if (tok_.kind == Tok::kString) {
          name = std::move(tok_.str);
          advance();
        }
        OutputRole role = OutputRole::kValue;
        if (is_ident("gradient")) {
          advance();
          role = OutputRole::kGradient;
        }
        g_->add_output(v, std::move(name), role);
      } while (accept(','));
    }
    expect('}');
    if (tok_.kind != Tok::kEnd) expected("end of input");
    return std::move(g_);
  }

 private:
  // ---- tokens and errors ----
  void advance() { tok_ = lex_.next(); }
  bool is_punct(char c) const { return tok_.kind == Tok::kPunct && tok_.text[0] == c; }
  bool is_ident(std::string_view w) const { return tok_.kind == Tok::kIdent && tok_.text == w; }
  bool accept(char c) {
    if (!is_punct(c)) return false;
    advance();
    return true;
  }
  void expect(char c) {
    if (!accept(c)) expected(std::string("'") + c + "'");
  }
  [[noreturn]] static void fail(const Token& t, const std::string& what) {
    fail_at(t.line, t.col, what);
  }
  [[noreturn]] void expected(const std::string& what) const {
    fail(tok_, "expected " + what + ", found " + describe(tok_));
  }
  static std::string clip(std::string_view s) {
    return s.size() <= 32 ? std::string(s) : std::string(s.substr(0, 32)) + "...";
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case Tok::kEnd:
        return "end of input";
      case Tok::kString:
        return "a string";
      case Tok::kValue:
        return "'%" + clip(t.text) + "'";
      default:
        return "'" + clip(t.text) + "'";
    }
  }
  std::string undeclared(int64_t s) const {
    return "symbol s" + std::to_string(s) +
           " is not declared (the graph has syms=" + std::to_string(g_->num_syms) + ")";
  }

  // ---- numbers and sizes ----
  // An INT token with the sign already read; `at` is where the number began.
  int64_t take_int(bool neg, const Token& at) {
    if (tok_.kind != Tok::kInt) expected("an integer");
    uint64_t m = 0;
    auto r = std::from_chars(tok_.text.data(), tok_.text.data() + tok_.text.size(), m);
    const uint64_t limit = (uint64_t{1} << 63) - (neg ? 0 : 1);
    if (r.ec != std::errc() || m > limit) fail(at, "integer out of range");
    advance();
    return neg ? static_cast<int64_t>(0 - m) : static_cast<int64_t>(m);
  }

  // An INT, FLOAT, inf or nan with the sign already read.
  double take_float(bool neg, const Token& at) {
    double v = 0;
    if (is_ident("inf")) {
      v = std::numeric_limits<double>::infinity();
    } else if (is_ident("nan")) {
      v = std::numeric_limits<double>::quiet_NaN();
    } else if (tok_.kind == Tok::kFloat || tok_.kind == Tok::kInt) {
      const char* end = tok_.text.data() + tok_.text.size();
      auto r = std::from_chars(tok_.text.data(), end, v);
      if (r.ec == std::errc::result_out_of_range) fail(at, "number out of range");
      if (r.ec != std::errc() || r.ptr != end) fail(at, "malformed number");
    } else {
      expected("a number");
    }
    advance();
    return neg ? -v : v;  // IEEE negation: also gives -0.0 and -nan
  }

  bool at_sym() const {
    if (tok_.kind != Tok::kIdent || tok_.text.size() < 2 || tok_.text[0] != 's') return false;
    for (char c : tok_.text.substr(1))
      if (!is_digit(c)) return false;
    return true;
  }

  int32_t take_sym() {
    if (!at_sym()) expected("a symbol like s0");
    int32_t s = 0;
    std::string_view d = tok_.text.substr(1);
    auto r = std::from_chars(d.data(), d.data() + d.size(), s);
    if (r.ec != std::errc() || s >= SymInt::kMaxSyms)
      fail(tok_, "symbol number out of range (at most " + std::to_string(SymInt::kMaxSyms) +
                     " symbols, s0..s" + std::to_string(SymInt::kMaxSyms - 1) + ")");
    if (syms_known_) {
      if (s >= g_->num_syms) fail(tok_, undeclared(s));
    } else if (s > max_sym_) {  // in the header, before syms=N: checked after it
      max_sym_ = s;
      max_sym_line_ = tok_.line;
      max_sym_col_ = tok_.col;
    }
    advance();
    return s;
  }

  // `mono` after its coefficient was read: powers of symbols joined by '*'.
  SymInt parse_mono(int64_t coef, const Token& at) {
    int exps[SymInt::kMaxSyms] = {};
    do {
      const int32_t k = take_sym();
      int64_t e = 1;
      if (accept('^')) {
        Token et = tok_;
        e = take_int(false, et);
        if (e < 1 || e > SymInt::kMaxExponent)
          fail(et, "exponent " + std::to_string(e) + " out of range (1.." +
                       std::to_string(SymInt::kMaxExponent) + ")");
      }
      exps[k] += static_cast<int>(e);
      if (exps[k] > SymInt::kMaxExponent)
        fail(at,
             "s" + std::to_string(k) + " to a power above " + std::to_string(SymInt::kMaxExponent));
    } while (accept('*'));
    uint64_t mono = 0;
    for (int k = 0; k < SymInt::kMaxSyms; ++k) mono |= mono_of(k, exps[k]);
    return SymInt::monomial(coef, mono);
  }

  // One term with its sign already read: INT ['*' mono] | mono.
  SymInt parse_term(bool neg, const Token& at) {
    if (tok_.kind == Tok::kInt) {
      const int64_t v = take_int(neg, at);
      return accept('*') ? parse_mono(v, at) : SymInt(v);
    }
    if (at_sym()) return parse_mono(neg ? -1 : 1, at);
    expected("a size (an integer or an expression like 2*s0+1 or s0*s1)");
  }

  // The `{('+' | '-') term}` rest of a symint whose first term is `acc`.
  SymInt parse_symint_rest(SymInt acc) {
    while (is_punct('+') || is_punct('-')) {
      const bool neg = is_punct('-');
      Token at = tok_;
      advance();
      SymInt t = parse_term(neg, at);
      try {
        acc = acc + t;
      } catch (const Error&) {
        fail(at, "size expression out of range");
      }
    }
    return acc;
  }

  SymInt parse_symint() {
    Token at = tok_;
    const bool neg = accept('-');
    return parse_symint_rest(parse_term(neg, at));
  }

  // symint or `1/(symint)`.
  SymInt parse_symattr(bool& reciprocal) {
    reciprocal = false;
    if (tok_.kind == Tok::kInt) {
      Token at = tok_;
      int64_t v = take_int(false, at);
      if (v == 1 && accept('/')) {
        expect('(');
        SymInt e = parse_symint();
        expect(')');
        reciprocal = true;
        return e;
      }
      return parse_symint_rest(accept('*') ? parse_mono(v, at) : SymInt(v));
    }
    return parse_symint();
  }

  // ---- types, values, attributes ----
  Type parse_type() {
    Type t;
    t.at = tok_;
    if (is_ident("wrapped")) {
      t.wrapped = true;
      advance();
    }
    if (tok_.kind != Tok::kIdent || !dtype_from(tok_.text, t.dtype))
      expected("a dtype (f32, f64, f16, bf16, i64, i32, u8, bool)");
    advance();
    expect('[');
    int64_t numel = 1;
    if (!is_punct(']')) {
      do {
        Token at = tok_;
        if (t.shape.size() == kMaxRank) fail(at, "more than 64 dimensions");
        SymInt s = parse_symint();
        if (s.is_static()) {
          if (s.b < 0) fail(at, "negative dimension " + std::to_string(s.b));
          if (s.b > 0 && __builtin_mul_overflow(numel, s.b, &numel))
            fail(at, "shape has too many elements");
        }
        t.shape.push_back(s);
      } while (accept(','));
    }
    expect(']');
    if (t.wrapped && !t.shape.empty())
      fail(t.at,
           "'wrapped' marks a number (a 0-d tensor), not a tensor of shape " + to_string(t.shape));
    return t;
  }

  Value* use_value() {
    if (tok_.kind != Tok::kValue) expected("a value like %0");
    auto it = values_.find(tok_.text);
    if (it == values_.end()) fail(tok_, "%" + clip(tok_.text) + " is not defined");
    advance();
    return it->second;
  }

  void define(const Token& t, Value* v) {
    if (!values_.emplace(t.text, v).second) fail(t, "%" + clip(t.text) + " is already defined");
  }

  void parse_input() {
    Token vt = tok_;
    if (vt.kind != Tok::kValue) expected("a graph input like %0");
    advance();
    expect(':');
    Type ty = parse_type();
    std::string name;
    if (tok_.kind == Tok::kString) {
      name = std::move(tok_.str);
      advance();
    }
    Value* v = g_->add_input(ty.dtype, std::move(ty.shape), std::move(name));
    v->wrapped_number = ty.wrapped;
    define(vt, v);
  }

  AttrValue parse_attr_value(std::string_view name, std::vector<PendingSym>& syms) {
    if (accept('[')) {
      Dims d;
      if (!is_punct(']')) {
        do {
          if (d.size() == kMaxDimsAttr) fail(tok_, "attribute list too long");
          SymInt s = parse_symint();
          if (s.is_static()) {
            d.push_back(s.b);
          } else {
            syms.push_back({name, static_cast<int32_t>(d.size()), s, false});
            d.push_back(0);
          }
        } while (accept(','));
      }
      expect(']');
      return d;
    }
    if (is_ident("true") || is_ident("false")) {
      bool b = is_ident("true");
      advance();
      return b;
    }
    DType dt;
    if (tok_.kind == Tok::kIdent && dtype_from(tok_.text, dt)) {
      advance();
      return dt;
    }
    Token at = tok_;
    bool neg = is_punct('-');
    if (neg) advance();
    if (tok_.kind == Tok::kFloat || is_ident("inf") || is_ident("nan")) {
      double v = take_float(neg, at);
      if (!is_punct('*')) return v;
      // `1.0*(expr)`: a double attribute equal to a size expression.
      if (neg || v != 1.0) fail(at, "only 1.0*(...) may multiply a size expression");
      advance();
      expect('(');
      SymInt e = parse_symint();
      expect(')');
      syms.push_back({name, -1, e, false});
      return 0.0;
    }
    if (tok_.kind != Tok::kInt && !at_sym())
      expected("an attribute value (number, true/false, dtype, [dims] or size expression)");
    SymInt e;
    bool reciprocal = false;
    if (neg) {
      // A negative size: put the sign back in front of the expression.
      e = parse_symint_rest(parse_term(true, at));
    } else {
      e = parse_symattr(reciprocal);
    }
    if (reciprocal) {
      syms.push_back({name, -1, e, true});
      return 0.0;
    }
    if (e.is_static()) return e.b;
    syms.push_back({name, -1, e, false});
    return int64_t{0};
  }

  // ---- statements ----
  void parse_stmt() {
    std::vector<Token> lhs;
    if (tok_.kind == Tok::kValue) {
      do {
        if (tok_.kind != Tok::kValue) expected("a value like %0");
        lhs.push_back(tok_);
        advance();
      } while (accept(','));
      expect('=');
    } else if (tok_.kind != Tok::kIdent) {
      expected("a statement or 'return'");
    }
    if (tok_.kind != Tok::kIdent) expected("an op name or 'constant'");
    if (is_ident("constant"))
      parse_constant(lhs);
    else
      parse_call(lhs);
  }

  void parse_call(const std::vector<Token>& lhs) {
    Token optok = tok_;
    std::string opname(optok.text);
    OpId op;
    if (!op_from_name(opname.c_str(), op)) fail(optok, "unknown op '" + clip(opname) + "'");
    advance();
    expect('(');
    std::vector<Value*> ins;
    if (!is_punct(')')) {
      do {
        ins.push_back(use_value());
      } while (accept(','));
    }
    expect(')');
    const int arity = op_info(op).arity;
    if (arity >= 0 && ins.size() != static_cast<size_t>(arity))
      fail(optok, "'" + opname + "' takes " + std::to_string(arity) + " input(s), got " +
                      std::to_string(ins.size()));

    std::vector<std::pair<std::string_view, AttrValue>> attrs;
    std::vector<PendingSym> syms;
    if (accept('{')) {
      std::unordered_set<std::string_view> seen;
      if (!is_punct('}')) {
        do {
          Token nt = tok_;
          if (nt.kind != Tok::kIdent) expected("an attribute name");
          if (attrs.size() == kMaxAttrs) fail(nt, "too many attributes");
          if (!seen.insert(nt.text).second) fail(nt, "duplicate attribute '" + clip(nt.text) + "'");
          advance();
          expect('=');
          attrs.emplace_back(nt.text, parse_attr_value(nt.text, syms));
        } while (accept(','));
      }
      expect('}');
    }

    std::vector<OutSpec> outs;
    std::vector<bool> wrapped;
    if (!lhs.empty() && !is_punct(':')) expected("':' and the output types");
    if (accept(':')) {
      do {
        Type t = parse_type();
        outs.push_back({t.dtype, std::move(t.shape)});
        wrapped.push_back(t.wrapped);
      } while (accept(','));
    }
    if (outs.size() != lhs.size())
      fail(optok, std::to_string(lhs.size()) + " value(s) defined but " +
                      std::to_string(outs.size()) + " output type(s) given");

    Attrs a;
    for (auto& [k, v] : attrs) a.set(intern_attr_name(k), std::move(v));
    Node* n = g_->add_op(op, std::move(ins), std::move(a), std::move(outs));
    n->line = static_cast<uint32_t>(optok.line);
    n->column = static_cast<uint32_t>(optok.col);
    for (const PendingSym& s : syms)
      n->sym_attrs.push_back({intern_attr_name(s.name), s.index, s.expr, s.reciprocal});
    for (size_t i = 0; i < lhs.size(); ++i) {
      n->outputs[i]->wrapped_number = wrapped[i];
      define(lhs[i], n->outputs[i]);
    }
  }

  void parse_constant(const std::vector<Token>& lhs) {
    Token kw = tok_;
    advance();
    if (lhs.size() != 1) fail(kw, "a constant defines exactly one value");
    Type ty = parse_type();
    Dims shape;
    bool empty = false;
    for (const SymInt& s : ty.shape) {
      if (!s.is_static()) fail(ty.at, "a constant needs a static shape");
      shape.push_back(s.b);
      empty = empty || s.b == 0;
    }
    int64_t numel = 1;
    if (empty) {
      numel = 0;
    } else {
      for (int64_t d : shape) {
        if (d > kMaxConstantElements / numel) fail(ty.at, "constant has more than 2^28 elements");
        numel *= d;
      }
    }
    Tensor t = visit_dtype(
        ty.dtype, [&](auto tag) { return parse_data<decltype(tag)>(shape, numel, ty.dtype); });
    std::vector<SymAttr> syms;
    if (accept('{')) {
      if (!is_ident("value")) expected("'value'");
      if (!shape.empty()) fail(tok_, "only a 0-d constant has a symbolic value");
      advance();
      expect('=');
      SymAttr s;
      s.name = intern_attr_name("value");
      s.expr = parse_symattr(s.reciprocal);
      syms.push_back(s);
      expect('}');
    }
    t.impl()->wrapped_number = ty.wrapped;
    Node* n = g_->add_constant(t);
    n->line = static_cast<uint32_t>(kw.line);
    n->column = static_cast<uint32_t>(kw.col);
    n->sym_attrs = std::move(syms);
    define(lhs[0], n->output());
  }

  template <typename T>
  using Store = std::conditional_t<std::is_same_v<T, bool>, uint8_t, T>;

  template <typename T>
  Store<T> parse_element() {
    if constexpr (std::is_same_v<T, bool>) {
      if (!is_ident("true") && !is_ident("false")) expected("true or false");
      bool b = is_ident("true");
      advance();
      return b ? 1 : 0;
    } else {
      Token at = tok_;
      bool neg = accept('-');
      if constexpr (kIsFloat<T>) {
        double v = take_float(neg, at);
        if constexpr (std::is_same_v<T, double>)
          return v;
        else
          return T(static_cast<float>(v));  // IEEE rounding; out of range gives inf
      } else {
        int64_t v = take_int(neg, at);
        if (v < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
            v > static_cast<int64_t>(std::numeric_limits<T>::max()))
          fail(at, "value " + std::to_string(v) + " out of range for this dtype");
        return static_cast<T>(v);
      }
    }
  }

  // Reads the data before allocating, so a huge declared shape costs nothing
  // unless the text really holds that many numbers.
  template <typename T>
  Tensor parse_data(const Dims& shape, int64_t numel, DType dt) {
    std::vector<Store<T>> vals;
    if (shape.empty()) {
      vals.push_back(parse_element<T>());
    } else {
      expect('[');
      if (!is_punct(']')) {
        do {
          if (static_cast<int64_t>(vals.size()) == numel)
            fail(tok_, "more data than the shape's " + std::to_string(numel) + " elements");
          vals.push_back(parse_element<T>());
        } while (accept(','));
      }
      if (static_cast<int64_t>(vals.size()) != numel)
        fail(tok_, "constant has " + std::to_string(vals.size()) + " elements, its shape " +
                       std::to_string(numel));
      expect(']');
    }
    static_assert(sizeof(Store<T>) == sizeof(T));
    Tensor t = kiln::empty(shape, dt);
    if (!vals.empty()) std::memcpy(t.data_ptr(), vals.data(), vals.size() * sizeof(Store<T>));
    return t;
  }

  Lexer lex_;
  Token tok_;
  std::unique_ptr<Graph> g_ = std::make_unique<Graph>();
  std::unordered_map<std::string_view, Value*> values_;
  bool syms_known_ = false;
  int64_t max_sym_ = -1;  // largest symbol used before syms=N, and where
  size_t max_sym_line_ = 0;
  size_t max_sym_col_ = 0;
};

}  // namespace

std::unique_ptr<Graph> parse(std::string_view text) {
  return Parser(text).run();
}

}  // namespace kiln::ir
