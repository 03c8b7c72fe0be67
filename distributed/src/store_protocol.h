// The TCP store's wire format (private to kiln_distributed). Every message,
// request or reply, is a 12-byte header followed by `token_len` bytes of token
// and `payload_len` bytes of payload; integers are little-endian.
//
//   u32 magic 'KLNS' | u8 version | u8 opcode (requests) or status (replies)
//   | u16 token_len | u32 payload_len
//
// The first request of a connection is HELLO carrying the token (no payload);
// later requests carry no token. One request is outstanding per connection: the
// client sends it and reads its reply. Strings and byte strings in payloads
// are a u32 length and the bytes. Every length is bounded so a peer can never
// make the other side allocate more than a legitimate message would need.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace kiln::dist::proto {

inline constexpr uint32_t kMagic = 0x534E4C4Bu;  // "KLNS" on the wire
inline constexpr uint8_t kVersion = 1;
inline constexpr size_t kHeaderSize = 12;
inline constexpr size_t kMaxKey = 64 * 1024;
inline constexpr size_t kMaxValue = 256u * 1024 * 1024;
inline constexpr size_t kMaxToken = 256;
// The largest request (compare_set: a key and two values) plus length fields.
inline constexpr size_t kMaxPayload = 2 * kMaxValue + kMaxKey + 64;

/// Request opcodes.
enum Op : uint8_t {
  kHello = 1,       // token in the header; reply OK
  kSet = 2,         // key, value
  kGet = 3,         // u32 timeout_ms, key; reply OK value | TIMEOUT
  kAdd = 4,         // key, i64 delta; reply OK i64
  kWait = 5,        // u32 timeout_ms, u32 n, n keys; reply OK | TIMEOUT missing keys
  kCompareSet = 6,  // key, expected, desired; reply OK value after the call
  kDelete = 7,      // key; reply OK u8 existed
  kNumKeys = 8,     // reply OK i64
};

/// Reply statuses (in the opcode byte).
enum Status : uint8_t { kOk = 0, kError = 1, kTimeout = 2 };

inline const char* op_name(uint8_t op) {
  switch (op) {
    case kHello:
      return "hello";
    case kSet:
      return "set";
    case kGet:
      return "get";
    case kAdd:
      return "add";
    case kWait:
      return "wait";
    case kCompareSet:
      return "compare_set";
    case kDelete:
      return "delete_key";
    case kNumKeys:
      return "num_keys";
    default:
      return nullptr;
  }
}

/// A decoded header.
struct Header {
  uint32_t magic = kMagic;
  uint8_t version = kVersion;
  uint8_t op = 0;
  uint16_t token_len = 0;
  uint32_t payload_len = 0;
};

inline void put_u16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
}
inline void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
inline uint16_t get_u16(const uint8_t* p) {
  return uint16_t(p[0] | (p[1] << 8));
}
inline uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(p[i]) << (8 * i);
  return v;
}
inline uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}

inline Header decode_header(const uint8_t* p) {
  return Header{get_u32(p), p[4], p[5], get_u16(p + 6), get_u32(p + 8)};
}

/// Builds one message: header, token, payload.
class Writer {
 public:
  explicit Writer(uint8_t op, const std::string& token = "") {
    buf_.resize(kHeaderSize);
    put_u32(buf_.data(), kMagic);
    buf_[4] = kVersion;
    buf_[5] = op;
    put_u16(buf_.data() + 6, uint16_t(token.size()));
    // A loop, not insert(): GCC 12 reports a false -Warray-bounds on the insert.
    for (char ch : token) buf_.push_back(uint8_t(ch));
    payload_start_ = buf_.size();
  }
  void u8(uint8_t v) { buf_.push_back(v); }
  void u32(uint32_t v) {
    uint8_t b[4];
    put_u32(b, v);
    buf_.insert(buf_.end(), b, b + 4);
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) buf_.push_back(uint8_t(v >> (8 * i)));
  }
  /// A u32 length and the bytes.
  void bytes(const void* p, size_t n) {
    u32(uint32_t(n));
    raw(p, n);
  }
  void str(const std::string& s) { bytes(s.data(), s.size()); }
  /// Bytes without a length (a reply's whole payload).
  void raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    buf_.insert(buf_.end(), b, b + n);
  }
  /// The finished message (fills in payload_len). `external` more payload
  /// bytes follow that the caller sends from elsewhere (a stored value).
  std::vector<uint8_t> take(size_t external = 0) {
    put_u32(buf_.data() + 8, uint32_t(buf_.size() - payload_start_ + external));
    return std::move(buf_);
  }

 private:
  std::vector<uint8_t> buf_;
  size_t payload_start_ = 0;
};

/// Bounds-checked payload decoding: any read past the end, or a length over
/// its limit, sets ok() false and returns an empty value.
class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  bool ok() const { return ok_; }
  bool at_end() const { return pos_ == n_; }
  size_t remaining() const { return n_ - pos_; }
  uint8_t u8() { return need(1) ? p_[pos_++] : 0; }
  uint32_t u32() {
    if (!need(4)) return 0;
    pos_ += 4;
    return get_u32(p_ + pos_ - 4);
  }
  uint64_t u64() {
    if (!need(8)) return 0;
    pos_ += 8;
    return get_u64(p_ + pos_ - 8);
  }
  std::string str(size_t max) {
    size_t n = u32();
    if (!ok_ || n > max || !need(n)) return fail<std::string>();
    std::string s(reinterpret_cast<const char*>(p_ + pos_), n);
    pos_ += n;
    return s;
  }
  std::vector<uint8_t> bytes(size_t max) {
    size_t n = u32();
    if (!ok_ || n > max || !need(n)) return fail<std::vector<uint8_t>>();
    std::vector<uint8_t> v(p_ + pos_, p_ + pos_ + n);
    pos_ += n;
    return v;
  }

 private:
  bool need(size_t k) {
    if (ok_ && n_ - pos_ >= k) return true;
    ok_ = false;
    return false;
  }
  template <typename T>
  T fail() {
    ok_ = false;
    return T{};
  }
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace kiln::dist::proto
