// MultiheadAttention with separate q/k/v projections (PyTorch's layout for
// kdim/vdim, Hugging Face's checkpoints), and forward_args: several tensors
// through a Module pointer.
#include <gtest/gtest.h>

#include <cmath>

#include "nn_test_util.h"

using namespace kiln;
using namespace kiln::nn_test;

namespace {

// Attention written out: per-head softmax(q k^T / sqrt(D)) v, then out_proj.
Tensor attention_ref(const Tensor& Q, const Tensor& K, const Tensor& V, int64_t H,
                     const nn::Linear& out_proj) {
  const int64_t E = Q.size(-1), D = E / H;
  std::vector<Tensor> heads;
  for (int64_t h = 0; h < H; ++h) {
    Tensor s = matmul(Q.narrow(-1, h * D, D), transpose(K.narrow(-1, h * D, D), 1, 2)) /
               std::sqrt(static_cast<double>(D));
    heads.push_back(matmul(softmax(s, -1), V.narrow(-1, h * D, D)));
  }
  return linear(cat(heads, -1), out_proj.weight, out_proj.bias);
}

}  // namespace

TEST(AttentionProjections, SeparateLayoutHasPyTorchsKeysAndMatchesThePackedOne) {
  manual_seed(0);
  nn::MultiheadAttention packed(8, 2);
  nn::MultiheadAttention separate(8, 2, {.separate_projections = true});
  EXPECT_TRUE(separate.separate_projections());
  EXPECT_FALSE(packed.separate_projections());
  EXPECT_EQ(separate.state_dict().keys(),
            (std::vector<std::string>{"q_proj_weight", "k_proj_weight", "v_proj_weight",
                                      "in_proj_bias", "out_proj.weight", "out_proj.bias"}));
  {
    NoGradGuard ng;
    nn::init::normal_(packed.in_proj_bias);
    nn::init::normal_(packed.out_proj->bias);
  }
  const Tensor& W = packed.in_proj_weight;
  const Tensor& b = packed.in_proj_bias;
  separate.load_projections(W.narrow(0, 0, 8), W.narrow(0, 8, 8), W.narrow(0, 16, 8),
                            b.narrow(0, 0, 8), b.narrow(0, 8, 8), b.narrow(0, 16, 8));
  separate.out_proj->load_state_dict(packed.out_proj->state_dict());
  Tensor q = randn({2, 3, 8}), k = randn({2, 5, 8}), v = randn({2, 5, 8});
  expect_close(std::get<0>(separate.forward(q, k, v)), std::get<0>(packed.forward(q, k, v)), 1e-5);
  expect_close(separate.forward(q), packed.forward(q), 1e-5);  // self-attention
  // Gradients reach the separate weights.
  separate.forward(q).sum().backward();
  EXPECT_TRUE(separate.k_proj_weight.grad().defined());
}

TEST(AttentionProjections, KdimAndVdimProjectKeysAndValuesOfOtherSizes) {
  manual_seed(1);
  nn::MultiheadAttention m(4, 2, {.kdim = 3, .vdim = 5});
  EXPECT_TRUE(m.separate_projections());
  EXPECT_EQ(m.k_proj_weight.shape(), Dims({4, 3}));
  EXPECT_EQ(m.v_proj_weight.shape(), Dims({4, 5}));
  {
    NoGradGuard ng;
    nn::init::normal_(m.in_proj_bias);
  }
  Tensor q = randn({2, 3, 4}), k = randn({2, 6, 3}), v = randn({2, 6, 5});
  const Tensor& b = m.in_proj_bias;
  Tensor want = attention_ref(linear(q, m.q_proj_weight, b.narrow(0, 0, 4)),
                              linear(k, m.k_proj_weight, b.narrow(0, 4, 4)),
                              linear(v, m.v_proj_weight, b.narrow(0, 8, 4)), 2, *m.out_proj);
  expect_close(std::get<0>(m.forward(q, k, v)), want, 1e-5);
  expect_error([&] { m.forward(q, q, v); }, {"kdim = 3"});
}

TEST(AttentionProjections, LoadProjectionsChecksShapes) {
  nn::MultiheadAttention m(4, 2);
  Tensor w = zeros({4, 4}), b = zeros({4});
  expect_error([&] { m.load_projections(w, zeros({4, 3}), w); }, {"k weight", "[4, 4]"});
  expect_error([&] { m.load_projections(w, w, w, b, b); }, {"v bias", "all given or none"});
  nn::MultiheadAttention nobias(4, 2, {.bias = false});
  expect_error([&] { nobias.load_projections(w, w, w, b, b, b); }, {"bias = false"});
  m.load_projections(w, w, ones({4, 4}));
  expect_equal(m.in_proj_weight.narrow(0, 8, 4), ones({4, 4}));
  expect_equal(m.in_proj_weight.narrow(0, 0, 8), zeros({8, 4}));
}

TEST(ForwardArgs, MasksReachModulesHeldByAModulePointer) {
  manual_seed(2);
  auto mha = std::make_shared<nn::MultiheadAttention>(4, 2);
  nn::ModuleList list({mha});
  Tensor x = randn({2, 3, 4});
  Tensor mask = triu(ones({3, 3}, DType::b8), 1);
  std::shared_ptr<nn::Module> any = list[0];
  expect_equal((*any)(x, x, x, mask), std::get<0>(mha->forward(x, x, x, mask)));
  expect_equal((*any)(x), mha->forward(x));
  expect_error([&] { (*any)(x, x); }, {"(query, key, value"});

  // A loss through a Module pointer.
  std::shared_ptr<nn::Module> loss = std::make_shared<nn::MSELoss>();
  expect_equal((*loss)(x, zeros({2, 3, 4})), mse_loss(x, zeros({2, 3, 4})));

  // A plain module accepts absent (undefined) extra tensors, refuses defined ones.
  std::shared_ptr<nn::Module> relu = std::make_shared<nn::ReLU>();
  expect_equal((*relu)(x, Tensor()), relu->forward(x));
  expect_error([&] { (*relu)(x, mask); }, {"ReLU", "takes one input tensor", "forward_args"});
}

namespace {
// A user-defined encoder layer: TransformerEncoder hands it the masks.
struct MaskedLayer : nn::Module {
  MaskedLayer() { attn = register_module("attn", std::make_shared<nn::MultiheadAttention>(4, 2)); }
  Tensor forward(const Tensor& x) override { return forward_args({x}); }
  Tensor forward_args(const std::vector<Tensor>& a) override {
    seen_mask = a.size() > 1 && a[1].defined();
    return x_plus(a[0], a.size() > 1 ? a[1] : Tensor());
  }
  Tensor x_plus(const Tensor& x, const Tensor& mask) {
    return x + std::get<0>(attn->forward(x, x, x, mask));
  }
  std::shared_ptr<nn::MultiheadAttention> attn;
  bool seen_mask = false;
};
}  // namespace

TEST(ForwardArgs, TransformerEncoderPassesMasksToLayersOfAnyType) {
  manual_seed(3);
  std::shared_ptr<MaskedLayer> layer;
  nn::TransformerEncoder enc(
      [&] {
        layer = std::make_shared<MaskedLayer>();
        return layer;
      },
      1);
  Tensor x = randn({2, 3, 4}), mask = triu(ones({3, 3}, DType::b8), 1);
  Tensor y = enc.forward(x, mask);
  EXPECT_TRUE(layer->seen_mask);
  expect_equal(y, layer->x_plus(x, mask));
  expect_equal(enc(x, mask), y);  // forward_args of the encoder itself
  expect_error([&] { enc.forward(x, Tensor(), Tensor(), /*is_causal=*/true); }, {"is_causal"});
}

// Gradcheck of the separate-projection layout (kdim/vdim) in the inputs and
// in every projection weight.
TEST(AttentionProjections, SeparateLayoutGradcheck) {
  manual_seed(2);
  nn::MultiheadAttention m(4, 2, {.kdim = 3, .vdim = 5});
  m.to(DType::f64);
  Tensor q = randn({1, 2, 4}, DType::f64), k = randn({1, 3, 3}, DType::f64),
         v = randn({1, 3, 5}, DType::f64);
  auto f = [&](const std::vector<Tensor>& in) {
    Tensor saved_q = m.q_proj_weight, saved_k = m.k_proj_weight;
    m.replace_parameter("q_proj_weight", in[3]);
    m.replace_parameter("k_proj_weight", in[4]);
    Tensor out = std::get<0>(m.forward(in[0], in[1], in[2]));
    m.replace_parameter("q_proj_weight", saved_q);
    m.replace_parameter("k_proj_weight", saved_k);
    return std::vector<Tensor>{out};
  };
  EXPECT_EQ(gradcheck(f, {q.requires_grad_(), k.requires_grad_(), v.requires_grad_(),
                          m.q_proj_weight.detach().clone().requires_grad_(),
                          m.k_proj_weight.detach().clone().requires_grad_()}),
            "");
}
