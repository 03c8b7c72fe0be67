// Pins the user-facing error messages: each names the op and the offending
// shapes or values, and is a kiln::Error (never a crash).
#include <gtest/gtest.h>

#include "common/error_of.h"
#include "kiln/kiln.h"

using namespace kiln;

using kiln::testing::error_of;

// Shape mismatch in broadcasting names both shapes.
TEST(Errors, BroadcastShapeMismatch) {
  EXPECT_EQ(error_of([] {
              add(zeros({2, 3}), zeros({4}));
            }),
            "[add] shapes [2, 3] and [4] cannot be broadcast together (dim 1: 3 vs 4)");
}

// matmul of incompatible shapes names both shapes.
TEST(Errors, MatmulShapes) {
  std::string m = error_of([] { matmul(zeros({2, 3}), zeros({4, 5})); });
  EXPECT_NE(m.find("[matmul]"), std::string::npos) << m;
  EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
  EXPECT_NE(m.find("[4, 5]"), std::string::npos) << m;
}

// dtype mismatch: matmul refuses mixed dtypes; where needs a bool condition.
TEST(Errors, DtypeMismatch) {
  std::string m = error_of([] { matmul(zeros({2, 2}), zeros({2, 2}, DType::f64)); });
  EXPECT_NE(m.find("[matmul]"), std::string::npos) << m;
  EXPECT_NE(m.find("f64"), std::string::npos) << m;
  EXPECT_EQ(error_of([] { where(zeros({2}), zeros({2}), zeros({2})); }),
            "[where] condition must be a bool tensor, got f32");
}

// Index out of range names the index and the dimension size.
TEST(Errors, IndexOutOfRange) {
  EXPECT_EQ(error_of([] { zeros({3}).select(0, 5); }),
            "[select] index 5 is out of range for dimension 0 with size 3");
  EXPECT_EQ(error_of([] { index_select(zeros({3}), 0, from_vector<int64_t>({3})); }),
            "[index_select] index 3 is out of bounds for dimension 0 with size 3");
}

// Wrong rank / wrong dimension.
TEST(Errors, WrongRankAndDim) {
  EXPECT_EQ(error_of([] {
              zeros({2, 3}).sum({2});
            }),
            "[sum] dimension 2 is out of range for a tensor of rank 2 (expected in [-2, 1])");
  EXPECT_EQ(error_of([] {
              zeros({2, 3}).permute({0});
            }),
            "[permute] got 1 dims [0] for a tensor of rank 2");
  std::string m = error_of([] { conv2d(zeros({3, 4}), zeros({1, 1, 1, 1})); });
  EXPECT_NE(m.find("[conv2d]"), std::string::npos) << m;
  EXPECT_NE(m.find("[3, 4]"), std::string::npos) << m;
}

// Reshape to an incompatible element count.
TEST(Errors, ReshapeCount) {
  EXPECT_EQ(error_of([] {
              zeros({2, 3}).reshape({4});
            }),
            "[reshape] shape [4] is invalid for input of shape [2, 3] (6 elements)");
}

// backward through a non-scalar without a gradient.
TEST(Errors, BackwardNonScalar) {
  Tensor x = zeros({2, 2}).requires_grad_();
  EXPECT_EQ(error_of([&] { (x * 2.0).backward(); }),
            "[backward] grad can be implicitly created only for scalar outputs; output 0 has "
            "shape [2, 2] (pass a gradient)");
}

// backward of a tensor that does not require grad.
TEST(Errors, BackwardWithoutGrad) {
  EXPECT_EQ(error_of([] { zeros({1}).backward(); }),
            "[backward] element 0 of tensors does not require grad and does not have a grad_fn");
}

// A tensor saved for backward and modified in place.
TEST(Errors, ModifiedSavedTensor) {
  Tensor x = ones({2}).requires_grad_();
  Tensor y = sigmoid(x * 1.0);
  y.add_(1.0);
  EXPECT_EQ(error_of([&] { y.sum().backward(); }),
            "[sigmoid] a tensor saved for backward was modified by an in-place operation: it is "
            "at version 1, expected version 0");
}

// item() of a multi-element tensor; data<T> of the wrong dtype.
TEST(Errors, ItemAndData) {
  EXPECT_EQ(error_of([] { zeros({2}).item<float>(); }),
            "[item] a tensor with 2 elements (shape [2]) cannot be converted to a scalar");
  EXPECT_EQ(error_of([] { zeros({2}).data<double>(); }),
            "[data] tensor has dtype f32, asked for f64");
}

// In-place on a leaf requiring grad, and integer tensors requiring grad.
TEST(Errors, AutogradMisuse) {
  Tensor x = zeros({2}).requires_grad_();
  EXPECT_NE(error_of([&] { x.mul_(2.0); }).find("[mul_] a leaf tensor that requires grad"),
            std::string::npos);
  EXPECT_EQ(error_of([] { zeros({2}, DType::i64).requires_grad_(); }),
            "[requires_grad_] only floating tensors can require gradients, got i64");
}

// Undefined tensors passed to ops.
TEST(Errors, UndefinedTensor) {
  EXPECT_EQ(error_of([] { add(Tensor(), zeros({1})); }), "[add] input 0 is an undefined tensor");
}
