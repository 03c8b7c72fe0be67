// safetensors save/load: bit-exact round trips of every dtype, layout
// identical to the reference implementation, strided and big tensors,
// metadata, save-side errors and atomic writes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>

#include "kiln/autograd.h"
#include "kiln/functional.h"
#include "runtime/serialize/safetensors_test_util.h"
#include "serialize/safetensors_format.h"

namespace kiln {
namespace {

using test::bytes_of;
using test::expect_same;
using test::from_bytes;
using test::make_file;
using test::read_file;
using test::ScratchDir;

constexpr DType kAllDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                                DType::i64, DType::i32, DType::u8,  DType::b8};

// A tensor of random bytes (0/1 for bool), so floats include NaN payloads,
// infinities and subnormals: a round trip must keep every bit.
Tensor random_tensor(const Dims& shape, DType dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  Tensor t = make_tensor(shape, dtype);
  auto* p = static_cast<unsigned char*>(t.data_ptr());
  size_t n = static_cast<size_t>(t.numel()) * t.element_size();
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>(rng() & 0xff);
  if (dtype == DType::b8)
    for (size_t i = 0; i < n; ++i) p[i] &= 1;
  return t;
}

StateDict every_dtype() {
  StateDict sd;
  uint32_t seed = 1;
  for (DType dt : kAllDTypes) {
    sd.set(std::string("t_") + dtype_name(dt), random_tensor({3, 5}, dt, seed++));
    sd.set(std::string("s_") + dtype_name(dt), random_tensor({}, dt, seed++));
    sd.set(std::string("e_") + dtype_name(dt), random_tensor({2, 0, 3}, dt, seed++));
  }
  return sd;
}

// Same entries in the order a load returns them (file order).
StateDict in_file_order(const StateDict& sd) {
  return parse_safetensors(serialize_safetensors(sd), "reorder");
}

TEST(SafetensorsRoundTrip, EveryDTypeBitExactThroughFile) {
  ScratchDir dir;
  StateDict sd = every_dtype();
  save_safetensors(dir.file("all.safetensors"), sd);
  StateDict back = load_safetensors(dir.file("all.safetensors"));
  expect_same(in_file_order(sd), back);
  for (const auto& [name, t] : sd) {
    // (kiln's is_contiguous() says false for some empty tensors, e.g. [2, 0, 3])
    if (t.numel() > 0) {
      EXPECT_TRUE(back.at(name).is_contiguous()) << name;
    }
    EXPECT_EQ(bytes_of(back.at(name)), bytes_of(t)) << name;
  }
}

TEST(SafetensorsRoundTrip, InMemoryMatchesFile) {
  ScratchDir dir;
  StateDict sd = every_dtype();
  save_safetensors(dir.file("a.safetensors"), sd, {{"k", "v"}});
  EXPECT_EQ(read_file(dir.file("a.safetensors")), serialize_safetensors(sd, {{"k", "v"}}));
  SafetensorsMetadata md;
  expect_same(parse_safetensors(serialize_safetensors(sd), "mem", &md),
              load_safetensors(dir.file("a.safetensors")));
  EXPECT_TRUE(md.empty());
}

TEST(SafetensorsRoundTrip, AliasesSaveAndLoad) {
  ScratchDir dir;
  StateDict sd;
  sd.set("w", from_vector<float>({1.f, 2.f, 3.f, 4.f}, {2, 2}));
  save(dir.file("m.safetensors"), sd);
  StateDict back = load(dir.file("m.safetensors"));
  EXPECT_EQ(back.at("w").to_vector<float>(), (std::vector<float>{1.f, 2.f, 3.f, 4.f}));
}

// Byte layouts the reference implementation's own tests expect.
TEST(SafetensorsRoundTrip, LayoutMatchesReferenceImplementation) {
  StateDict sd;
  sd.set("attn.0", arange(0.0, 6.0, 1.0, DType::f32).reshape({1, 2, 3}));
  std::string header = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
  ASSERT_EQ(header.size(), 64u);
  std::string data;
  for (float f : {0.f, 1.f, 2.f, 3.f, 4.f, 5.f})
    data.append(reinterpret_cast<const char*>(&f), sizeof f);
  EXPECT_EQ(serialize_safetensors(sd), make_file(header, data));

  EXPECT_EQ(serialize_safetensors(StateDict{}), make_file("{}      "));
  EXPECT_EQ(serialize_safetensors(StateDict{}, {{"framework", "pt"}}),
            make_file(R"({"__metadata__":{"framework":"pt"}})" + std::string(5, ' ')));
}

TEST(SafetensorsRoundTrip, HeaderIsPaddedToEightBytes) {
  for (int len = 1; len <= 9; ++len) {
    StateDict sd;
    sd.set(std::string(static_cast<size_t>(len), 'x'), from_vector<uint8_t>({7}));
    std::string bytes = serialize_safetensors(sd);
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    EXPECT_EQ(n % 8, 0u) << len;
    EXPECT_EQ(bytes.size(), 8 + n + 1);
    EXPECT_EQ(bytes.back(), '\x07');
  }
}

// Descending dtype alignment, then name — what the Python package writes.
TEST(SafetensorsRoundTrip, WriteOrderMatchesPythonPackage) {
  StateDict sd;
  sd.set("b", zeros({1}, DType::u8));
  sd.set("g", zeros({1}, DType::b8));
  sd.set("a", zeros({1}, DType::u8));
  sd.set("f", zeros({1}, DType::f16));
  sd.set("e", zeros({1}, DType::bf16));
  sd.set("h", zeros({1}, DType::i32));
  sd.set("i", zeros({1}, DType::f32));
  sd.set("c", zeros({1}, DType::f64));
  sd.set("d", zeros({1}, DType::i64));
  EXPECT_EQ(in_file_order(sd).keys(),
            (std::vector<std::string>{"d", "c", "i", "h", "e", "f", "a", "b", "g"}));
}

TEST(SafetensorsRoundTrip, ZeroDimAndZeroSizeTensors) {
  ScratchDir dir;
  StateDict sd;
  sd.set("scalar", scalar_tensor(2.5, DType::f64));
  sd.set("empty", zeros({0}));
  sd.set("empty3", zeros({4, 0, 2}, DType::i64));
  sd.set("empty_bool", zeros({0, 7}, DType::b8));
  save_safetensors(dir.file("z.safetensors"), sd);
  StateDict back = load_safetensors(dir.file("z.safetensors"));
  EXPECT_EQ(back.at("scalar").dim(), 0);
  EXPECT_EQ(back.at("scalar").item<double>(), 2.5);
  EXPECT_EQ(back.at("empty").shape(), Dims({0}));
  EXPECT_EQ(back.at("empty3").shape(), Dims({4, 0, 2}));
  EXPECT_EQ(back.at("empty3").dtype(), DType::i64);
  EXPECT_EQ(back.at("empty_bool").shape(), Dims({0, 7}));
  EXPECT_EQ(load_safetensors(dir.file("z.safetensors")).size(), 4u);
}

TEST(SafetensorsRoundTrip, EmptyStateDict) {
  ScratchDir dir;
  save_safetensors(dir.file("e.safetensors"), StateDict{});
  EXPECT_TRUE(load_safetensors(dir.file("e.safetensors")).empty());
}

TEST(SafetensorsRoundTrip, StridedTensorsAreWrittenContiguous) {
  Tensor base = arange(0.0, 24.0, 1.0, DType::f64).reshape({2, 3, 4});
  StateDict sd;
  sd.set("transposed", base.transpose(0, 2));
  sd.set("stepped", base.slice(2, 0, 4, 3));
  sd.set("selected", base.select(1, 2));
  sd.set("expanded", from_vector<int32_t>({5, 6}).unsqueeze(1).expand({2, 3}));
  sd.set("offset_view", base.flatten().narrow(0, 5, 7));
  StateDict back = parse_safetensors(serialize_safetensors(sd), "strided");
  for (const auto& [name, t] : sd) {
    const Tensor& u = back.at(name);
    EXPECT_EQ(u.shape(), t.shape()) << name;
    EXPECT_TRUE(u.is_contiguous()) << name;
    EXPECT_EQ(bytes_of(u), bytes_of(t)) << name;
  }
  EXPECT_EQ(back.at("expanded").to_vector<int32_t>(), (std::vector<int32_t>{5, 5, 5, 6, 6, 6}));
  EXPECT_EQ(back.at("stepped").to_vector<double>(),
            (std::vector<double>{0, 3, 4, 7, 8, 11, 12, 15, 16, 19, 20, 23}));
  EXPECT_FALSE(sd.at("transposed").is_contiguous());  // the source is untouched
}

TEST(SafetensorsRoundTrip, BigTensors) {
  ScratchDir dir;
  StateDict sd;
  sd.set("big", random_tensor({1024, 1024, 3}, DType::f32, 7));  // 12 MiB
  sd.set("big_t", random_tensor({512, 2048}, DType::bf16, 8).t());
  sd.set("small", random_tensor({3}, DType::i64, 9));
  save_safetensors(dir.file("big.safetensors"), sd);
  StateDict back = load_safetensors(dir.file("big.safetensors"));
  for (const auto& [name, t] : sd) EXPECT_TRUE(bytes_of(back.at(name)) == bytes_of(t)) << name;
}

TEST(SafetensorsRoundTrip, RequiresGradTensorsSaveTheirValues) {
  Tensor w = from_vector<float>({1.f, -2.f}).requires_grad_();
  StateDict sd;
  sd.set("w", w);
  sd.set("wt", w.unsqueeze(0).t());  // a non-leaf view
  StateDict back = parse_safetensors(serialize_safetensors(sd), "grad");
  EXPECT_FALSE(back.at("w").requires_grad());
  EXPECT_EQ(back.at("wt").to_vector<float>(), (std::vector<float>{1.f, -2.f}));
}

TEST(SafetensorsRoundTrip, MetadataRoundTrip) {
  ScratchDir dir;
  SafetensorsMetadata md{{"format", "pt"},
                         {"empty", ""},
                         {"quotes \"and\" \\ slashes", "line\nbreak\ttab\x01\x7f"},
                         {"unicode \xc3\xa9\xe2\x82\xac", "\xf0\x9f\x94\xa5"},
                         {"json", R"({"nested": [1, 2]})"}};
  StateDict sd;
  sd.set("x", ones({2}));
  save_safetensors(dir.file("md.safetensors"), sd, md);
  SafetensorsMetadata back{{"stale", "entry"}};
  load_safetensors(dir.file("md.safetensors"), &back);
  EXPECT_EQ(back, md);

  save_safetensors(dir.file("nomd.safetensors"), sd);
  load_safetensors(dir.file("nomd.safetensors"), &back);
  EXPECT_TRUE(back.empty());
  EXPECT_EQ(read_file(dir.file("nomd.safetensors")).find("__metadata__"), std::string::npos);
}

TEST(SafetensorsRoundTrip, UnusualNames) {
  StateDict sd;
  sd.set("", ones({1}));
  sd.set("layer.0.w\xc3\xa9ight", ones({1}));
  sd.set("with \"quote\" and \\ and \n", ones({1}));
  sd.set("__metadata", ones({1}));
  StateDict back = parse_safetensors(serialize_safetensors(sd), "names");
  for (const auto& [name, t] : sd) EXPECT_TRUE(back.contains(name)) << name;
  EXPECT_EQ(back.size(), 4u);
}

TEST(SafetensorsRoundTrip, OverwritesExistingFile) {
  ScratchDir dir;
  StateDict a, b;
  a.set("a", ones({100}));
  b.set("b", zeros({2}, DType::i32));
  save_safetensors(dir.file("m.safetensors"), a);
  save_safetensors(dir.file("m.safetensors"), b);
  EXPECT_EQ(load_safetensors(dir.file("m.safetensors")).keys(), std::vector<std::string>{"b"});
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"m.safetensors"});
}

// ---- save-side errors: nothing is written ----

void expect_save_error(const StateDict& sd, const std::string& expected,
                       const SafetensorsMetadata& md = {}) {
  ScratchDir dir;
  const std::string path = dir.file("out.safetensors");
  try {
    save_safetensors(path, sd, md);
    ADD_FAILURE() << "no error; expected '" << expected << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_TRUE(dir.entries().empty()) << "save left files behind";
  EXPECT_THROW(serialize_safetensors(sd, md), Error);
}

TEST(SafetensorsSave, RejectsUndefinedTensor) {
  StateDict sd;
  sd.set("ok", ones({1}));
  sd.set("missing", Tensor());
  expect_save_error(sd, "'missing' is undefined");
}

TEST(SafetensorsSave, RejectsSymbolicTensor) {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = {2};
  impl->strides = {1};
  StateDict sd;
  sd.set("sym", Tensor(impl));
  expect_save_error(sd, "symbolic");
}

TEST(SafetensorsSave, RejectsNonCpuTensor) {
  Tensor cpu = ones({2});
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = cpu.impl()->storage;
  impl->shape = {2};
  impl->strides = {1};
  impl->device = Device::cuda(0);
  StateDict sd;
  sd.set("gpu", Tensor(impl));
  expect_save_error(sd, "cuda:0");
}

TEST(SafetensorsSave, RejectsReservedAndInvalidNames) {
  StateDict reserved;
  reserved.set("__metadata__", ones({1}));
  expect_save_error(reserved, "reserved");
  StateDict bad_utf8;
  bad_utf8.set("bad\xff", ones({1}));
  expect_save_error(bad_utf8, "not valid UTF-8");
  StateDict sd;
  sd.set("x", ones({1}));
  expect_save_error(sd, "not valid UTF-8", {{"k", "\xc3"}});
  expect_save_error(sd, "not valid UTF-8", {{"\x80", "v"}});
}

TEST(SafetensorsSave, MissingDirectoryOrDirectoryTarget) {
  ScratchDir dir;
  StateDict sd;
  sd.set("x", ones({1}));
  EXPECT_THROW(save_safetensors(dir.file("no/such/dir/x.safetensors"), sd), Error);
  std::filesystem::create_directory(dir.file("target_dir"));
  EXPECT_THROW(save_safetensors(dir.file("target_dir"), sd), Error);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"target_dir"});  // temp file removed
}

TEST(SafetensorsSave, LoadErrorsNameTheFile) {
  ScratchDir dir;
  try {
    load_safetensors(dir.file("absent.safetensors"));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("absent.safetensors: cannot open"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(load_safetensors(dir.path().string()), Error);  // a directory
}

// ---- atomic writes ----

class SafetensorsAtomic : public ::testing::Test {
 protected:
  void TearDown() override { safetensors::set_write_hook(nullptr); }
};

TEST_F(SafetensorsAtomic, FailureMidwayLeavesTargetUnchanged) {
  ScratchDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  StateDict old_sd;
  old_sd.set("old", from_vector<int64_t>({1, 2, 3}));
  save_safetensors(path, old_sd);
  const std::string before = read_file(path);

  StateDict new_sd;
  new_sd.set("a", random_tensor({1000}, DType::f32, 1));
  new_sd.set("b", random_tensor({1000}, DType::f64, 2));
  int calls = 0;
  safetensors::set_write_hook([&](uint64_t written) {
    if (++calls == 3) {  // header and one tensor are on disk by now
      EXPECT_GT(written, 4000u);
      throw std::runtime_error("injected: disk full");
    }
  });
  EXPECT_THROW(save_safetensors(path, new_sd), std::runtime_error);
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(read_file(path), before);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"ckpt.safetensors"});  // no temp file

  safetensors::set_write_hook(nullptr);
  save_safetensors(path, new_sd);
  expect_same(load_safetensors(path), in_file_order(new_sd));
}

TEST_F(SafetensorsAtomic, FailureWithoutPreviousFileLeavesNothing) {
  ScratchDir dir;
  StateDict sd;
  sd.set("a", ones({10}));
  safetensors::set_write_hook([](uint64_t) { throw Error("injected"); });
  EXPECT_THROW(save_safetensors(dir.file("new.safetensors"), sd), Error);
  EXPECT_TRUE(dir.entries().empty());
}

// A process killed mid-save never leaves a truncated file at the target (the
// orphaned temp file, named <target>.tmp.<pid>.<random>, is all that remains),
// and the next save to that target removes the orphan.
TEST_F(SafetensorsAtomic, CrashMidwayLeavesTargetUnchanged) {
  // "fast" (plain fork): the child must write into this process's scratch dir;
  // the "threadsafe" style re-runs the test body, making a directory of its own.
  GTEST_FLAG_SET(death_test_style, "fast");
  ScratchDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  StateDict old_sd;
  old_sd.set("old", from_vector<int32_t>({4, 5}));
  save_safetensors(path, old_sd);
  const std::string before = read_file(path);
  StateDict new_sd;
  new_sd.set("a", random_tensor({4096}, DType::f32, 3));
  new_sd.set("b", random_tensor({4096}, DType::f32, 4));
  EXPECT_EXIT(
      {
        safetensors::set_write_hook([](uint64_t written) {
          if (written > 0) std::_Exit(3);
        });
        save_safetensors(path, new_sd);
      },
      ::testing::ExitedWithCode(3), "");
  EXPECT_EQ(read_file(path), before);
  std::vector<std::string> names = dir.entries();
  ASSERT_EQ(names.size(), 2u);  // the target and the dead child's partial temp file
  EXPECT_EQ(names[0], "ckpt.safetensors");
  EXPECT_EQ(names[1].rfind("ckpt.safetensors.tmp.", 0), 0u) << names[1];
  EXPECT_LT(std::filesystem::file_size(dir.path() / names[1]), 8u + 4096 * 4 * 2);

  save_safetensors(path, new_sd);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"ckpt.safetensors"}) << "stale temp file kept";
  expect_same(load_safetensors(path), in_file_order(new_sd));
}

}  // namespace
}  // namespace kiln
