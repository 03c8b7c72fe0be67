// Tests of operator<< for tensors: PyTorch-identical layout, number formats,
// summarization and suffixes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>

#include "kiln/kiln.h"

using namespace kiln;

namespace {

std::string to_str(const Tensor& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}

// Throws on value reads, like the tracer.
class ThrowingRecorder : public Recorder {
 public:
  int reads = 0;
  std::vector<Tensor> record(OpId, std::span<const Tensor>, const Attrs&,
                             const std::vector<TensorMeta>&) override {
    return {};
  }
  void on_value_read(const char* what, const std::source_location&) override {
    ++reads;
    throw Error(std::string("[trace] cannot read values of a symbolic tensor (") + what + ")");
  }
  void on_inplace(const Tensor&, const Tensor&) override {}
};

Tensor symbolic(const Dims& shape, DType dt) {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dt;
  return Tensor(std::move(impl));
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

}  // namespace

// Integral-valued floats print as "1." with rows aligned under "tensor(".
TEST(Print, FloatMatrix) {
  EXPECT_EQ(to_str(from_vector<float>({1, 2, 3, 4}, {2, 2})),
            "tensor([[1., 2.],\n        [3., 4.]])");
  EXPECT_EQ(to_str(from_vector<float>({-1, 10, 100})), "tensor([ -1.,  10., 100.])");
  EXPECT_EQ(to_str(zeros({3})), "tensor([0., 0., 0.])");
}

// Non-integral floats use 4 fixed decimals, right-aligned to a common width.
TEST(Print, FixedPoint) {
  EXPECT_EQ(to_str(from_vector<float>({1.5f, -2.25f, 3.0f})),
            "tensor([ 1.5000, -2.2500,  3.0000])");
  EXPECT_EQ(to_str(from_vector<double>({0.1, 12.5})), "tensor([ 0.1000, 12.5000], dtype=f64)");
}

// Wide ranges, huge or tiny values switch to scientific notation.
TEST(Print, Scientific) {
  EXPECT_EQ(to_str(from_vector<float>({1e10f, 1.0f})), "tensor([1.0000e+10, 1.0000e+00])");
  EXPECT_EQ(to_str(from_vector<double>({1e-5, 1.5})),
            "tensor([1.0000e-05, 1.5000e+00], dtype=f64)");
  EXPECT_EQ(to_str(from_vector<double>({-1e9, 0.0})),
            "tensor([-1.0000e+09,  0.0000e+00], "
            "dtype=f64)");
}

// inf and nan print as PyTorch prints them and do not affect the format.
TEST(Print, InfAndNan) {
  float inf = std::numeric_limits<float>::infinity();
  float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(to_str(from_vector<float>({inf, -inf, nan, 1.0f})), "tensor([inf, -inf, nan, 1.])");
  EXPECT_EQ(to_str(from_vector<float>({nan, 0.5f})), "tensor([   nan, 0.5000])");
  EXPECT_EQ(to_str(from_vector<float>({-nan})), "tensor([nan])");
}

// Integers print plainly; bools as True/False padded to a common width.
TEST(Print, IntegersAndBools) {
  EXPECT_EQ(to_str(arange(5)), "tensor([0, 1, 2, 3, 4])");
  EXPECT_EQ(to_str(from_vector<int64_t>({-1, 10, 100})), "tensor([ -1,  10, 100])");
  EXPECT_EQ(to_str(from_vector<int32_t>({1, 2})), "tensor([1, 2], dtype=i32)");
  EXPECT_EQ(to_str(from_vector<uint8_t>({7, 255})), "tensor([  7, 255], dtype=u8)");
  EXPECT_EQ(to_str(from_vector<bool>({true, false})), "tensor([ True, False])");
  int64_t big = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(to_str(full({1}, big, DType::i64)), "tensor([9223372036854775807])");
}

// 0-d tensors print without brackets.
TEST(Print, ZeroDim) {
  EXPECT_EQ(to_str(scalar_tensor(3.0, DType::f32)), "tensor(3.)");
  EXPECT_EQ(to_str(scalar_tensor(2.5, DType::f64)), "tensor(2.5000, dtype=f64)");
  EXPECT_EQ(to_str(scalar_tensor(3, DType::i64)), "tensor(3)");
  EXPECT_EQ(to_str(scalar_tensor(true, DType::b8)), "tensor(True)");
}

// Empty tensors print [] with size for non-1-D shapes and dtype unless f32.
TEST(Print, Empty) {
  EXPECT_EQ(to_str(zeros({0})), "tensor([])");
  EXPECT_EQ(to_str(zeros({2, 0})), "tensor([], size=(2, 0))");
  EXPECT_EQ(to_str(zeros({0}, DType::i64)), "tensor([], dtype=i64)");
  EXPECT_EQ(to_str(zeros({0, 3}, DType::f64)), "tensor([], size=(0, 3), dtype=f64)");
}

// f16/bf16 print with their dtype; f32, i64 and bool omit it.
TEST(Print, DtypeSuffix) {
  EXPECT_EQ(to_str(full({2}, 1.5, DType::f16)), "tensor([1.5000, 1.5000], dtype=f16)");
  EXPECT_EQ(to_str(ones({2}, DType::bf16)), "tensor([1., 1.], dtype=bf16)");
  EXPECT_EQ(to_str(ones({1}, DType::f64)), "tensor([1.], dtype=f64)");
}

// Higher-rank tensors separate blocks with blank lines.
TEST(Print, ThreeDim) {
  EXPECT_EQ(to_str(from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2})),
            "tensor([[[1., 2.],\n"
            "         [3., 4.]],\n"
            "\n"
            "        [[5., 6.],\n"
            "         [7., 8.]]])");
}

// Strided (non-contiguous) views print in logical order.
TEST(Print, NonContiguous) {
  Tensor t = from_vector<int64_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor tt = as_strided(t, {3, 2}, {1, 3}, 0);
  EXPECT_EQ(to_str(tt), "tensor([[1, 4],\n        [2, 5],\n        [3, 6]])");
}

// Long rows wrap at 80 columns, continuation lines aligned after the bracket.
TEST(Print, LineWrap) {
  std::vector<float> v;
  for (int i = 0; i < 12; ++i) v.push_back(0.5f * static_cast<float>(i));
  EXPECT_EQ(to_str(from_vector<float>(v)),
            "tensor([0.0000, 0.5000, 1.0000, 1.5000, 2.0000, 2.5000, 3.0000, 3.5000, 4.0000,\n"
            "        4.5000, 5.0000, 5.5000])");
  std::vector<double> d;
  for (int i = 0; i < 9; ++i) d.push_back(0.5 * i);
  // The suffix does not fit on the 79-column line: it moves to its own line.
  EXPECT_EQ(to_str(from_vector<double>(d)),
            "tensor([0.0000, 0.5000, 1.0000, 1.5000, 2.0000, 2.5000, 3.0000, 3.5000, 4.0000],\n"
            "       dtype=f64)");
}

// Over 1000 elements: 3 edge items per dim with "..." in between.
TEST(Print, Summarized) {
  EXPECT_EQ(to_str(arange(2000)), "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])");
  EXPECT_EQ(to_str(arange(1000)).find("..."), std::string::npos);
  EXPECT_EQ(to_str(from_vector<int64_t>(iota(2000), {100, 20})),
            "tensor([[   0,    1,    2,  ...,   17,   18,   19],\n"
            "        [  20,   21,   22,  ...,   37,   38,   39],\n"
            "        [  40,   41,   42,  ...,   57,   58,   59],\n"
            "        ...,\n"
            "        [1940, 1941, 1942,  ..., 1957, 1958, 1959],\n"
            "        [1960, 1961, 1962,  ..., 1977, 1978, 1979],\n"
            "        [1980, 1981, 1982,  ..., 1997, 1998, 1999]])");
  // The format only looks at shown values: hidden 1e10 does not force sci mode.
  std::vector<float> f(2000, 1.0f);
  f[1000] = 1e10f;
  EXPECT_EQ(to_str(from_vector<float>(f)), "tensor([1., 1., 1.,  ..., 1., 1., 1.])");
}

// Autograd suffixes: requires_grad for leaves, grad_fn for results.
TEST(Print, AutogradSuffixes) {
  Tensor x = from_vector<float>({1, 2});
  x.requires_grad_();
  EXPECT_EQ(to_str(x), "tensor([1., 2.], requires_grad=True)");
  EXPECT_EQ(to_str(x * 2.0), "tensor([2., 4.], grad_fn=<MulBackward>)");
  Tensor d = from_vector<double>({0.5});
  d.requires_grad_();
  EXPECT_EQ(to_str(d), "tensor([0.5000], dtype=f64, requires_grad=True)");
  EXPECT_EQ(to_str(x.detach()), "tensor([1., 2.])");
}

// Symbolic tensors: a recorder is told of the read; without one a placeholder prints.
TEST(Print, Symbolic) {
  Tensor s = symbolic({2, 3}, DType::f32);
  EXPECT_EQ(to_str(s), "tensor(<symbolic>, shape=[2, 3], dtype=f32)");
  ThrowingRecorder rec;
  Recorder* prev = set_recorder(&rec);
  EXPECT_THROW(to_str(s), Error);
  set_recorder(prev);
  EXPECT_EQ(rec.reads, 1);
  EXPECT_EQ(to_str(Tensor()), "tensor(<undefined>)");
}
