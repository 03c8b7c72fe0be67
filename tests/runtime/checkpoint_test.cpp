// kiln::checkpoint gives exactly the gradients of calling fn directly — for the
// inputs and for the parameters fn captures — while the forward keeps no
// activations of the region: MLP, CNN and transformer blocks, inputs that do
// not require grad, nested regions, several outputs, kiln::grad, create_graph,
// dropout (the same mask on recompute), and peak memory that drops.
#include <gtest/gtest.h>

#include <memory>

#include "kiln/allocator.h"
#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "runtime/test_util.h"

namespace kiln {
namespace {

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// Gradients of every parameter of `m` and of x after `loss().backward()`.
std::vector<Tensor> grads_of(nn::Module& m, const Tensor& x, const std::function<Tensor()>& loss) {
  m.zero_grad();
  if (x.defined() && x.requires_grad()) x.set_grad({});
  loss().backward();
  std::vector<Tensor> g;
  for (const Tensor& p : m.parameters())
    g.push_back(p.grad().defined() ? p.grad().clone() : p.grad());
  if (x.defined() && x.requires_grad()) g.push_back(x.grad().clone());
  return g;
}

void expect_same(const std::vector<Tensor>& a, const std::vector<Tensor>& b, double tol = 1e-6) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(a[i].defined()) << "gradient " << i << " is missing";
    ASSERT_TRUE(b[i].defined()) << "gradient " << i << " is missing";
    EXPECT_TRUE(allclose(a[i], b[i], tol, tol)) << "gradient " << i;
  }
}

std::shared_ptr<nn::Sequential> mlp_block(int64_t d) {
  auto m = std::make_shared<nn::Sequential>();
  m->push_back(std::make_shared<nn::Linear>(d, 2 * d));
  m->push_back(std::make_shared<nn::GELU>());
  m->push_back(std::make_shared<nn::Linear>(2 * d, d));
  return m;
}

// The normal use: parameters captured by fn get their gradients (they stayed
// undefined before), with and without an input that requires grad.
TEST(Checkpoint, CapturedParametersGetTheirGradients) {
  manual_seed(1);
  auto block = mlp_block(8);
  for (bool input_grad : {true, false}) {
    SCOPED_TRACE(input_grad ? "input requires grad" : "input does not require grad");
    Tensor x = randn({4, 8});
    if (input_grad) x.requires_grad_();
    auto plain = grads_of(*block, x, [&] { return block->forward(x).pow(2).sum(); });
    int calls = 0;
    Fn fn = [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
      ++calls;
      return {block->forward(in[0])};
    };
    auto ck = grads_of(*block, x, [&] {
      Tensor y = checkpoint(fn, {x})[0];
      EXPECT_TRUE(y.requires_grad());
      EXPECT_EQ(calls, 1);
      return y.pow(2).sum();
    });
    EXPECT_EQ(calls, 2);  // the recomputation in backward
    expect_same(ck, plain);
  }
}

// Nested regions, several outputs, and an output fn does not use.
TEST(Checkpoint, NestedRegionsAndSeveralOutputs) {
  manual_seed(2);
  auto a = mlp_block(6), b = mlp_block(6);
  nn::Sequential both;
  both.push_back(a);
  both.push_back(b);
  Tensor x = randn({3, 6}).requires_grad_();
  auto plain = grads_of(both, x, [&] {
    Tensor h = a->forward(x);
    Tensor y = b->forward(h);
    return (y * h).sum() + h.sum();
  });
  Fn inner = [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    return {b->forward(in[0])};
  };
  Fn outer = [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    Tensor h = a->forward(in[0]);
    Tensor y = checkpoint(inner, {h})[0];
    return {y, h, h * 0};
  };
  auto ck = grads_of(both, x, [&] {
    auto outs = checkpoint(outer, {x});
    return (outs[0] * outs[1]).sum() + outs[1].sum();
  });
  expect_same(ck, plain);
}

// kiln::grad and create_graph (a gradient penalty) through a region.
TEST(Checkpoint, GradAndCreateGraph) {
  manual_seed(3);
  auto block = mlp_block(5);
  Tensor x = randn({2, 5}).requires_grad_();
  auto penalty = [&](bool ck) {
    Fn fn = [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
      return {kiln::tanh(block->forward(in[0]))};
    };
    Tensor y = ck ? checkpoint(fn, {x})[0] : fn({x})[0];
    Tensor gx = kiln::grad({y.sum()}, {x}, {}, {.create_graph = true})[0];
    return (gx * gx).sum() + y.sum();
  };
  auto plain = grads_of(*block, x, [&] { return penalty(false); });
  auto ck = grads_of(*block, x, [&] { return penalty(true); });
  expect_same(ck, plain, 1e-5);
  // kiln::grad alone, without accumulating into .grad.
  Fn fn = [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    return {block->forward(in[0])};
  };
  auto g1 = kiln::grad({fn({x})[0].sum()}, {x, block->parameters()[0]});
  auto g2 = kiln::grad({checkpoint(fn, {x})[0].sum()}, {x, block->parameters()[0]});
  expect_same(g2, g1);
}

// Dropout inside a region draws the same mask when recomputed.
TEST(Checkpoint, DropoutReplaysTheSameMask) {
  manual_seed(4);
  auto block = std::make_shared<nn::Sequential>();
  block->push_back(std::make_shared<nn::Linear>(16, 32));
  block->push_back(std::make_shared<nn::Dropout>(0.5));
  block->push_back(std::make_shared<nn::Linear>(32, 16));
  Tensor x = randn({8, 16});
  manual_seed(99);
  auto plain = grads_of(*block, x, [&] { return block->forward(x).sum(); });
  manual_seed(99);
  Fn fn = [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    return {block->forward(in[0])};
  };
  auto ck = grads_of(*block, x, [&] { return checkpoint(fn, {x})[0].sum(); });
  expect_same(ck, plain);
}

// Whole models: a CNN and a transformer encoder layer, every gradient.
TEST(Checkpoint, CnnAndTransformerBlocks) {
  manual_seed(5);
  auto conv = std::make_shared<nn::Sequential>();
  conv->push_back(std::make_shared<nn::Conv2d>(3, 4, nn::Size2{3, 3}));
  conv->push_back(std::make_shared<nn::BatchNorm2d>(4));
  conv->push_back(std::make_shared<nn::ReLU>());
  conv->push_back(std::make_shared<nn::MaxPool2d>(nn::Size2{2, 2}));
  Tensor img = randn({2, 3, 10, 10});
  // BatchNorm's running stats update in the forward and again when recomputed,
  // as in PyTorch; the gradients use the batch statistics either way.
  auto plain = grads_of(*conv, img, [&] { return conv->forward(img).pow(2).mean(); });
  Fn cfn = [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    return {conv->forward(in[0])};
  };
  auto ck = grads_of(*conv, img, [&] { return checkpoint(cfn, {img})[0].pow(2).mean(); });
  expect_same(ck, plain, 1e-5);

  auto layer = std::make_shared<nn::TransformerEncoderLayer>(
      16, 2, nn::TransformerEncoderLayerOptions{.dim_feedforward = 32, .dropout = 0.1});
  Tensor seq = randn({2, 5, 16}).requires_grad_();
  manual_seed(6);
  auto tplain = grads_of(*layer, seq, [&] { return layer->forward(seq).pow(2).sum(); });
  manual_seed(6);
  Fn tfn = [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    return {layer->forward(in[0])};
  };
  auto tck = grads_of(*layer, seq, [&] { return checkpoint(tfn, {seq})[0].pow(2).sum(); });
  expect_same(tck, tplain, 1e-5);
}

// The forward of a checkpointed deep MLP keeps only the regions' inputs: the
// peak during forward + backward drops well below the plain model's.
TEST(Checkpoint, PeakMemoryDrops) {
  manual_seed(7);
  constexpr int kLayers = 8;
  std::vector<std::shared_ptr<nn::Sequential>> blocks;
  nn::Sequential model;
  for (int i = 0; i < kLayers; ++i) {
    blocks.push_back(mlp_block(256));
    model.push_back(blocks.back());
  }
  Tensor x = randn({512, 256});
  auto peak = [&](bool ck) {
    model.zero_grad(false);  // the gradients' buffers stay: only activations differ
    cpu_allocator().reset_peak();
    const int64_t base = cpu_allocator().stats().current_bytes;
    Tensor h = x;
    for (auto& b : blocks) {
      Fn fn = [b](const std::vector<Tensor>& in) -> std::vector<Tensor> {
        return {b->forward(in[0])};
      };
      h = ck ? checkpoint(fn, {h})[0] : b->forward(h);
    }
    h.pow(2).mean().backward();
    return cpu_allocator().stats().peak_bytes - base;
  };
  peak(false);  // warm the parameters' .grad
  const int64_t plain = peak(false), ck = peak(true);
  // Per block the plain forward keeps [512, 512] twice (linear out, GELU) and
  // the input; the checkpointed one only the block input (plus one block
  // recomputed at a time in backward).
  EXPECT_LT(static_cast<double>(ck), 0.6 * static_cast<double>(plain))
      << "checkpointed peak " << ck << " bytes, plain " << plain;
}

// An input changed in place after the forward cannot be recomputed: error.
TEST(Checkpoint, InputModifiedInPlaceIsAnError) {
  auto block = mlp_block(4);
  Tensor x = randn({2, 4});
  Fn fn = [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    return {block->forward(in[0])};
  };
  Tensor y = checkpoint(fn, {x})[0];
  x.add_(1);
  testing::expect_error(
      [&] { y.sum().backward(); },
      {"[checkpoint] input 0", "modified in place after the checkpointed forward"});
}

// Under NoGradGuard nothing is saved: fn simply runs once.
TEST(Checkpoint, NoGradRunsFnOnce) {
  int calls = 0;
  Fn fn = [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    ++calls;
    return {in[0] * 2};
  };
  NoGradGuard ng;
  Tensor y = checkpoint(fn, {ones({2})})[0];
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(y.requires_grad());
}

}  // namespace
}  // namespace kiln
