// Corrupt and hostile safetensors files: each must raise kiln::Error naming
// the file and the problem, through both the file and the in-memory parser.
#include <gtest/gtest.h>

#include "kiln/functional.h"
#include "runtime/serialize/safetensors_test_util.h"

namespace kiln {
namespace {

using test::make_file;
using test::ScratchDir;

// Expects both load paths to fail with a message naming the input and holding `expected`.
void expect_corrupt(const std::string& bytes, const std::string& expected) {
  SCOPED_TRACE("expected error: " + expected);
  try {
    parse_safetensors(bytes, "corrupt.bin");
    ADD_FAILURE() << "parse_safetensors accepted the input";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("[load] corrupt.bin: "), std::string::npos) << msg;
    EXPECT_NE(msg.find(expected), std::string::npos) << msg;
  }
  ScratchDir dir;
  const std::string path = dir.file("corrupt.safetensors");
  test::write_file(path, bytes);
  try {
    load_safetensors(path);
    ADD_FAILURE() << "load_safetensors accepted the file";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path + ": "), std::string::npos) << msg;
    EXPECT_NE(msg.find(expected), std::string::npos) << msg;
  }
}

// A one-tensor header: U8 of shape [n] at [b, e].
std::string u8_entry(const std::string& name, const std::string& shape, const std::string& offs) {
  return "\"" + name + R"(":{"dtype":"U8","shape":)" + shape + R"(,"data_offsets":)" + offs + "}";
}

TEST(SafetensorsCorrupt, TooShortForTheLengthPrefix) {
  expect_corrupt("", "shorter than the 8-byte header length");
  expect_corrupt("\x02\0\0\0\0\0\0", "shorter than the 8-byte header length");
}

TEST(SafetensorsCorrupt, HeaderLengthPastEndOfFile) {
  std::string f = make_file("{}");
  f[0] = 3;  // claims 3 bytes, file has 2 after the prefix
  expect_corrupt(f, "runs past the end of the 10-byte file");
  expect_corrupt(std::string("\x01\0\0\0\0\0\0\0", 8), "runs past the end");
}

TEST(SafetensorsCorrupt, HeaderLengthOverLimit) {
  std::string f = make_file("{}");
  uint64_t n = 100'000'001;
  for (int i = 0; i < 8; ++i) f[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  expect_corrupt(f, "exceeds the limit of 100000000 bytes");
  expect_corrupt(std::string(8, '\xff') + "{}", "exceeds the limit");
}

TEST(SafetensorsCorrupt, InvalidJson) {
  expect_corrupt(make_file(""), "header is not valid JSON");
  expect_corrupt(make_file("{"), "header is not valid JSON");
  expect_corrupt(make_file("not json"), "header is not valid JSON");
  expect_corrupt(make_file("{} x"), "header is not valid JSON");
  expect_corrupt(make_file(std::string("{}\0\0\0\0\0\0", 8)), "NUL byte at header offset 2");
  expect_corrupt(make_file(std::string("{\"a\0\":1}", 8)), "NUL byte at header offset 3");
  expect_corrupt(make_file("{\"a\":1,}"), "header is not valid JSON");
  expect_corrupt(make_file("{/*c*/}"), "header is not valid JSON");
  expect_corrupt(make_file("{\"\xff\":{}}"), "header is not valid JSON");  // bad UTF-8
  expect_corrupt(make_file("{\"a\":\"\xc3\"}"), "header is not valid JSON");
}

TEST(SafetensorsCorrupt, HeaderNotAnObject) {
  expect_corrupt(make_file("[]"), "header is not a JSON object");
  expect_corrupt(make_file("\"s\""), "header is not a JSON object");
  expect_corrupt(make_file("12"), "header is not a JSON object");
  expect_corrupt(make_file("null"), "header is not a JSON object");
}

TEST(SafetensorsCorrupt, EntryNotAnObject) {
  expect_corrupt(make_file(R"({"a":1})"), "tensor 'a': entry is not a JSON object");
  expect_corrupt(make_file(R"({"a":[0,1]})"), "tensor 'a': entry is not a JSON object");
  expect_corrupt(make_file(R"({"a":null})"), "tensor 'a': entry is not a JSON object");
}

TEST(SafetensorsCorrupt, MissingOrUnknownFields) {
  expect_corrupt(make_file(R"({"a":{"dtype":"U8","data_offsets":[0,1]}})", "x"),
                 "needs the fields dtype, shape and data_offsets");
  expect_corrupt(make_file(R"({"a":{"shape":[1],"data_offsets":[0,1]}})", "x"), "needs the fields");
  expect_corrupt(make_file(R"({"a":{"dtype":"U8","shape":[1]}})", "x"), "needs the fields");
  expect_corrupt(make_file(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":0}})", "x"),
                 "unknown field 'x'");
}

TEST(SafetensorsCorrupt, BadDType) {
  expect_corrupt(make_file(R"({"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", "xxxx"),
                 "tensor 'a' has unknown dtype 'F33'");
  expect_corrupt(make_file(R"({"a":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}})", "xxxx"),
                 "unknown dtype 'f32'");
  expect_corrupt(make_file(R"({"a":{"dtype":"I16","shape":[1],"data_offsets":[0,2]}})", "xx"),
                 "dtype I16, which kiln does not support");
  expect_corrupt(make_file(R"({"a":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", "xxxx"),
                 "dtype is not a string");
}

TEST(SafetensorsCorrupt, BadShape) {
  expect_corrupt(make_file("{" + u8_entry("a", "1", "[0,1]") + "}", "x"), "shape is not an array");
  expect_corrupt(make_file("{" + u8_entry("a", "[-1]", "[0,1]") + "}", "x"),
                 "holds -1, not a non-negative integer");
  expect_corrupt(make_file("{" + u8_entry("a", "[1.0]", "[0,1]") + "}", "x"),
                 "not a non-negative integer");
  expect_corrupt(make_file("{" + u8_entry("a", "[1e0]", "[0,1]") + "}", "x"),
                 "not a non-negative integer");
  expect_corrupt(make_file("{" + u8_entry("a", "[\"1\"]", "[0,1]") + "}", "x"),
                 "not a non-negative integer");
  expect_corrupt(make_file("{" + u8_entry("a", "[null]", "[0,1]") + "}", "x"),
                 "not a non-negative integer");
  expect_corrupt(make_file("{" + u8_entry("a", "[4294967296,4294967296]", "[0,1]") + "}", "x"),
                 "is too large");
  // Empty, yet kiln's strides (products of max(d, 1)) would overflow int64.
  expect_corrupt(make_file("{" + u8_entry("a", "[0,18446744073709551615]", "[0,0]") + "}"),
                 "is too large");
  expect_corrupt(make_file("{" + u8_entry("a", "[0,9223372036854775807,2]", "[0,0]") + "}"),
                 "is too large");
  expect_corrupt(make_file("{" + u8_entry("a", "[99999999999999999999]", "[0,1]") + "}", "x"),
                 "not a non-negative integer");
  std::string rank65 = "[1";
  for (int i = 0; i < 64; ++i) rank65 += ",1";
  expect_corrupt(make_file("{" + u8_entry("a", rank65 + "]", "[0,1]") + "}", "x"), "65 dimensions");
}

TEST(SafetensorsCorrupt, BadDataOffsets) {
  const std::string x = "x";
  expect_corrupt(make_file("{" + u8_entry("a", "[1]", "0") + "}", x), "is not two non-negative");
  expect_corrupt(make_file("{" + u8_entry("a", "[1]", "[0]") + "}", x), "is not two");
  expect_corrupt(make_file("{" + u8_entry("a", "[1]", "[0,1,2]") + "}", x), "is not two");
  expect_corrupt(make_file("{" + u8_entry("a", "[1]", "[-1,0]") + "}", x), "is not two");
  expect_corrupt(make_file("{" + u8_entry("a", "[1]", "[0,1.5]") + "}", x), "is not two");
  expect_corrupt(make_file("{" + u8_entry("a", "[1]", "{}") + "}", x), "is not two");
  expect_corrupt(make_file("{" + u8_entry("a", "[0]", "[1,0]") + "}", x), "end is before begin");
  expect_corrupt(make_file("{" + u8_entry("a", "[1]", "[0,2]") + "}", x),
                 "run past the end of the 1-byte data buffer");
  expect_corrupt(make_file("{" + u8_entry("a", "[1]", "[0,18446744073709551615]") + "}", x),
                 "run past the end");
  expect_corrupt(make_file("{" + u8_entry("a", "[2]", "[0,1]") + "}", x),
                 "hold 1 bytes but shape [2] of U8 needs 2");
  expect_corrupt(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "xxxx"),
                 "hold 4 bytes but shape [2] of F32 needs 8");
}

TEST(SafetensorsCorrupt, OverlapsGapsAndUncoveredBytes) {
  expect_corrupt(
      make_file("{" + u8_entry("a", "[2]", "[0,2]") + "," + u8_entry("b", "[1]", "[1,2]") + "}",
                "xy"),
      "tensor 'b' (bytes [1, 2)) overlaps tensor 'a'");
  expect_corrupt(
      make_file("{" + u8_entry("a", "[2]", "[0,2]") + "," + u8_entry("b", "[2]", "[0,2]") + "}",
                "xy"),
      "overlaps");
  expect_corrupt(
      make_file("{" + u8_entry("a", "[2]", "[0,2]") + "," + u8_entry("z", "[0]", "[1,1]") + "}",
                "xy"),
      "tensor 'z' (bytes [1, 1)) overlaps");
  expect_corrupt(make_file("{" + u8_entry("a", "[1]", "[1,2]") + "}", "xy"),
                 "bytes [0, 1) of the data buffer belong to no tensor (gap before 'a')");
  expect_corrupt(
      make_file("{" + u8_entry("a", "[1]", "[0,1]") + "," + u8_entry("b", "[1]", "[2,3]") + "}",
                "xyz"),
      "gap before 'b'");
  expect_corrupt(make_file("{" + u8_entry("a", "[1]", "[0,1]") + "}", "xy"),
                 "bytes [1, 2) at the end of the data buffer belong to no tensor");
  expect_corrupt(make_file("{}", "junk"), "bytes [0, 4) at the end");
}

TEST(SafetensorsCorrupt, DuplicateKeys) {
  expect_corrupt(
      make_file("{" + u8_entry("a", "[1]", "[0,1]") + "," + u8_entry("a", "[1]", "[1,2]") + "}",
                "xy"),
      "duplicate key 'a' in the header");
  expect_corrupt(make_file(R"({"__metadata__":{"k":"1","k":"2"}})"), "duplicate key 'k'");
  expect_corrupt(make_file(R"({"__metadata__":{},"__metadata__":{}})"),
                 "duplicate key '__metadata__'");
  expect_corrupt(
      make_file(R"({"a":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "x"),
      "duplicate key 'dtype'");
}

TEST(SafetensorsCorrupt, BadMetadata) {
  expect_corrupt(make_file(R"({"__metadata__":[]})"), "__metadata__ is not a JSON object");
  expect_corrupt(make_file(R"({"__metadata__":"s"})"), "__metadata__ is not a JSON object");
  expect_corrupt(make_file(R"({"__metadata__":null})"), "__metadata__ is not a JSON object");
  expect_corrupt(make_file(R"({"__metadata__":{"k":1}})"),
                 "__metadata__ value of 'k' is not a string");
  expect_corrupt(make_file(R"({"__metadata__":{"k":null}})"), "value of 'k' is not a string");
  expect_corrupt(make_file(R"({"__metadata__":{"k":{}}})"), "value of 'k' is not a string");
  expect_corrupt(make_file(R"({"__metadata__":{"k":["v"]}})"), "value of 'k' is not a string");
}

TEST(SafetensorsCorrupt, DeepNesting) {
  expect_corrupt(make_file(R"({"a":{"shape":[[[1]]]}})"), "nested deeper than the format allows");
  expect_corrupt(make_file(std::string(5000, '[') + std::string(5000, ']')), "nested deeper");
  expect_corrupt(make_file(R"({"__metadata__":{"k":{"x":{"y":"z"}}}})"), "nested deeper");
}

// Accepted variants: padding and whitespace, empty names, zero-size tensors
// sharing an offset, and bool bytes other than 0/1 (read as true, like NumPy).
TEST(SafetensorsCorrupt, AcceptedEdgeCases) {
  StateDict sd = parse_safetensors(
      make_file(" \n{" + u8_entry("", "[1]", "[0,1]") + "}      \t ", "\x05"), "edge");
  EXPECT_EQ(sd.at("").to_vector<uint8_t>(), std::vector<uint8_t>{5});

  sd = parse_safetensors(
      make_file("{" + u8_entry("z", "[0]", "[0,0]") + "," + u8_entry("y", "[0,4]", "[0,0]") + "," +
                    u8_entry("a", "[1]", "[0,1]") + "," + u8_entry("w", "[0]", "[1,1]") + "}",
                "x"),
      "edge");
  EXPECT_EQ(sd.keys(), (std::vector<std::string>{"y", "z", "a", "w"}));  // by offset

  sd = parse_safetensors(make_file(R"({"m":{"dtype":"BOOL","shape":[4],"data_offsets":[0,4]}})",
                                   std::string("\x00\x01\x02\xff", 4)),
                         "edge");
  EXPECT_EQ(sd.at("m").to_vector<bool>(), (std::vector<bool>{false, true, true, true}));
  const auto* raw = static_cast<const unsigned char*>(sd.at("m").data_ptr());
  EXPECT_EQ(raw[2], 1);
  EXPECT_EQ(raw[3], 1);
}

// A deterministic mini-fuzz: every truncation and every single-byte change of a
// valid file either loads or raises kiln::Error — nothing else escapes.
TEST(SafetensorsCorrupt, TruncationsAndByteFlipsNeverEscape) {
  StateDict sd;
  sd.set("w", arange(0.0, 6.0, 1.0, DType::f32).reshape({2, 3}));
  sd.set("b", from_vector<bool>({true, false}));
  sd.set("s", scalar_tensor(7, DType::i64));
  const std::string good = serialize_safetensors(sd, {{"k", "v"}});
  for (size_t len = 0; len < good.size(); ++len)
    EXPECT_THROW(parse_safetensors(std::string_view(good).substr(0, len), "trunc"), Error) << len;
  int loaded = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    for (unsigned char v : {0x00, 0x01, 0x20, 0x22, 0x2c, 0x5b, 0x7b, 0x7d, 0x80, 0xff}) {
      std::string bad = good;
      bad[i] = static_cast<char>(v);
      try {
        parse_safetensors(bad, "flip");
        ++loaded;
      } catch (const Error&) {
      }
    }
  }
  EXPECT_GT(loaded, 0);  // data-byte changes load fine
}

}  // namespace
}  // namespace kiln
