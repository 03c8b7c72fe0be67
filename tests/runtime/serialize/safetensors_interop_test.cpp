// Interoperability with the reference implementation (PyPI `safetensors`):
// kiln loads a file the package wrote (tests/fixtures/safetensors/), writes
// it back byte for byte, and the package loads files kiln writes.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "kiln/functional.h"
#include "runtime/serialize/safetensors_test_util.h"

namespace kiln {
namespace {

using test::bytes_of;
using test::read_file;
using test::ScratchDir;
using test::unhex;

const std::string kFixtureDir =
    (std::filesystem::path(KILN_TESTS_DIR) / "fixtures/safetensors").string();
const std::string kFixture = kFixtureDir + "/fixture.safetensors";

// Name, dtype, shape and the bytes make_fixture.py printed, in file order.
struct Expected {
  std::string name;
  DType dtype;
  Dims shape;
  std::string hex;
};
const std::vector<Expected> kFixtureTensors = {
    {"i64", DType::i64, {2}, "0000000000000080ffffffffffffff7f"},
    {"f64", DType::f64, {3}, "555555555555d53f9c7500883ce437fe0100000000000000"},
    {"empty", DType::f32, {0, 3}, ""},
    {"f32", DType::f32, {2, 3}, "000000800000c03f000010c0ffff7f7f0000807f0000c07f"},
    {"scalar", DType::f32, {}, "00002a42"},
    {"i32", DType::i32, {2, 2}, "ffffffff00000000ffffff7f00000080"},
    {"layer.0.w\xc3\xa9ight",
     DType::i32,
     {3, 2},
     "000000000100000002000000030000000400000005000000"},
    {"bf16", DType::bf16, {4}, "803f40c0807f0100"},
    {"f16", DType::f16, {2, 2}, "003800bcff7b0100"},
    {"u8", DType::u8, {4}, "000180ff"},
    {"mask", DType::b8, {3}, "010001"},
};

TEST(SafetensorsInterop, LoadsFixtureWrittenByPython) {
  SafetensorsMetadata md;
  StateDict sd = load_safetensors(kFixture, &md);
  EXPECT_EQ(md, (SafetensorsMetadata{{"format", "kiln-fixture-v1"}}));
  ASSERT_EQ(sd.size(), kFixtureTensors.size());
  size_t i = 0;
  for (const auto& [name, t] : sd) {
    const Expected& e = kFixtureTensors[i++];
    EXPECT_EQ(name, e.name);
    EXPECT_EQ(t.dtype(), e.dtype) << name;
    EXPECT_EQ(t.shape(), e.shape) << name;
    EXPECT_EQ(bytes_of(t), unhex(e.hex)) << name;
  }
  // The same values read through kiln's typed accessors.
  EXPECT_EQ(sd.at("i64").to_vector<int64_t>(), (std::vector<int64_t>{INT64_MIN, INT64_MAX}));
  EXPECT_EQ(sd.at("i32").to_vector<int32_t>(), (std::vector<int32_t>{-1, 0, INT32_MAX, INT32_MIN}));
  EXPECT_EQ(sd.at("u8").to_vector<uint8_t>(), (std::vector<uint8_t>{0, 1, 128, 255}));
  EXPECT_EQ(sd.at("mask").to_vector<bool>(), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(sd.at("scalar").item<float>(), 42.5f);
  std::vector<float> f32 = sd.at("f32").to_vector<float>();
  EXPECT_TRUE(f32[0] == 0.f && std::signbit(f32[0]));
  EXPECT_EQ(f32[1], 1.5f);
  EXPECT_EQ(f32[2], -2.25f);
  EXPECT_EQ(f32[3], 3.4028235e38f);
  EXPECT_TRUE(std::isinf(f32[4]) && f32[4] > 0);
  EXPECT_TRUE(std::isnan(f32[5]));
  std::vector<double> f64 = sd.at("f64").to_vector<double>();
  EXPECT_EQ(f64[0], 1.0 / 3.0);
  EXPECT_EQ(f64[1], -1e300);
  EXPECT_EQ(f64[2], 5e-324);
  EXPECT_EQ(element_as_double(sd.at("f16"), 0), 0.5);
  EXPECT_EQ(element_as_double(sd.at("f16"), 2), 65504.0);
  EXPECT_EQ(element_as_double(sd.at("bf16"), 1), -3.0);
  EXPECT_TRUE(std::isinf(element_as_double(sd.at("bf16"), 2)));
  EXPECT_EQ(sd.at("layer.0.w\xc3\xa9ight").to_vector<int32_t>(),
            (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
}

// Same order, JSON text and padding as the Python package: byte-identical.
TEST(SafetensorsInterop, RewritesFixtureByteForByte) {
  SafetensorsMetadata md;
  StateDict sd = load_safetensors(kFixture, &md);
  EXPECT_EQ(serialize_safetensors(sd, md), read_file(kFixture));
}

// Runs `command` under a timeout; returns its exit status and stdout+stderr.
int run(const std::string& command, std::string* output) {
  FILE* p = ::popen(("timeout 120 " + command + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) output->append(buf, n);
  int status = ::pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

bool python_has_safetensors(std::string* why) {
  return run("python3 -c 'import safetensors, numpy'", why) == 0;
}

// The Python check: every tensor's dtype, shape and exact bytes, and the metadata.
constexpr const char* kPythonCheck = R"PY(
import sys, numpy as np
from safetensors import safe_open, deserialize
path = sys.argv[1]
def require(cond, what):  # not assert: python -O would skip it
    if not cond:
        raise SystemExit(f"mismatch: {what}")
with open(path, "rb") as f:
    raw = {name: t for name, t in deserialize(f.read())}
with safe_open(path, framework="np") as f:
    require(f.metadata() == {"format": "kiln", "note": "caf\u00e9 \"quoted\"\n"}, f.metadata())
    require(sorted(f.keys()) == sorted(raw), (f.keys(), list(raw)))
    arrays = {k: f.get_tensor(k) for k in f.keys() if raw[k]["dtype"] != "BF16"}
def check(name, dtype, shape, values):
    t = raw[name]
    require(t["dtype"] == dtype and list(t["shape"]) == shape, (name, t["dtype"], t["shape"]))
    if dtype == "BF16":
        got = np.frombuffer(bytes(t["data"]), dtype=np.uint16)
        require(list(got) == values, (name, got))
    else:
        a = arrays[name]
        require(list(a.shape) == shape, (name, a.shape))
        exp = np.array(values, dtype=a.dtype).reshape(shape)
        require(np.array_equal(a, exp, equal_nan=a.dtype.kind == "f"), (name, a, exp))
check("f32", "F32", [2, 2], [1.5, -0.0, float("inf"), float("nan")])
check("f64", "F64", [3], [1.0 / 3.0, -1e300, 5e-324])
check("f16", "F16", [2], [0.5, 65504.0])
check("bf16", "BF16", [3], [0x3F80, 0xC040, 0x7F80])
check("i64", "I64", [2], [-2**63, 2**63 - 1])
check("i32", "I32", [3, 2], [0, 3, 1, 4, 2, 5])
check("u8", "U8", [3], [0, 128, 255])
check("mask", "BOOL", [2, 2], [True, False, False, True])
check("scalar", "F64", [], 2.5)
check("empty", "I32", [0, 4], [])
require(np.signbit(arrays["f32"][0, 1]), "-0.0 lost its sign")
print("OK")
)PY";

TEST(SafetensorsInterop, PythonLoadsFileWrittenByKiln) {
  std::string why;
  if (!python_has_safetensors(&why))
    GTEST_SKIP() << "python3 with the safetensors and numpy packages is not available: " << why;
  ScratchDir dir;
  StateDict sd;
  sd.set("f32", from_vector<float>({1.5f, -0.0f, INFINITY, NAN}, {2, 2}));
  sd.set("f64", from_vector<double>({1.0 / 3.0, -1e300, 5e-324}));
  sd.set("f16", from_vector<float>({0.5f, 65504.f}).to(DType::f16));
  sd.set("bf16", from_vector<float>({1.f, -3.f, INFINITY}).to(DType::bf16));
  sd.set("i64", from_vector<int64_t>({INT64_MIN, INT64_MAX}));
  sd.set("i32", arange(0, 6, 1, DType::i32).reshape({2, 3}).t());  // strided
  sd.set("u8", from_vector<uint8_t>({0, 128, 255}));
  sd.set("mask", from_vector<bool>({true, false, false, true}, {2, 2}));
  sd.set("scalar", scalar_tensor(2.5, DType::f64));
  sd.set("empty", zeros({0, 4}, DType::i32));
  const std::string path = dir.file("from_kiln.safetensors");
  save_safetensors(path, sd, {{"format", "kiln"}, {"note", "caf\xc3\xa9 \"quoted\"\n"}});
  const std::string script = dir.file("check.py");
  test::write_file(script, kPythonCheck);
  std::string out;
  int rc = run("python3 '" + script + "' '" + path + "'", &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("OK"), std::string::npos) << out;
}

// The installed package still writes what the committed fixture holds.
TEST(SafetensorsInterop, FixtureScriptReproducesFixture) {
  std::string why;
  if (!python_has_safetensors(&why))
    GTEST_SKIP() << "python3 with the safetensors and numpy packages is not available: " << why;
  ScratchDir dir;
  const std::string out_path = dir.file("regenerated.safetensors");
  std::string out;
  int rc = run("python3 '" + kFixtureDir + "/make_fixture.py' '" + out_path + "'", &out);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(read_file(out_path), read_file(kFixture));
  test::expect_same(load_safetensors(out_path), load_safetensors(kFixture));
}

}  // namespace
}  // namespace kiln
