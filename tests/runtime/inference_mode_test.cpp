// kiln::InferenceMode: PyTorch's inference-mode guard records no tape.
#include <gtest/gtest.h>

#include "kiln/kiln.h"

using namespace kiln;

TEST(InferenceMode, RecordsNoTapeAndRestoresGradMode) {
  Tensor w = ones({3}).requires_grad_(true);
  {
    InferenceMode guard;
    EXPECT_FALSE(grad_mode_enabled());
    Tensor y = w * 2.0;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
  }
  EXPECT_TRUE(grad_mode_enabled());
  EXPECT_TRUE((w * 2.0).requires_grad());
}

TEST(InferenceMode, DisabledLeavesGradModeAsItIs) {
  Tensor w = ones({3}).requires_grad_(true);
  {
    InferenceMode off(false);
    EXPECT_TRUE((w * 2.0).requires_grad());
  }
  {
    NoGradGuard ng;
    InferenceMode off(false);
    EXPECT_FALSE(grad_mode_enabled());
  }
  EXPECT_TRUE(grad_mode_enabled());
}
