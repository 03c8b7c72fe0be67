// MultiheadAttention, TransformerEncoderLayer and TransformerEncoder against
// manual compositions with the same weights.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "nn_test_util.h"

using namespace kiln;
using namespace kiln::nn_test;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// PyTorch's formula written head by head: q, k, v [B, L|S, E], additive mask
// broadcastable to [B, H, L, S] (or undefined). Sets *weights to the head average.
Tensor mha_ref(const nn::MultiheadAttention& m, const Tensor& q, const Tensor& k, const Tensor& v,
               const Tensor& mask, Tensor* weights = nullptr) {
  const int64_t E = m.embed_dim(), H = m.num_heads(), D = E / H;
  const Tensor& W = m.in_proj_weight;
  const Tensor& b = m.in_proj_bias;
  auto proj = [&](const Tensor& x, int64_t i) {
    return matmul(x, W.narrow(0, i * E, E).t()) + b.narrow(0, i * E, E);
  };
  Tensor Q = proj(q, 0), K = proj(k, 1), Vv = proj(v, 2);
  std::vector<Tensor> outs;
  Tensor wsum;
  for (int64_t h = 0; h < H; ++h) {
    Tensor qh = Q.narrow(-1, h * D, D), kh = K.narrow(-1, h * D, D), vh = Vv.narrow(-1, h * D, D);
    Tensor s = matmul(qh, kh.transpose(1, 2)) / std::sqrt(static_cast<double>(D));
    if (mask.defined()) {
      Tensor mh = mask.dim() == 4 ? mask.select(1, mask.size(1) == 1 ? 0 : h) : mask;
      s = s + mh;
    }
    Tensor a = softmax(s, -1);
    outs.push_back(matmul(a, vh));
    wsum = wsum.defined() ? wsum + a : a;
  }
  if (weights) *weights = wsum / static_cast<double>(H);
  return matmul(cat(outs, -1), m.out_proj->weight.t()) + m.out_proj->bias;
}

std::shared_ptr<nn::MultiheadAttention> make_mha(int64_t E, int64_t H,
                                                 nn::MultiheadAttentionOptions o = {}) {
  auto m = std::make_shared<nn::MultiheadAttention>(E, H, o);
  m->to(DType::f64);
  // Non-zero biases so that every term of the formula is exercised.
  nn::init::uniform_(m->in_proj_bias, -0.5, 0.5);
  nn::init::uniform_(m->out_proj->bias, -0.5, 0.5);
  return m;
}

// Bool mask (true = masked) -> additive f64 mask.
Tensor additive(const Tensor& b) {
  return masked_fill(zeros(b.shape(), DType::f64), b, -kInf);
}

}  // namespace

// Output and averaged weights equal the per-head formula; both the fused SDPA path
// and the explicit need_weights path agree.
TEST(LayerMultiheadAttention, MatchesManualComputation) {
  manual_seed(0);
  auto m = make_mha(6, 2);
  Tensor q = randn({2, 3, 6}, DType::f64), k = randn({2, 4, 6}, DType::f64),
         v = randn({2, 4, 6}, DType::f64);
  Tensor want_w;
  Tensor want = mha_ref(*m, q, k, v, Tensor(), &want_w);
  auto [out, w] = m->forward(q, k, v);
  EXPECT_FALSE(w.defined());
  expect_close(out, want);
  auto [out2, w2] = m->forward(q, k, v, {}, {}, /*need_weights=*/true);
  expect_close(out2, want);
  expect_close(w2, want_w);
  EXPECT_EQ(w2.shape(), (Dims{2, 3, 4}));
  auto [out3, w3] = m->forward(q, k, v, {}, {}, true, /*average_attn_weights=*/false);
  EXPECT_EQ(w3.shape(), (Dims{2, 2, 3, 4}));
  expect_close(mean(w3, {1}), want_w);
  // Self-attention: the single-GEMM path equals three separate projections.
  expect_close(m->forward(q), std::get<0>(m->forward(q, q.clone(), q.clone())));
  expect_close((*m)(q), mha_ref(*m, q, q, q, Tensor()));
}

// attn_mask (bool, float, per head) and key_padding_mask follow PyTorch's conventions.
TEST(LayerMultiheadAttention, Masks) {
  manual_seed(1);
  auto m = make_mha(4, 2);
  Tensor q = randn({2, 3, 4}, DType::f64), kv = randn({2, 4, 4}, DType::f64);
  // true = not allowed; every query row keeps at least one key.
  Tensor am = from_vector<bool>(
      {false, true, false, true, false, false, true, true, true, false, false, false}, {3, 4});
  Tensor kpm = from_vector<bool>({false, false, false, false, false, false, true, true}, {2, 4});
  Tensor ref_mask = additive(am) + reshape(additive(kpm), {2, 1, 1, 4});
  Tensor want_w;
  Tensor want = mha_ref(*m, q, kv, kv, reshape(ref_mask, {2, 1, 3, 4}), &want_w);
  expect_close(std::get<0>(m->forward(q, kv, kv, am, kpm)), want);
  auto [o2, w2] = m->forward(q, kv, kv, am, kpm, true);
  expect_close(o2, want);
  expect_close(w2, want_w);
  EXPECT_EQ(vals(w2.select(0, 1).narrow(-1, 2, 2)), V(6, 0.0));  // padded keys get no weight
  // An additive float mask is equivalent to the bool mask.
  expect_close(std::get<0>(m->forward(q, kv, kv, additive(am), kpm)), want);
  // A per-head mask [B * H, L, S].
  Tensor ph = rand({2, 2, 3, 4}, DType::f64) - 0.5;
  expect_close(std::get<0>(m->forward(q, kv, kv, reshape(ph, {4, 3, 4}))),
               mha_ref(*m, q, kv, kv, ph));
  // is_causal without a mask masks the future.
  Tensor causal = triu(ones({3, 3}, DType::b8), 1);
  expect_close(std::get<0>(m->forward(q, q, q, {}, {}, false, true, true)),
               mha_ref(*m, q, q, q, additive(causal)));
  expect_error(
      [&] {
        m->forward(q, kv, kv, ones({3, 3}, DType::b8));
      },
      {"[MultiheadAttention] attn_mask must have shape [3, 4] or [4, 3, 4]", "[3, 3]"});
  expect_error(
      [&] {
        m->forward(q, kv, kv, {}, ones({2, 3}, DType::b8));
      },
      {"key_padding_mask must have shape [2, 4]"});
}

// batch_first=false takes [L, B, E]; unbatched [L, E] inputs work too.
TEST(LayerMultiheadAttention, LayoutsAndStateDict) {
  manual_seed(2);
  auto m = make_mha(4, 4);
  auto seq_first = make_mha(4, 4, {.batch_first = false});
  seq_first->load_state_dict(m->state_dict());
  Tensor x = randn({2, 5, 4}, DType::f64);
  Tensor y = m->forward(x);
  expect_close(seq_first->forward(x.transpose(0, 1)), y.transpose(0, 1));
  expect_close(m->forward(x[1]), y[1]);
  auto [o, w] = m->forward(x[0], x[0], x[0], {}, {}, true);
  EXPECT_EQ(w.shape(), (Dims{5, 5}));
  EXPECT_EQ(m->state_dict().keys(), (std::vector<std::string>{"in_proj_weight", "in_proj_bias",
                                                              "out_proj.weight", "out_proj.bias"}));
  EXPECT_EQ(m->in_proj_weight.shape(), (Dims{12, 4}));
  // PyTorch's init: xavier_uniform_ in_proj_weight, zero biases.
  manual_seed(3);
  nn::MultiheadAttention fresh(64, 8);
  EXPECT_EQ(fresh.in_proj_bias.abs().sum().item<double>(), 0.0);
  EXPECT_EQ(fresh.out_proj->bias.abs().sum().item<double>(), 0.0);
  double bound = std::sqrt(6.0 / (64.0 + 192.0));
  EXPECT_LE(fresh.in_proj_weight.abs().max().item<double>(), bound);
  EXPECT_GT(fresh.in_proj_weight.abs().max().item<double>(), 0.95 * bound);
  expect_error([] { nn::MultiheadAttention(6, 4); }, {"embed_dim (6) must be divisible"});
  expect_error([&] { m->forward(randn({2, 5, 3}, DType::f64)); }, {"embed_dim = 4"});
}

namespace {

// ff(x) of an encoder layer in eval mode, composed from its submodules' weights.
Tensor ff_ref(nn::TransformerEncoderLayer& l, const Tensor& x, bool use_gelu) {
  Tensor h = linear(x, l.linear1->weight, l.linear1->bias);
  h = use_gelu ? gelu(h) : relu(h);
  return linear(h, l.linear2->weight, l.linear2->bias);
}
Tensor ln_ref(const nn::LayerNorm& n, const Tensor& x) {
  return layer_norm(x, {x.size(-1)}, n.weight, n.bias);
}

std::shared_ptr<nn::TransformerEncoderLayer> make_layer(bool norm_first, std::string act) {
  auto l = std::make_shared<nn::TransformerEncoderLayer>(
      8, 2,
      nn::TransformerEncoderLayerOptions{
          .dim_feedforward = 16, .activation = act, .norm_first = norm_first});
  l->to(DType::f64);
  for (auto& [name, p] : l->named_parameters())
    if (name.find("norm") != std::string::npos) nn::init::uniform_(p, 0.5, 1.5);
  l->eval();
  return l;
}

}  // namespace

// Post-norm (relu) and pre-norm (gelu) layers equal their manual compositions.
TEST(LayerTransformer, EncoderLayerMatchesComposition) {
  manual_seed(4);
  Tensor x = randn({2, 5, 8}, DType::f64);
  Tensor kpm = from_vector<bool>(
      {false, false, false, false, false, false, false, false, true, true}, {2, 5});
  {
    auto l = make_layer(false, "relu");
    auto sa = [&](const Tensor& t) { return std::get<0>(l->self_attn->forward(t, t, t, {}, kpm)); };
    Tensor h = ln_ref(*l->norm1, x + sa(x));
    Tensor want = ln_ref(*l->norm2, h + ff_ref(*l, h, false));
    expect_close(l->forward(x, {}, kpm), want);
  }
  {
    auto l = make_layer(true, "gelu");
    auto sa = [&](const Tensor& t) { return l->self_attn->forward(t); };
    Tensor h = x + sa(ln_ref(*l->norm1, x));
    Tensor want = h + ff_ref(*l, ln_ref(*l->norm2, h), true);
    expect_close(l->forward(x), want);
    // Training mode applies dropout (different draws per call).
    l->train();
    EXPECT_NE(vals(l->forward(x)), vals(l->forward(x)));
  }
  expect_error([] { nn::TransformerEncoderLayer(8, 2, {.activation = "tanh"}); },
               {"[TransformerEncoderLayer] activation", "\"tanh\""});
}

// Submodule names, state_dict keys and printing match PyTorch's.
TEST(LayerTransformer, NamesAndRepr) {
  nn::TransformerEncoderLayer l(4, 2, {.dim_feedforward = 8});
  EXPECT_EQ(l.state_dict().keys(),
            (std::vector<std::string>{
                "self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
                "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight",
                "linear2.bias", "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"}));
  EXPECT_EQ(l.repr(),
            "TransformerEncoderLayer(\n"
            "  (self_attn): MultiheadAttention(\n"
            "    (out_proj): Linear(in_features=4, out_features=4, bias=True)\n"
            "  )\n"
            "  (linear1): Linear(in_features=4, out_features=8, bias=True)\n"
            "  (dropout): Dropout(p=0.1, inplace=False)\n"
            "  (linear2): Linear(in_features=8, out_features=4, bias=True)\n"
            "  (norm1): LayerNorm((4,), eps=1e-05, elementwise_affine=True)\n"
            "  (norm2): LayerNorm((4,), eps=1e-05, elementwise_affine=True)\n"
            "  (dropout1): Dropout(p=0.1, inplace=False)\n"
            "  (dropout2): Dropout(p=0.1, inplace=False)\n"
            ")");
}

// TransformerEncoder deep-copies the prototype layer, runs layers in order, then the norm.
TEST(LayerTransformer, EncoderStack) {
  manual_seed(5);
  auto proto = make_layer(false, "relu");
  nn::TransformerEncoder enc(proto, 2, std::make_shared<nn::LayerNorm>(8));
  enc.to(DType::f64);
  enc.eval();
  auto keys = enc.state_dict().keys();
  EXPECT_EQ(keys.size(), 26u);
  EXPECT_EQ(keys[12], "layers.1.self_attn.in_proj_weight");
  EXPECT_EQ(keys.back(), "norm.bias");
  auto l0 = enc.layers->at<nn::TransformerEncoderLayer>(0);
  auto l1 = enc.layers->at<nn::TransformerEncoderLayer>(1);
  expect_equal(l0->linear1->weight, l1->linear1->weight);
  expect_equal(l0->linear1->weight, proto->linear1->weight);
  EXPECT_NE(l0->linear1->weight.data_ptr(), l1->linear1->weight.data_ptr());
  Tensor x = randn({3, 4, 8}, DType::f64);
  Tensor mask = triu(ones({4, 4}, DType::b8), 1);
  Tensor want = enc.norm->forward(l1->forward(l0->forward(x, mask), mask));
  expect_close(enc.forward(x, mask), want);
  expect_close(enc.forward(x, {}, {}, /*is_causal=*/true), want);

  int made = 0;
  nn::TransformerEncoder fac(
      [&] {
        ++made;
        return std::make_shared<nn::TransformerEncoderLayer>(8, 2);
      },
      3);
  EXPECT_EQ(made, 3);
  EXPECT_EQ(fac.layers->size(), 3u);
  EXPECT_EQ(fac.norm, nullptr);
  EXPECT_NE(vals(fac.layers->at<nn::TransformerEncoderLayer>(0)->linear1->weight),
            vals(fac.layers->at<nn::TransformerEncoderLayer>(1)->linear1->weight));
  auto copy = nn::clone_as(enc);
  expect_close(copy->forward(x, mask), want);
}
