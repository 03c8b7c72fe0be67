// Gradients of the layers: gradcheck w.r.t. inputs and every parameter on small
// f64 modules (converted with to(f64)), and every parameter of a model gets a gradient.
#include <gtest/gtest.h>

#include "nn_test_util.h"

using namespace kiln;
using namespace kiln::nn_test;

// Linear and a Sequential MLP pass gradcheck for input, weights and biases.
TEST(NnGrad, LinearAndSequential) {
  manual_seed(0);
  auto lin = std::make_shared<nn::Linear>(4, 3);
  lin->to(DType::f64);
  Tensor x = randn({2, 4}, DType::f64).requires_grad_();
  EXPECT_EQ(gradcheck_module(*lin, x, [&](const Tensor& t) { return lin->forward(t); }), "");
  nn::Sequential mlp{std::make_shared<nn::Linear>(4, 5), std::make_shared<nn::Tanh>(),
                     std::make_shared<nn::Linear>(5, 2), std::make_shared<nn::SiLU>()};
  mlp.to(DType::f64);
  EXPECT_EQ(gradcheck_module(mlp, x, [&](const Tensor& t) { return mlp.forward(t); }), "");
}

// Conv2d (grouped, padded) passes gradcheck.
TEST(NnGrad, Conv2d) {
  manual_seed(1);
  nn::Conv2d conv(2, 4, 2, {.stride = 1, .padding = 1, .groups = 2});
  conv.to(DType::f64);
  Tensor x = randn({1, 2, 3, 3}, DType::f64).requires_grad_();
  EXPECT_EQ(gradcheck_module(conv, x, [&](const Tensor& t) { return conv.forward(t); }), "");
}

// LayerNorm and BatchNorm2d (training: batch statistics) pass gradcheck.
TEST(NnGrad, Norms) {
  manual_seed(2);
  nn::LayerNorm ln({2, 3});
  ln.to(DType::f64);
  nn::init::normal_(ln.weight);
  Tensor x = randn({2, 2, 3}, DType::f64).requires_grad_();
  EXPECT_EQ(gradcheck_module(ln, x, [&](const Tensor& t) { return ln.forward(t); }), "");
  nn::BatchNorm2d bn(2);
  bn.to(DType::f64);
  nn::init::normal_(bn.weight);
  Tensor y = randn({2, 2, 2, 2}, DType::f64).requires_grad_();
  EXPECT_EQ(gradcheck_module(bn, y, [&](const Tensor& t) { return bn.forward(t); }), "");
  bn.eval();
  EXPECT_EQ(gradcheck_module(bn, y, [&](const Tensor& t) { return bn.forward(t); }), "");
}

// Embedding's weight gradient (with a padding row) passes gradcheck.
TEST(NnGrad, Embedding) {
  manual_seed(3);
  nn::Embedding emb(5, 2, 0);
  emb.to(DType::f64);
  Tensor idx = from_vector<int64_t>({2, 3, 3, 1});  // the padding row is unused
  EXPECT_EQ(gradcheck_module(emb, idx, [&](const Tensor& t) { return emb.forward(t); }), "");
}

// MultiheadAttention passes gradcheck with masks, on the SDPA and need_weights paths.
TEST(NnGrad, MultiheadAttention) {
  manual_seed(4);
  nn::MultiheadAttention mha(4, 2);
  mha.to(DType::f64);
  nn::init::uniform_(mha.in_proj_bias, -0.5, 0.5);
  Tensor x = randn({2, 3, 4}, DType::f64).requires_grad_();
  Tensor am = triu(ones({3, 3}, DType::b8), 1);
  Tensor kpm = from_vector<bool>({false, false, false, false, false, true}, {2, 3});
  for (bool need : {false, true}) {
    auto f = [&](const Tensor& t) {
      auto [o, w] = mha.forward(t, t, t, am, kpm, need);
      return need ? o + w.sum({-1}, true) : o;
    };
    EXPECT_EQ(gradcheck_module(mha, x, f), "") << "need_weights=" << need;
  }
}

// Pre- and post-norm encoder layers pass gradcheck (eval: no dropout).
TEST(NnGrad, TransformerEncoderLayer) {
  manual_seed(5);
  for (bool norm_first : {false, true}) {
    nn::TransformerEncoderLayer l(
        4, 2, {.dim_feedforward = 6, .activation = "gelu", .norm_first = norm_first});
    l.to(DType::f64);
    l.eval();
    Tensor x = randn({1, 3, 4}, DType::f64).requires_grad_();
    EXPECT_EQ(gradcheck_module(l, x, [&](const Tensor& t) { return l.forward(t); }), "")
        << "norm_first=" << norm_first;
  }
}

// One backward through a model using every layer type reaches every parameter.
TEST(NnGrad, EveryParameterReceivesGradient) {
  struct Model : nn::Module {
    Model() {
      conv = register_module(
          "conv", std::make_shared<nn::Conv2d>(1, 4, 3, nn::Conv2dOptions{.padding = 1}));
      bn = register_module("bn", std::make_shared<nn::BatchNorm2d>(4));
      pool = register_module("pool", std::make_shared<nn::MaxPool2d>(2));
      flat = register_module("flat", std::make_shared<nn::Flatten>(2));
      emb = register_module("emb", std::make_shared<nn::Embedding>(10, 4));
      enc = register_module(
          "enc",
          std::make_shared<nn::TransformerEncoder>(
              std::make_shared<nn::TransformerEncoderLayer>(
                  4, 2,
                  nn::TransformerEncoderLayerOptions{.dim_feedforward = 8, .norm_first = true}),
              2, std::make_shared<nn::LayerNorm>(4)));
      head = register_module("head", std::make_shared<nn::Linear>(4, 3));
    }
    Tensor forward(const Tensor& img, const Tensor& tokens) {
      Tensor a = flat->forward(pool->forward(relu(bn->forward(conv->forward(img)))));  // [N, 4, 4]
      Tensor h = enc->forward(a.transpose(1, 2) + emb->forward(tokens));               // [N, 4, 4]
      return head->forward(h.mean({1}));
    }
    std::shared_ptr<nn::Conv2d> conv;
    std::shared_ptr<nn::BatchNorm2d> bn;
    std::shared_ptr<nn::MaxPool2d> pool;
    std::shared_ptr<nn::Flatten> flat;
    std::shared_ptr<nn::Embedding> emb;
    std::shared_ptr<nn::TransformerEncoder> enc;
    std::shared_ptr<nn::Linear> head;
  };
  manual_seed(6);
  auto model = std::make_shared<Model>();
  Tensor img = randn({2, 1, 4, 4});
  Tensor tokens = randint(0, 10, {2, 4});
  Tensor loss = nn::CrossEntropyLoss()(model->forward(img, tokens), from_vector<int64_t>({0, 2}));
  loss.backward();
  for (auto& [name, p] : model->named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_GT(p.grad().abs().sum().item<double>(), 0.0) << name;
  }
  EXPECT_EQ(model->named_parameters().size(), 4u + 1u + 2u * 12u + 2u + 2u);
}
