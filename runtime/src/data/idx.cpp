// IDX reader/writer. The reader trusts nothing in the file: every size comes
// from the header and is checked against overflow and against what the file
// can actually hold before anything is allocated.
#include "kiln/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <new>
#include <vector>

#include "kiln/error.h"

namespace kiln::data {
namespace {

constexpr int kMaxRank = 8;
// Deflate cannot expand data by more than ~1032:1, so a gzip file of S bytes
// decompresses to at most S * 1032 bytes: a cheap bound on a lying header.
constexpr uint64_t kMaxDeflateRatio = 1032;

struct IdxType {
  uint8_t code;
  const char* name;
  size_t file_size;  // bytes per element in the file
  DType dtype;       // dtype of the tensor read_idx returns
};

constexpr IdxType kTypes[] = {
    {0x08, "u8", 1, DType::u8},   {0x09, "i8", 1, DType::i32},  {0x0B, "i16", 2, DType::i32},
    {0x0C, "i32", 4, DType::i32}, {0x0D, "f32", 4, DType::f32}, {0x0E, "f64", 8, DType::f64},
};

const IdxType* find_type(uint8_t code) {
  for (const IdxType& t : kTypes)
    if (t.code == code) return &t;
  return nullptr;
}

std::string hex2(unsigned v) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02X", v & 0xFFu);
  return buf;
}

// Big-endian <-> host for an array of elements of `size` bytes (in place).
void swap_be(void* data, size_t count, size_t size) {
  if constexpr (std::endian::native == std::endian::big) return;
  auto* p = static_cast<unsigned char*>(data);
  for (size_t i = 0; i < count; ++i, p += size) std::reverse(p, p + size);
}

uint32_t load_be32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

// A byte stream; read() returns fewer bytes than asked only at the end of data
// and throws on I/O or decompression errors.
class Source {
 public:
  virtual ~Source() = default;
  virtual size_t read(void* buf, size_t n) = 0;
};

class RawSource : public Source {
 public:
  RawSource(std::FILE* f, const std::string& path) : f_(f), path_(path) {}
  ~RawSource() override { std::fclose(f_); }
  size_t read(void* buf, size_t n) override {
    size_t got = std::fread(buf, 1, n, f_);
    KILN_CHECK(got == n || !std::ferror(f_), "[read_idx] ", path_,
               ": read error: ", std::strerror(errno));
    return got;
  }

 private:
  std::FILE* f_;
  std::string path_;
};

class GzSource : public Source {
 public:
  explicit GzSource(const std::string& path) : path_(path) {
    g_ = gzopen(path.c_str(), "rb");
    KILN_CHECK(g_ != nullptr, "[read_idx] ", path, ": cannot open: ", std::strerror(errno));
    gzbuffer(g_, 1 << 17);
  }
  ~GzSource() override { gzclose(g_); }
  size_t read(void* buf, size_t n) override {
    auto* out = static_cast<unsigned char*>(buf);
    size_t total = 0;
    while (total < n) {
      auto chunk = static_cast<unsigned>(std::min<size_t>(n - total, size_t{1} << 30));
      int got = gzread(g_, out + total, chunk);
      if (got < 0) fail();
      if (got == 0) break;
      total += static_cast<size_t>(got);
    }
    // A short read is either the clean end or a truncated/corrupt stream.
    if (total < n) {
      int err = Z_OK;
      gzerror(g_, &err);
      if (err != Z_OK) fail();
    }
    return total;
  }

 private:
  [[noreturn]] void fail() {
    int err = Z_OK;
    const char* msg = gzerror(g_, &err);
    throw_error(str("[read_idx] ", path_, ": corrupt or truncated gzip stream: ",
                    err == Z_ERRNO ? std::strerror(errno) : msg));
  }
  gzFile g_ = nullptr;
  std::string path_;
};

// Reads the element data of `type` into a new tensor of `shape`.
Tensor read_data(Source& src, const IdxType& type, const Dims& shape, uint64_t numel,
                 const std::string& path) {
  uint64_t bytes = numel * type.file_size;
  auto short_data = [&](size_t got) {
    throw_error(str("[read_idx] ", path, ": data is shorter than the header says: shape ", shape,
                    " of ", type.name, " needs ", bytes, " bytes, got ", got));
  };
  Tensor t;
  try {
    t = make_tensor(shape, type.dtype);
  } catch (const std::bad_alloc&) {
    throw_error(
        str("[read_idx] ", path, ": cannot allocate memory for shape ", shape, " of ", type.name));
  }
  if (bytes == 0) return t;
  if (type.file_size == dtype_size(type.dtype)) {
    size_t got = src.read(t.data_ptr(), bytes);
    if (got < bytes) short_data(got);
    swap_be(t.data_ptr(), numel, type.file_size);
    return t;
  }
  // i8 and i16 widen to i32.
  std::vector<unsigned char> buf(bytes);
  size_t got = src.read(buf.data(), bytes);
  if (got < bytes) short_data(got);
  auto* out = t.data<int32_t>();
  for (uint64_t i = 0; i < numel; ++i) {
    if (type.file_size == 1) {
      out[i] = static_cast<int8_t>(buf[i]);
    } else {
      out[i] = static_cast<int16_t>((buf[2 * i] << 8) | buf[2 * i + 1]);
    }
  }
  return t;
}

}  // namespace

Tensor read_idx(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  KILN_CHECK(fs::exists(path, ec), "[read_idx] ", path, ": no such file");
  KILN_CHECK(!fs::is_directory(path, ec), "[read_idx] ", path, ": is a directory, not a file");
  uint64_t file_size = fs::file_size(path, ec);
  KILN_CHECK(!ec, "[read_idx] ", path, ": cannot get its size: ", ec.message());

  std::FILE* f = std::fopen(path.c_str(), "rb");
  KILN_CHECK(f != nullptr, "[read_idx] ", path, ": cannot open: ", std::strerror(errno));
  unsigned char sig[2] = {0, 0};
  size_t nsig = std::fread(sig, 1, 2, f);
  bool gzip = nsig == 2 && sig[0] == 0x1f && sig[1] == 0x8b;
  std::unique_ptr<Source> src;
  if (gzip) {
    std::fclose(f);
    src = std::make_unique<GzSource>(path);
  } else {
    std::rewind(f);
    src = std::make_unique<RawSource>(f, path);
  }

  unsigned char magic[4];
  size_t got = src->read(magic, 4);
  KILN_CHECK(got == 4, "[read_idx] ", path, ": too short for an IDX header (", got,
             " bytes, need at least 4)");
  KILN_CHECK(magic[0] == 0 && magic[1] == 0, "[read_idx] ", path, ": bad magic ", hex2(magic[0]),
             " ", hex2(magic[1]), " ", hex2(magic[2]), " ", hex2(magic[3]),
             " (an IDX file starts with 0x00 0x00 <type> <rank>)");
  const IdxType* type = find_type(magic[2]);
  KILN_CHECK(type != nullptr, "[read_idx] ", path, ": unsupported type code ", hex2(magic[2]),
             " (expected 0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32 or 0x0E f64)");
  int rank = magic[3];
  KILN_CHECK(rank >= 1 && rank <= kMaxRank, "[read_idx] ", path, ": unsupported rank ", rank,
             " (expected 1..", kMaxRank, ")");

  unsigned char raw_dims[4 * kMaxRank];
  auto dim_bytes = static_cast<size_t>(4 * rank);
  got = src->read(raw_dims, dim_bytes);
  KILN_CHECK(got == dim_bytes, "[read_idx] ", path, ": truncated header: rank ", rank, " needs ",
             dim_bytes, " bytes of dims, got ", got);
  Dims shape;
  uint64_t numel = 1;
  bool overflow = false;
  for (int d = 0; d < rank; ++d) {
    uint32_t n = load_be32(raw_dims + 4 * d);
    shape.push_back(n);
    overflow = overflow || __builtin_mul_overflow(numel, uint64_t{n}, &numel);
  }
  uint64_t bytes = 0;
  overflow = overflow || __builtin_mul_overflow(numel, uint64_t{8}, &bytes) ||
             numel > static_cast<uint64_t>(INT64_MAX / 8);
  KILN_CHECK(!overflow, "[read_idx] ", path, ": dims ", shape,
             " overflow 64 bits (corrupt header)");
  bytes = numel * type->file_size;

  uint64_t header = 4 + dim_bytes;
  if (gzip) {
    uint64_t bound =
        file_size > UINT64_MAX / kMaxDeflateRatio ? UINT64_MAX : file_size * kMaxDeflateRatio;
    KILN_CHECK(bytes <= bound, "[read_idx] ", path, ": header says shape ", shape, " of ",
               type->name, " (", bytes, " bytes), more than a ", file_size,
               "-byte gzip file can hold (corrupt header?)");
  } else {
    uint64_t avail = file_size - header;  // file_size >= header: the header was read
    KILN_CHECK(bytes <= avail, "[read_idx] ", path,
               ": data is shorter than the header says: "
               "shape ",
               shape, " of ", type->name, " needs ", bytes, " bytes, the file has ", avail,
               " after the header");
  }
  Tensor t = read_data(*src, *type, shape, numel, path);
  // Strict about extra bytes: a mismatch between header and data means a bad file.
  unsigned char extra[64];
  size_t trailing = 0;
  for (size_t n; (n = src->read(extra, sizeof extra)) > 0;) trailing += n;
  KILN_CHECK(trailing == 0, "[read_idx] ", path, ": ", trailing, trailing >= 64 ? "+" : "",
             " trailing bytes after the data of shape ", shape, " (corrupt or wrong header)");
  return t;
}

void write_idx(const std::string& path, const Tensor& t, bool gzip) {
  uint8_t code = 0;
  switch (t.dtype()) {
    case DType::u8:
      code = 0x08;
      break;
    case DType::i32:
      code = 0x0C;
      break;
    case DType::f32:
      code = 0x0D;
      break;
    case DType::f64:
      code = 0x0E;
      break;
    default:
      throw_error(str("[write_idx] ", path, ": dtype ", t.dtype(),
                      " has no IDX type code (use u8, i32, f32 or f64)"));
  }
  KILN_CHECK(t.dim() >= 1 && t.dim() <= kMaxRank, "[write_idx] ", path, ": rank ", t.dim(),
             " is not in 1..", kMaxRank);
  for (int64_t d : t.shape())
    KILN_CHECK(d <= int64_t{UINT32_MAX}, "[write_idx] ", path, ": dim ", d,
               " does not fit the format's 32 bits");
  std::vector<unsigned char> out{0, 0, code, static_cast<unsigned char>(t.dim())};
  for (int64_t d : t.shape())
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<unsigned char>(d >> s));
  Tensor c = t.contiguous();
  size_t header = out.size(), nbytes = static_cast<size_t>(c.numel()) * c.element_size();
  out.resize(header + nbytes);
  if (nbytes) std::memcpy(out.data() + header, c.data_ptr(), nbytes);
  swap_be(out.data() + header, static_cast<size_t>(c.numel()), c.element_size());

  bool ok;
  if (gzip) {
    gzFile g = gzopen(path.c_str(), "wb");
    KILN_CHECK(g != nullptr, "[write_idx] ", path, ": cannot open: ", std::strerror(errno));
    ok = true;
    for (size_t pos = 0; ok && pos < out.size();) {
      auto chunk = static_cast<unsigned>(std::min<size_t>(out.size() - pos, size_t{1} << 30));
      ok = gzwrite(g, out.data() + pos, chunk) == static_cast<int>(chunk);
      pos += chunk;
    }
    ok = (gzclose(g) == Z_OK) && ok;
  } else {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    KILN_CHECK(f != nullptr, "[write_idx] ", path, ": cannot open: ", std::strerror(errno));
    ok = std::fwrite(out.data(), 1, out.size(), f) == out.size();
    ok = (std::fclose(f) == 0) && ok;
  }
  KILN_CHECK(ok, "[write_idx] ", path, ": write failed: ", std::strerror(errno));
}

}  // namespace kiln::data
