// nn::Module: registration, traversal, modes, to(dtype), zero_grad, apply,
// state dicts, printing and clone.
#include <gtest/gtest.h>

#include <sstream>

#include "nn_test_util.h"

using namespace kiln;
using namespace kiln::nn_test;

namespace {

struct Net : nn::Module {
  Net() {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(4, 3));
    act = register_module("act", std::make_shared<nn::ReLU>());
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(3, 2));
    register_parameter("scale", scale, ones({2}));
    register_buffer("steps", steps, zeros({}, DType::i64));
  }
  Tensor forward(const Tensor& x) override {
    return fc2->forward(act->forward(fc1->forward(x))) * scale;
  }
  std::shared_ptr<nn::Linear> fc1, fc2;
  std::shared_ptr<nn::ReLU> act;
  Tensor scale, steps;
};

struct NoForward : nn::Module {};

std::vector<std::string> names_of(const nn::NamedTensors& v) {
  std::vector<std::string> n;
  for (auto& [k, t] : v) n.push_back(k);
  return n;
}

}  // namespace

// Parameters, buffers and modules are listed with dotted names in registration order.
TEST(NnModule, RegistrationOrderAndNames) {
  auto net = std::make_shared<Net>();
  EXPECT_EQ(
      names_of(net->named_parameters()),
      (std::vector<std::string>{"scale", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}));
  EXPECT_EQ(names_of(net->named_parameters(false)), std::vector<std::string>{"scale"});
  EXPECT_EQ(names_of(net->named_buffers()), std::vector<std::string>{"steps"});
  EXPECT_EQ(net->parameters().size(), 5u);
  EXPECT_TRUE(net->parameters()[1].is_same(net->fc1->weight));
  EXPECT_EQ(net->buffers().size(), 1u);
  std::vector<std::string> mods;
  for (auto& [n, m] : net->named_modules()) mods.push_back(n);
  EXPECT_EQ(mods, (std::vector<std::string>{"", "fc1", "act", "fc2"}));
  EXPECT_EQ(net->modules().size(), 4u);
  EXPECT_EQ(net->modules()[0].get(), net.get());
  auto ch = net->named_children();
  ASSERT_EQ(ch.size(), 3u);
  EXPECT_EQ(ch[2].first, "fc2");
  EXPECT_EQ(net->children()[0].get(), net->fc1.get());
  for (const Tensor& p : net->parameters()) EXPECT_TRUE(p.requires_grad() && p.is_leaf());
  EXPECT_FALSE(net->steps.requires_grad());
  EXPECT_EQ(net->name(), "Net");
  EXPECT_EQ(net->fc1->name(), "Linear");
}

// Bad names, duplicates, null children and self-registration are kiln::Errors naming the module.
TEST(NnModule, RegistrationErrors) {
  Net net;
  expect_error([&] { net.register_parameter("scale", ones({1})); },
               {"[Module] Net", "\"scale\"", "already used"});
  expect_error([&] { net.register_buffer("fc1", ones({1})); }, {"\"fc1\"", "already used"});
  expect_error([&] { net.register_parameter("a.b", ones({1})); }, {"must not contain '.'"});
  expect_error([&] { net.register_parameter("", ones({1})); }, {"must not be empty"});
  expect_error([&] { net.register_module("m", std::shared_ptr<nn::Linear>()); }, {"is null"});
  expect_error([&] { net.register_parameter("i", ones({1}, DType::i64)); },
               {"parameter \"i\" requires grad", "i64"});
  expect_error([&] { net.replace_module("nope", std::make_shared<nn::ReLU>()); },
               {"no submodule named \"nope\""});
  auto self = std::make_shared<NoForward>();
  expect_error([&] { self->register_module("me", self); }, {"its own submodule"});
}

// A non-leaf registered as a parameter becomes a leaf (detached), like nn.Parameter.
TEST(NnModule, ParameterIsAlwaysALeaf) {
  NoForward m;
  Tensor base = ones({2}).requires_grad_();
  m.register_parameter("p", base * 2.0);
  Tensor p = m.named_parameters()[0].second;
  EXPECT_TRUE(p.is_leaf());
  EXPECT_TRUE(p.requires_grad());
  m.register_parameter("frozen", ones({2}), false);
  EXPECT_FALSE(m.named_parameters()[1].second.requires_grad());
  EXPECT_EQ(m.parameters().size(), 2u);
}

// A tensor registered twice (tied weights) is listed once by parameters() but
// under both names by state_dict(); undefined parameters and non-persistent
// buffers stay out of state_dict().
TEST(NnModule, SharedAndUndefinedParameters) {
  NoForward m;
  Tensor w = ones({3});
  m.register_parameter("a", w);
  m.register_parameter("b", w);
  m.register_parameter("none", Tensor());
  EXPECT_EQ(names_of(m.named_parameters()), std::vector<std::string>{"a"});
  m.register_buffer("cache", zeros({2}), /*persistent=*/false);
  EXPECT_EQ(m.state_dict().keys(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(names_of(m.named_buffers()), std::vector<std::string>{"cache"});
  m.to(DType::f64);
  EXPECT_EQ(m.buffers()[0].dtype(), DType::f64);
  auto lin = std::make_shared<nn::Linear>(2, 2, false);
  EXPECT_EQ(names_of(lin->named_parameters()), std::vector<std::string>{"weight"});
  EXPECT_FALSE(lin->bias.defined());
}

// train()/eval() propagate to every descendant; Dropout follows the mode.
TEST(NnModule, TrainEvalPropagates) {
  auto seq = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<Net>(), std::make_shared<nn::Dropout>(0.5)});
  for (auto& m : seq->modules()) EXPECT_TRUE(m->is_training());
  seq->eval();
  for (auto& m : seq->modules()) EXPECT_FALSE(m->is_training());
  Tensor x = ones({2, 4});
  expect_equal(seq->forward(x), (*seq)[0]->forward(x));  // dropout is the identity
  seq->train();
  for (auto& m : seq->modules()) EXPECT_TRUE(m->is_training());
}

// to(f64) converts floating params, buffers and grads in place (handles stay valid);
// integer buffers are untouched and values are preserved.
TEST(NnModule, ToF64InPlace) {
  manual_seed(3);
  auto net = std::make_shared<Net>();
  Tensor w_handle = net->fc1->weight;
  V before = vals(w_handle);
  net->forward(ones({1, 4})).sum().backward();
  net->to(DType::f64);
  EXPECT_EQ(w_handle.dtype(), DType::f64);
  EXPECT_TRUE(w_handle.is_same(net->parameters()[1]));
  EXPECT_EQ(vals(w_handle), before);
  EXPECT_EQ(w_handle.grad().dtype(), DType::f64);
  EXPECT_TRUE(w_handle.requires_grad());
  EXPECT_EQ(net->steps.dtype(), DType::i64);
  for (auto& [n, p] : net->named_parameters()) EXPECT_EQ(p.dtype(), DType::f64) << n;
  Tensor y = net->forward(ones({1, 4}, DType::f64));
  EXPECT_EQ(y.dtype(), DType::f64);
  net->zero_grad();
  y.sum().backward();
  EXPECT_EQ(w_handle.grad().dtype(), DType::f64);
  expect_error([&] { net->to(DType::i32); }, {"expected a floating dtype"});
}

// zero_grad() sets grads to undefined; zero_grad(false) zero-fills them in place.
TEST(NnModule, ZeroGrad) {
  auto net = std::make_shared<Net>();
  net->forward(ones({2, 4})).sum().backward();
  for (const Tensor& p : net->parameters()) ASSERT_TRUE(p.grad().defined());
  Tensor g = net->fc1->weight.grad();
  net->zero_grad(false);
  EXPECT_TRUE(net->fc1->weight.grad().is_same(g));
  for (const Tensor& p : net->parameters()) EXPECT_EQ(p.grad().abs().sum().item<double>(), 0.0);
  net->zero_grad();
  for (const Tensor& p : net->parameters()) EXPECT_FALSE(p.grad().defined());
}

// apply() visits every module, children before their parent.
TEST(NnModule, ApplyVisitsAllModules) {
  auto net = std::make_shared<Net>();
  std::vector<std::string> order;
  net->apply([&](nn::Module& m) {
    order.push_back(m.name());
    if (auto* lin = dynamic_cast<nn::Linear*>(&m)) nn::init::constant_(lin->weight, 0.5);
  });
  EXPECT_EQ(order, (std::vector<std::string>{"Linear", "ReLU", "Linear", "Net"}));
  EXPECT_EQ(vals(net->fc2->weight), V(6, 0.5));
}

// state_dict lists params then buffers per module, detached and sharing storage.
TEST(NnModule, StateDictSharesStorage) {
  auto net = std::make_shared<Net>();
  StateDict sd = net->state_dict();
  EXPECT_EQ(sd.keys(), (std::vector<std::string>{"scale", "steps", "fc1.weight", "fc1.bias",
                                                 "fc2.weight", "fc2.bias"}));
  const Tensor& w = sd.at("fc1.weight");
  EXPECT_FALSE(w.requires_grad());
  EXPECT_FALSE(w.is_same(net->fc1->weight));
  EXPECT_EQ(w.data_ptr(), net->fc1->weight.data_ptr());
  {
    NoGradGuard ng;
    Tensor(w).fill_(2.0);
  }
  EXPECT_EQ(vals(net->fc1->weight), V(12, 2.0));
}

// Loading another seed's state dict reproduces its outputs bit for bit.
TEST(NnModule, StateDictRoundTripBitExact) {
  manual_seed(1);
  auto a = std::make_shared<Net>();
  {
    NoGradGuard ng;
    a->steps.fill_(7);
  }
  manual_seed(2);
  auto b = std::make_shared<Net>();
  Tensor x = randn({5, 4});
  EXPECT_NE(vals(a->forward(x)), vals(b->forward(x)));
  Tensor bw = b->fc1->weight;
  auto res = b->load_state_dict(a->state_dict());
  EXPECT_TRUE(res.missing_keys.empty() && res.unexpected_keys.empty());
  expect_equal(b->forward(x), a->forward(x));
  EXPECT_TRUE(bw.is_same(b->fc1->weight));  // copied in place
  EXPECT_TRUE(bw.requires_grad());
  EXPECT_EQ(b->steps.item<int64_t>(), 7);
  // Loading into an f64 module converts values.
  b->to(DType::f64);
  b->load_state_dict(a->state_dict());
  EXPECT_EQ(b->fc1->weight.dtype(), DType::f64);
  expect_close(b->forward(x.to(DType::f64)), a->forward(x), 1e-6);
}

// Missing, unexpected and mis-shaped keys are reported by name; nothing is copied.
TEST(NnModule, LoadStateDictErrors) {
  auto net = std::make_shared<Net>();
  V before = vals(net->fc1->weight);
  StateDict sd = std::make_shared<Net>()->state_dict();
  sd.erase("fc2.bias");
  sd.set("extra.weight", ones({1}));
  sd.set("fc1.weight", zeros({3, 5}));
  expect_error([&] { net->load_state_dict(sd); },
               {"[load_state_dict]", "Net", "missing keys: [\"fc2.bias\"]",
                "unexpected keys: [\"extra.weight\"]",
                "size mismatch for fc1.weight: copying a param with shape [3, 5] from "
                "checkpoint, the shape in current model is [3, 4]"});
  EXPECT_EQ(vals(net->fc1->weight), before);
  // strict=false still refuses shape mismatches...
  expect_error([&] { net->load_state_dict(sd, false); }, {"size mismatch for fc1.weight"});
  // ...but returns the skipped keys otherwise and loads the rest.
  sd.erase("fc1.weight");
  auto res = net->load_state_dict(sd, false);
  EXPECT_EQ(res.missing_keys, (std::vector<std::string>{"fc1.weight", "fc2.bias"}));
  EXPECT_EQ(res.unexpected_keys, std::vector<std::string>{"extra.weight"});
  EXPECT_EQ(vals(net->fc1->weight), before);
  expect_equal(net->fc2->weight, sd.at("fc2.weight"));
}

// A module without forward() raises an error naming it; operator() calls forward.
TEST(NnModule, ForwardDefaultAndCallOperator) {
  auto m = std::make_shared<NoForward>();
  expect_error([&] { (*m)(ones({1})); }, {"NoForward does not implement forward"});
  auto lin = std::make_shared<nn::Linear>(2, 3);
  Tensor x = ones({4, 2});
  expect_equal((*lin)(x), lin->forward(x));
}

// Printing gives PyTorch's repr tree, exactly.
TEST(NnModule, PrintsTreeLikePyTorch) {
  auto net = std::make_shared<Net>();
  std::ostringstream os;
  os << *net;
  EXPECT_EQ(os.str(),
            "Net(\n"
            "  (fc1): Linear(in_features=4, out_features=3, bias=True)\n"
            "  (act): ReLU()\n"
            "  (fc2): Linear(in_features=3, out_features=2, bias=True)\n"
            ")");
  struct Outer : nn::Module {
    Outer() {
      register_module(
          "body",
          std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
              std::make_shared<nn::Linear>(2, 2, false), std::make_shared<nn::GELU>("tanh")}));
      register_module("norm", std::make_shared<nn::LayerNorm>(2));
      register_module("empty", std::make_shared<nn::ModuleList>());
    }
  };
  EXPECT_EQ(Outer().repr(),
            "Outer(\n"
            "  (body): Sequential(\n"
            "    (0): Linear(in_features=2, out_features=2, bias=False)\n"
            "    (1): GELU(approximate='tanh')\n"
            "  )\n"
            "  (norm): LayerNorm((2,), eps=1e-05, elementwise_affine=True)\n"
            "  (empty): ModuleList()\n"
            ")");
}

// Sequential chains forward, indexes (also negatively) and casts elements by type.
TEST(NnModule, SequentialAndModuleList) {
  manual_seed(0);
  auto seq = std::make_shared<nn::Sequential>();
  auto l1 = seq->push_back(std::make_shared<nn::Linear>(3, 4));
  seq->push_back(std::make_shared<nn::Tanh>());
  auto l2 = seq->push_back(std::make_shared<nn::Linear>(4, 2));
  Tensor x = randn({5, 3});
  expect_equal(seq->forward(x), l2->forward(tanh(l1->forward(x))));
  EXPECT_EQ(seq->size(), 3u);
  EXPECT_EQ((*seq)[-1].get(), l2.get());
  EXPECT_EQ(seq->at<nn::Linear>(0).get(), l1.get());
  expect_error([&] { seq->at<nn::ReLU>(0); }, {"element 0 is a Linear"});
  expect_error([&] { (*seq)[3]; }, {"[Sequential] index 3 is out of range for 3 modules"});
  EXPECT_EQ(names_of(seq->named_parameters())[2], "2.weight");
  auto named = std::make_shared<nn::Sequential>(nn::NamedModules{
      {"fc", std::make_shared<nn::Linear>(2, 2)}, {"act", std::make_shared<nn::ReLU>()}});
  EXPECT_EQ(named->state_dict().keys(), (std::vector<std::string>{"fc.weight", "fc.bias"}));
  EXPECT_EQ(named->forward(zeros({1, 2})).shape(), (Dims{1, 2}));

  nn::ModuleList list{std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(1, 1)};
  EXPECT_EQ(list.size(), 2u);
  EXPECT_EQ(list.state_dict().keys(), (std::vector<std::string>{"1.weight", "1.bias"}));
  int n = 0;
  for (auto& m : list) n += m != nullptr;
  EXPECT_EQ(n, 2);
  expect_error([&] { list.forward(x); }, {"ModuleList does not implement forward"});
}

// clone() is a deep copy: same values, type and mode, independent storage.
TEST(NnModule, CloneIsDeep) {
  auto seq = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(3, 3), std::make_shared<nn::BatchNorm1d>(3),
      std::make_shared<nn::Dropout>(0.25)});
  seq->to(DType::f64);
  seq->at<nn::Linear>(0)->weight.requires_grad_(false);
  seq->eval();
  auto c = nn::clone_as(*seq);
  EXPECT_EQ(c->repr(), seq->repr());
  EXPECT_FALSE(c->is_training());
  StateDict a = seq->state_dict(), b = c->state_dict();
  ASSERT_EQ(a.keys(), b.keys());
  for (auto& [k, t] : a) {
    expect_equal(b.at(k), t);
    EXPECT_EQ(b.at(k).dtype(), t.dtype()) << k;
    if (t.numel() > 0) {
      EXPECT_NE(b.at(k).data_ptr(), t.data_ptr()) << k;
    }
  }
  EXPECT_FALSE(c->at<nn::Linear>(0)->weight.requires_grad());
  EXPECT_TRUE(c->at<nn::Linear>(0)->bias.requires_grad());
  expect_error([] { NoForward().clone(); }, {"NoForward does not implement clone()"});
}
