// Verifies the IDX reader/writer: round trips (raw and gzip) and every corruption case.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "kiln/data/data.h"
#include "kiln/kiln.h"

using namespace kiln;
using namespace kiln::data;
namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<unsigned char>;

// A per-process scratch directory, removed at the end of each test.
class IdxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kiln_idx_test_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const Bytes& b) const {
    std::ofstream(path(name), std::ios::binary)
        .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    return path(name);
  }
  fs::path dir_;
};

// Header bytes: 00 00 type rank, then big-endian u32 dims.
Bytes header(unsigned char type, const std::vector<uint32_t>& dims) {
  Bytes b{0, 0, type, static_cast<unsigned char>(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<unsigned char>(d >> s));
  return b;
}

Bytes cat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

uint32_t crc32(const Bytes& data) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char byte : data) {
    c ^= byte;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

// gzip with deflate "stored" blocks: a valid stream written without zlib.
Bytes gzip_stored(const Bytes& data) {
  Bytes out{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff};
  size_t pos = 0;
  do {
    size_t n = std::min<size_t>(65535, data.size() - pos);
    bool last = pos + n == data.size();
    out.push_back(last ? 1 : 0);
    out.push_back(static_cast<unsigned char>(n));
    out.push_back(static_cast<unsigned char>(n >> 8));
    out.push_back(static_cast<unsigned char>(~n));
    out.push_back(static_cast<unsigned char>(~n >> 8));
    out.insert(out.end(), data.begin() + static_cast<std::ptrdiff_t>(pos),
               data.begin() + static_cast<std::ptrdiff_t>(pos + n));
    pos += n;
  } while (pos < data.size());
  uint32_t crc = crc32(data), size = static_cast<uint32_t>(data.size());
  for (int s = 0; s < 32; s += 8) out.push_back(static_cast<unsigned char>(crc >> s));
  for (int s = 0; s < 32; s += 8) out.push_back(static_cast<unsigned char>(size >> s));
  return out;
}

// The kiln::Error message read_idx raises for `file` (fails the test if none).
std::string read_error(const std::string& file) {
  try {
    read_idx(file);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "read_idx(" << file << ") did not raise kiln::Error";
  return "";
}

}  // namespace

// Hand-written raw u8 and big-endian i16/i32/f32/f64/i8 files read back with the right values.
TEST_F(IdxTest, ReadsEveryTypeRaw) {
  Tensor u8 = read_idx(write("u8.idx", cat(header(0x08, {2, 3}), {1, 2, 3, 4, 5, 255})));
  EXPECT_EQ(u8.dtype(), DType::u8);
  EXPECT_EQ(u8.shape(), (Dims{2, 3}));
  EXPECT_EQ(u8.to_vector<uint8_t>(), (std::vector<uint8_t>{1, 2, 3, 4, 5, 255}));

  Tensor i8 = read_idx(write("i8.idx", cat(header(0x09, {2}), {0x80, 0x7f})));
  EXPECT_EQ(i8.dtype(), DType::i32);
  EXPECT_EQ(i8.to_vector<int32_t>(), (std::vector<int32_t>{-128, 127}));

  Tensor i16 = read_idx(write("i16.idx", cat(header(0x0B, {2}), {0xff, 0xfe, 0x01, 0x00})));
  EXPECT_EQ(i16.to_vector<int32_t>(), (std::vector<int32_t>{-2, 256}));

  Tensor i32 = read_idx(write("i32.idx", cat(header(0x0C, {1}), {0xff, 0xff, 0xff, 0xfd})));
  EXPECT_EQ(i32.to_vector<int32_t>(), std::vector<int32_t>{-3});

  // 1.5f = 0x3FC00000, -2.0 = 0xC000000000000000.
  Tensor f32 = read_idx(write("f32.idx", cat(header(0x0D, {1, 1}), {0x3f, 0xc0, 0, 0})));
  EXPECT_EQ(f32.dtype(), DType::f32);
  EXPECT_EQ(f32.item<float>(), 1.5f);
  Tensor f64 = read_idx(write("f64.idx", cat(header(0x0E, {1}), {0xc0, 0, 0, 0, 0, 0, 0, 0})));
  EXPECT_EQ(f64.dtype(), DType::f64);
  EXPECT_EQ(f64.item<double>(), -2.0);

  Tensor empty = read_idx(write("empty.idx", header(0x08, {0, 28})));
  EXPECT_EQ(empty.shape(), (Dims{0, 28}));
}

// A gzip stream written without zlib (stored blocks, > 64 KiB) reads back identically.
TEST_F(IdxTest, ReadsGzipStoredBlocks) {
  Bytes data;
  for (int i = 0; i < 70000; ++i) data.push_back(static_cast<unsigned char>(i * 7));
  Bytes file = cat(header(0x08, {70000}), data);
  Tensor t = read_idx(write("big.idx.gz", gzip_stored(file)));
  EXPECT_EQ(t.shape(), (Dims{70000}));
  auto v = t.to_vector<uint8_t>();
  EXPECT_TRUE(std::equal(v.begin(), v.end(), data.begin()));
}

// write_idx then read_idx returns the same tensor for every writable dtype, raw and gzip.
TEST_F(IdxTest, RoundTripRawAndGzip) {
  manual_seed(3);
  std::vector<Tensor> tensors = {randint(0, 256, {3, 4, 5}, DType::i64).to(DType::u8),
                                 randint(-100000, 100000, {7}, DType::i32), randn({2, 3}),
                                 randn({4, 1}, DType::f64)};
  for (bool gz : {false, true}) {
    for (size_t k = 0; k < tensors.size(); ++k) {
      std::string name = std::to_string(k);  // built piecewise: GCC 12 -Wrestrict false alarm
      if (gz) name += ".gz";
      std::string p = path(name);
      write_idx(p, tensors[k], gz);
      Tensor back = read_idx(p);
      EXPECT_EQ(back.dtype(), tensors[k].dtype());
      EXPECT_EQ(back.shape(), tensors[k].shape());
      EXPECT_EQ(back.to_vector<double>(), tensors[k].to_vector<double>());
    }
  }
  // Non-contiguous input is written in logical order.
  Tensor t = arange(0, 6, 1, DType::i32).reshape({2, 3}).t();
  write_idx(path("t.idx"), t);
  EXPECT_EQ(read_idx(path("t.idx")).to_vector<int32_t>(), t.to_vector<int32_t>());
  EXPECT_THROW(write_idx(path("bad.idx"), zeros({2}, DType::i64)), Error);
  EXPECT_THROW(write_idx(path("bad.idx"), zeros({})), Error);
  EXPECT_THROW(write_idx((dir_ / "no" / "such" / "dir.idx").string(), zeros({2})), Error);
}

// Every malformed raw file raises kiln::Error naming the file and the problem.
TEST_F(IdxTest, CorruptRawFiles) {
  struct Case {
    const char* name;
    Bytes bytes;
    const char* expect;
  };
  std::vector<Case> cases = {
      {"empty", {}, "too short"},
      {"short_magic", {0, 0, 8}, "too short"},
      {"bad_magic", cat(Bytes{1, 0, 8, 1, 0, 0, 0, 1}, {7}), "bad magic"},
      {"bad_type", cat(header(0x0A, {1}), {7}), "unsupported type code 0x0A"},
      {"rank0", header(0x08, {}), "unsupported rank 0"},
      {"rank9", header(0x08, std::vector<uint32_t>(9, 1)), "unsupported rank 9"},
      {"short_dims", {0, 0, 8, 3, 0, 0, 0, 2, 0, 0}, "truncated header"},
      {"short_data", cat(header(0x08, {2, 3}), {1, 2, 3, 4, 5}), "shorter than the header"},
      {"short_f32", cat(header(0x0D, {2}), {0, 0, 0, 0, 0, 0}), "shorter than the header"},
      {"huge", cat(header(0x08, {0xffffffff, 0xffffffff, 0xffffffff}), {1}), "overflow"},
      {"big", cat(header(0x0E, {0x10000, 0x10000}), {1, 2}), "shorter than the header"},
      {"trailing", cat(header(0x08, {2}), {1, 2, 3}), "1 trailing bytes"},
  };
  for (const Case& c : cases) {
    std::string file = write(c.name, c.bytes);
    std::string msg = read_error(file);
    EXPECT_NE(msg.find(file), std::string::npos) << c.name << ": " << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.name << ": " << msg;
  }
  std::string msg = read_error(path("missing.idx"));
  EXPECT_NE(msg.find("no such file"), std::string::npos) << msg;
  msg = read_error(dir_.string());
  EXPECT_NE(msg.find("is a directory"), std::string::npos) << msg;
}

// Malformed gzip files (truncated, bad CRC, garbage deflate, lying header) raise kiln::Error.
TEST_F(IdxTest, CorruptGzipFiles) {
  Bytes data;
  for (int i = 0; i < 1000; ++i) data.push_back(static_cast<unsigned char>(i));
  Bytes good = gzip_stored(cat(header(0x08, {10, 100}), data));

  Bytes truncated(good.begin(), good.begin() + 400);
  Bytes bad_crc = good;
  bad_crc[bad_crc.size() - 6] ^= 0xff;
  Bytes garbage = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  Bytes no_body = {0x1f, 0x8b};
  // A 2^40-element header inside a tiny gzip file is rejected before any allocation.
  Bytes lying = gzip_stored(cat(header(0x08, {1 << 20, 1 << 20}), {1, 2, 3}));
  Bytes short_data = gzip_stored(cat(header(0x08, {10, 100}), Bytes(999, 1)));
  Bytes trailing = gzip_stored(cat(header(0x08, {10, 100}), Bytes(1001, 1)));

  struct Case {
    const char* name;
    const Bytes& bytes;
    const char* expect;
  };
  std::vector<Case> cases = {
      {"truncated.gz", truncated, "gzip"},
      {"bad_crc.gz", bad_crc, "gzip"},
      {"garbage.gz", garbage, "gzip"},
      {"no_body.gz", no_body, "gzip"},
      {"lying.gz", lying, "can hold"},
      {"short.gz", short_data, "shorter than"},
      {"trailing.gz", trailing, "trailing bytes"},
  };
  for (const Case& c : cases) {
    std::string file = write(c.name, c.bytes);
    std::string msg = read_error(file);
    EXPECT_NE(msg.find(file), std::string::npos) << c.name << ": " << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.name << ": " << msg;
  }
}

// Random byte flips and truncations of valid files only ever succeed or raise kiln::Error.
TEST_F(IdxTest, RandomCorruptionNeverCrashes) {
  Bytes data;
  for (int i = 0; i < 600; ++i) data.push_back(static_cast<unsigned char>(i * 13));
  write_idx(path("zlib.gz"), from_vector<float>(std::vector<float>(150, 0.5f), {10, 15}), true);
  std::ifstream in(path("zlib.gz"), std::ios::binary);
  Bytes zlib_gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<Bytes> seeds = {cat(header(0x0D, {10, 15}), data), zlib_gz,
                              gzip_stored(cat(header(0x0B, {300}), data))};
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto next = [&] {  // xorshift64: deterministic, no dependence on kiln's RNG
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  int errors = 0;
  for (int iter = 0; iter < 200; ++iter) {
    Bytes b = seeds[static_cast<size_t>(iter) % seeds.size()];
    int flips = 1 + static_cast<int>(next() % 3);
    for (int k = 0; k < flips; ++k) b[next() % b.size()] ^= static_cast<unsigned char>(next());
    if (next() % 4 == 0) b.resize(next() % b.size());
    std::string file = write("fuzz", b);
    try {
      read_idx(file);
    } catch (const Error& e) {
      ++errors;
      EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
    }
  }
  EXPECT_GT(errors, 60);
}
