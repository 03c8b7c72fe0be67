// safetensors header: parsing with nlohmann::json (one linear SAX pass) plus
// every check the reference implementation makes (and a few more: duplicate
// keys, unknown fields), and building the header the Python package would write.
#include "serialize/safetensors_format.h"

#include <algorithm>
#include <exception>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_set>

#include "kiln/error.h"

namespace kiln::safetensors {

namespace {

using nlohmann::json;

// Every dtype the format defines. `rank` is the position in the reference
// implementation's Dtype enum (increasing alignment), which orders tensors
// when writing; `kiln` marks the ones kiln can hold.
struct DTypeInfo {
  const char* name;
  int rank;
  std::optional<DType> kiln;
};

constexpr DTypeInfo kDTypes[] = {
    {"BOOL", 0, DType::b8},       {"F4", 1, std::nullopt},      {"F6_E2M3", 2, std::nullopt},
    {"F6_E3M2", 3, std::nullopt}, {"U8", 4, DType::u8},         {"I8", 5, std::nullopt},
    {"F8_E5M2", 6, std::nullopt}, {"F8_E4M3", 7, std::nullopt}, {"F8_E8M0", 8, std::nullopt},
    {"I16", 9, std::nullopt},     {"U16", 10, std::nullopt},    {"F16", 11, DType::f16},
    {"BF16", 12, DType::bf16},    {"I32", 13, DType::i32},      {"U32", 14, std::nullopt},
    {"F32", 15, DType::f32},      {"C64", 16, std::nullopt},    {"F64", 17, DType::f64},
    {"I64", 18, DType::i64},      {"U64", 19, std::nullopt},
};

const DTypeInfo& info_of(DType t) {
  for (const auto& d : kDTypes)
    if (d.kiln == t) return d;
  KILN_ASSERT(false, "dtype without a safetensors name: ", dtype_name(t));
  return kDTypes[0];
}

DType parse_dtype(const std::string& s, const std::string& where, const std::string& name) {
  for (const auto& d : kDTypes) {
    if (s != d.name) continue;
    KILN_CHECK(d.kiln.has_value(), where, ": tensor '", name, "' has dtype ", s,
               ", which kiln does not support (supported: F64 F32 F16 BF16 I64 I32 U8 BOOL)");
    return *d.kiln;
  }
  throw_error(str(where, ": tensor '", name, "' has unknown dtype '", s, "'"));
}

// A JSON integer >= 0 (nlohmann stores non-negative literals as unsigned).
std::optional<uint64_t> as_u64(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0)
    return static_cast<uint64_t>(v.get<int64_t>());
  return std::nullopt;
}

Entry parse_entry(const std::string& name, const json& v, uint64_t data_len,
                  const std::string& where) {
  // Built only for a message (KILN_CHECK evaluates its arguments on failure only).
  auto at = [&] { return str(where, ": tensor '", name, "'"); };
  KILN_CHECK(v.is_object(), at(), ": entry is not a JSON object (got ", v.type_name(), ")");
  for (const auto& [field, _] : v.items())
    KILN_CHECK(field == "dtype" || field == "shape" || field == "data_offsets", at(),
               ": unknown field '", field, "' (expected dtype, shape, data_offsets)");
  KILN_CHECK(v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"), at(),
             ": entry needs the fields dtype, shape and data_offsets");

  Entry e;
  e.name = name;
  const json& dt = v["dtype"];
  KILN_CHECK(dt.is_string(), at(), ": dtype is not a string");
  e.dtype = parse_dtype(dt.get_ref<const std::string&>(), where, name);
  const uint64_t item = dtype_size(e.dtype);

  const json& sh = v["shape"];
  KILN_CHECK(sh.is_array(), at(), ": shape is not an array");
  KILN_CHECK(sh.size() <= kMaxRank, at(), ": shape has ", sh.size(), " dimensions (kiln allows ",
             kMaxRank, ")");
  // numel is the byte count's factor; `span` (product of max(d, 1)) bounds the
  // strides kiln computes, so it must fit int64 too, even for empty tensors.
  uint64_t numel = 1, span = item;
  for (const json& d : sh) {
    std::optional<uint64_t> n = as_u64(d);
    KILN_CHECK(n.has_value(), at(), ": shape ", sh.dump(), " holds ", d.dump(),
               ", not a non-negative integer");
    KILN_CHECK(!__builtin_mul_overflow(span, std::max<uint64_t>(*n, 1), &span) &&
                   span <= static_cast<uint64_t>(INT64_MAX),
               at(), ": shape ", sh.dump(), " is too large");
    numel *= *n;  // cannot overflow: numel <= span / item
    e.shape.push_back(static_cast<int64_t>(*n));
  }

  const json& off = v["data_offsets"];
  std::optional<uint64_t> b, en;
  if (off.is_array() && off.size() == 2) {
    b = as_u64(off[0]);
    en = as_u64(off[1]);
  }
  KILN_CHECK(b && en, at(), ": data_offsets ", off.dump(), " is not two non-negative integers");
  e.begin = *b;
  e.end = *en;
  KILN_CHECK(e.begin <= e.end, at(), ": data_offsets [", e.begin, ", ", e.end,
             "]: end is before begin");
  KILN_CHECK(e.end <= data_len, at(), ": data_offsets [", e.begin, ", ", e.end,
             "] run past the end of the ", data_len, "-byte data buffer");
  const uint64_t nbytes = numel * item;
  KILN_CHECK(e.end - e.begin == nbytes, at(), ": data_offsets [", e.begin, ", ", e.end, "] hold ",
             e.end - e.begin, " bytes but shape ", sh.dump(), " of ", dt.get<std::string>(),
             " needs ", nbytes);
  return e;
}

std::map<std::string, std::string> parse_metadata(const json& v, const std::string& where) {
  KILN_CHECK(v.is_object(), where, ": __metadata__ is not a JSON object of strings (got ",
             v.type_name(), ")");
  std::map<std::string, std::string> out;
  for (const auto& [k, val] : v.items()) {
    KILN_CHECK(val.is_string(), where, ": __metadata__ value of '", k, "' is not a string (got ",
               val.type_name(), ")");
    out.emplace(k, val.get<std::string>());
  }
  return out;
}

// Limits of the streaming reader: the format nests {name: {shape: [d]}}, and
// its arrays (shape, data_offsets) are short; deeper or longer input is hostile.
constexpr int kMaxOpen = 4;  // containers open at once (a shape entry's array is the 4th)
constexpr size_t kMaxArray = 1024;

// A SAX handler for nlohmann's parser that reads the header in one linear pass:
// each top-level member is built as a small JSON value and handed to `member`
// as soon as it is complete, then dropped. It rejects duplicate keys (nlohmann
// would keep the last one) and nesting deeper than the format's. (nlohmann's
// callback parser scans the whole parent object after every nested object,
// which made the parse quadratic in the number of tensors.)
class HeaderReader {
 public:
  using number_integer_t = json::number_integer_t;
  using number_unsigned_t = json::number_unsigned_t;
  using number_float_t = json::number_float_t;
  using string_t = json::string_t;
  using binary_t = json::binary_t;
  using Member = std::function<void(const std::string& key, json& value)>;

  HeaderReader(const std::string& where, Member member)
      : where_(where), member_(std::move(member)) {}

  /// The top-level value's JSON type name ("object" when the header is valid).
  const char* top_type() const { return top_type_; }

  bool null() { return value(json(nullptr)); }
  bool boolean(bool b) { return value(json(b)); }
  bool number_integer(number_integer_t v) { return value(json(v)); }
  bool number_unsigned(number_unsigned_t v) { return value(json(v)); }
  bool number_float(number_float_t v, const string_t&) { return value(json(v)); }
  bool string(string_t& s) { return value(json(std::move(s))); }
  bool binary(binary_t&) { return value(json(nullptr)); }  // not produced for JSON text
  bool start_object(size_t) { return open(json::object()); }
  bool start_array(size_t) { return open(json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(string_t& k) {
    check_depth();
    if (!top_object_) return true;
    if (open_ == 1) {
      KILN_CHECK(keys_.insert(k).second, where_, ": duplicate key '", k, "' in the header");
      key_ = k;
    } else {
      json& obj = *stack_.back();
      KILN_CHECK(!obj.contains(k), where_, ": duplicate key '", k, "' in the header");
      slot_ = &obj[k];
    }
    return true;
  }

  bool parse_error(size_t, const std::string&, const nlohmann::detail::exception& e) {
    throw_error(str(where_, ": header is not valid JSON: ", e.what()));
  }

 private:
  void check_depth() const {
    KILN_CHECK(open_ < kMaxOpen, where_, ": header is nested deeper than the format allows");
  }

  // Stores `v` in the innermost open container (or reports a completed member);
  // returns where it went (null when not stored).
  json* place(json&& v) {
    if (open_ == 0) {
      top_type_ = v.type_name();
      top_object_ = v.is_object();
      return nullptr;
    }
    if (!top_object_) return nullptr;
    if (open_ == 1) {
      item_ = std::move(v);
      return &item_;
    }
    json& parent = *stack_.back();
    if (parent.is_array()) {
      KILN_CHECK(parent.size() < kMaxArray, where_, ": tensor '", key_,
                 "': an array in the header holds more than ", kMaxArray, " elements");
      parent.push_back(std::move(v));
      return &parent.back();
    }
    *slot_ = std::move(v);
    return slot_;
  }

  bool value(json&& v) {
    check_depth();
    if (place(std::move(v)) == &item_) member_(key_, item_);
    return true;
  }

  bool open(json&& container) {
    check_depth();
    json* at = place(std::move(container));
    if (at) stack_.push_back(at);
    ++open_;
    return true;
  }

  bool close() {
    --open_;
    if (!top_object_ || open_ == 0) return true;
    stack_.pop_back();
    if (open_ == 1) member_(key_, item_);
    return true;
  }

  const std::string& where_;
  Member member_;
  int open_ = 0;                          // containers open now
  const char* top_type_ = "";             // of the top-level value
  bool top_object_ = false;               // the top-level value is an object
  std::unordered_set<std::string> keys_;  // top-level keys seen
  std::string key_;                       // the current top-level key
  json item_;                             // the current top-level member's value
  std::vector<json*> stack_;              // open containers inside item_
  json* slot_ = nullptr;                  // where the next value of an open object goes
};

// Serializes one JSON value; throws kiln::Error on invalid UTF-8 in strings.
template <typename J>
std::string dump(const J& v, const std::string& where, const std::string& what) {
  try {
    return v.dump(-1, ' ', false, json::error_handler_t::strict);
  } catch (const json::exception&) {
    throw_error(str(where, ": ", what, " is not valid UTF-8"));
  }
}

std::function<void(uint64_t)>& hook_slot() {
  static std::function<void(uint64_t)> hook;
  return hook;
}

}  // namespace

const char* dtype_string(DType t) {
  return info_of(t).name;
}

bool write_before(const Entry& a, const Entry& b) {
  int ra = info_of(a.dtype).rank, rb = info_of(b.dtype).rank;
  return ra != rb ? ra > rb : a.name < b.name;
}

uint64_t header_length(const unsigned char prefix[8], uint64_t file_size,
                       const std::string& where) {
  KILN_ASSERT(file_size >= 8, "header_length needs the 8-byte prefix");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | prefix[i];
  KILN_CHECK(n <= kMaxHeaderBytes, where, ": header length ", n, " exceeds the limit of ",
             kMaxHeaderBytes, " bytes (corrupt or not a safetensors file)");
  KILN_CHECK(n <= file_size - 8, where, ": header length ", n, " runs past the end of the ",
             file_size, "-byte file");
  return n;
}

Header parse_header(std::string_view text, uint64_t data_len, const std::string& where) {
  // nlohmann's lexer takes a NUL byte for the end of input; JSON allows none
  // (not even in strings, where control characters must be escaped).
  size_t nul = text.find('\0');
  KILN_CHECK(nul == std::string_view::npos, where,
             ": header is not valid JSON: NUL byte at header offset ", nul);
  Header h;
  // Members are checked as they complete; the first problem is reported once
  // the whole text has parsed, so invalid JSON is named as such first.
  std::exception_ptr problem;
  HeaderReader reader(where, [&](const std::string& key, json& val) {
    if (problem) return;
    try {
      if (key == "__metadata__")
        h.metadata = parse_metadata(val, where);
      else
        h.entries.push_back(parse_entry(key, val, data_len, where));
    } catch (const Error&) {
      problem = std::current_exception();
    }
  });
  json::sax_parse(text.begin(), text.end(), &reader);
  KILN_CHECK(std::string_view(reader.top_type()) == "object", where,
             ": header is not a JSON object (got ", reader.top_type(), ")");
  if (problem) std::rethrow_exception(problem);
  // The reference implementation requires the tensors to tile the buffer
  // exactly: sorted by offsets, each begins where the previous one ended.
  // Files are usually written in that order already; otherwise positions are
  // sorted (cheaper to move than entries) and the entries moved once.
  auto before = [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin
                              : (a.end != b.end ? a.end < b.end : a.name < b.name);
  };
  if (!std::is_sorted(h.entries.begin(), h.entries.end(), before)) {
    std::vector<size_t> order(h.entries.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return before(h.entries[a], h.entries[b]); });
    std::vector<Entry> sorted;
    sorted.reserve(order.size());
    for (size_t i : order) sorted.push_back(std::move(h.entries[i]));
    h.entries = std::move(sorted);
  }
  uint64_t cursor = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : h.entries) {
    KILN_CHECK(e.begin >= cursor, where, ": tensor '", e.name, "' (bytes [", e.begin, ", ", e.end,
               ")) overlaps tensor '", prev ? prev->name : "", "' (bytes [", prev ? prev->begin : 0,
               ", ", cursor, "))");
    KILN_CHECK(e.begin == cursor, where, ": bytes [", cursor, ", ", e.begin,
               ") of the data buffer belong to no tensor (gap before '", e.name, "')");
    cursor = e.end;
    prev = &e;
  }
  KILN_CHECK(cursor == data_len, where, ": bytes [", cursor, ", ", data_len,
             ") at the end of the data buffer belong to no tensor");
  return h;
}

std::string build_header(const std::vector<Entry>& entries,
                         const std::map<std::string, std::string>& metadata,
                         const std::string& where) {
  // Assembled from dumped pieces rather than one ordered_json object, whose
  // insertion is linear in its size (quadratic for big state dicts).
  std::string out = "{";
  if (!metadata.empty()) {
    out += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      if (!first) out += ',';
      first = false;
      out += dump(json(k), where, str("metadata key '", k, "'"));
      out += ':';
      out += dump(json(v), where, str("metadata value of '", k, "'"));
    }
    out += '}';
  }
  for (const Entry& e : entries) {
    KILN_CHECK(e.name != "__metadata__", where,
               ": '__metadata__' is reserved for the header's metadata and cannot name a tensor");
    if (out.size() > 1) out += ',';
    out += dump(json(e.name), where, str("tensor name '", e.name, "'"));
    nlohmann::ordered_json info;  // field order as the Python package writes it
    info["dtype"] = dtype_string(e.dtype);
    info["shape"] = json::array();
    for (int64_t d : e.shape) info["shape"].push_back(d);
    info["data_offsets"] = {e.begin, e.end};
    out += ':';
    out += info.dump();
  }
  out += '}';
  out.append((8 - out.size() % 8) % 8, ' ');  // data starts 8-byte aligned

  std::string prefix(8, '\0');
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>((out.size() >> (8 * i)) & 0xff);
  return prefix + out;
}

void set_write_hook(std::function<void(uint64_t)> hook) {
  hook_slot() = std::move(hook);
}

const std::function<void(uint64_t)>& write_hook() {
  return hook_slot();
}

}  // namespace kiln::safetensors
