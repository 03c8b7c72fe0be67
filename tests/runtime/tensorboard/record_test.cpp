// TFRecord framing of TensorBoard event files: CRC32C known vectors, the
// masked CRC, the record layout, and corrupt or truncated records refused.
#include <gtest/gtest.h>

#include <string>

#include "kiln/error.h"
#include "kiln/tensorboard/record.h"
#include "runtime/serialize/safetensors_test_util.h"

namespace kiln::tensorboard {
namespace {

std::string iota_bytes(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s.push_back(static_cast<char>(i));
  return s;
}

// The check value of CRC-32C and RFC 3720's (iSCSI) test vectors.
TEST(TensorboardRecord, Crc32cKnownVectors) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(""), 0u);
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  EXPECT_EQ(crc32c(iota_bytes(32)), 0x46DD794Eu);
}

// Values from TensorBoard's own masked_crc32c.
TEST(TensorboardRecord, MaskedCrcMatchesTensorboard) {
  EXPECT_EQ(mask_crc(0), 0xa282ead8u);
  EXPECT_EQ(mask_crc(crc32c("123456789")), 0xc78ab0e5u);
}

// uint64 length, masked CRC of the length, data, masked CRC of the data; all little-endian.
TEST(TensorboardRecord, FrameLayout) {
  const std::string rec = frame_record("abc");
  ASSERT_EQ(rec.size(), 8u + 4 + 3 + 4);
  EXPECT_EQ(rec.substr(0, 8), std::string("\x03\0\0\0\0\0\0\0", 8));
  auto u32_at = [&](size_t at) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t(static_cast<unsigned char>(rec[at + i])) << (8 * i);
    return v;
  };
  EXPECT_EQ(u32_at(8), mask_crc(crc32c(rec.substr(0, 8))));
  EXPECT_EQ(rec.substr(12, 3), "abc");
  EXPECT_EQ(u32_at(15), mask_crc(crc32c("abc")));
}

TEST(TensorboardRecord, ParseRoundTrip) {
  const std::vector<std::string> data = {"first", "", std::string(1000, 'x'), iota_bytes(256)};
  std::string file;
  for (const auto& d : data) file += frame_record(d);
  EXPECT_EQ(parse_records(file, "mem"), data);
  EXPECT_TRUE(parse_records("", "mem").empty());
}

// Every single-bit flip and every truncation is an error naming the file, never a crash.
TEST(TensorboardRecord, CorruptRecordsAreRefused) {
  const std::string file = frame_record("hello") + frame_record("world!");
  for (size_t byte = 0; byte < file.size(); ++byte)
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = file;
      bad[byte] = static_cast<char>(bad[byte] ^ (1 << bit));
      try {
        parse_records(bad, "flipped.tfevents");
        ADD_FAILURE() << "accepted a flip of bit " << bit << " of byte " << byte;
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("flipped.tfevents"), std::string::npos) << e.what();
      }
    }
  for (size_t len = 1; len < file.size(); ++len) {
    if (len == frame_record("hello").size()) continue;  // a whole first record
    EXPECT_THROW(parse_records(std::string_view(file).substr(0, len), "cut"), Error) << len;
  }
}

// A length past the end (as a huge uint64 would be) is refused before any read.
TEST(TensorboardRecord, HugeLengthIsRefused) {
  std::string rec = frame_record("x");
  std::string len(8, '\xff');
  std::string bad = len;
  const uint32_t crc = mask_crc(crc32c(len));
  for (int i = 0; i < 4; ++i) bad.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
  bad += rec.substr(12);
  try {
    parse_records(bad, "huge");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("claims 18446744073709551615 bytes"), std::string::npos)
        << e.what();
  }
}

TEST(TensorboardRecord, ReadRecordsNamesAMissingFile) {
  test::ScratchDir dir;
  const std::string path = dir.file("absent.tfevents");
  try {
    read_records(path);
    ADD_FAILURE() << "read a missing file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  test::write_file(path, frame_record("a") + frame_record("bc"));
  EXPECT_EQ(read_records(path), (std::vector<std::string>{"a", "bc"}));
}

}  // namespace
}  // namespace kiln::tensorboard
