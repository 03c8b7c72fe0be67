#include "resnet.h"

#include <cmath>
#include <filesystem>
#include <iomanip>

#include "kiln/kiln.h"

namespace kiln::examples {

BasicBlock::BasicBlock(int64_t in_planes, int64_t planes, int64_t stride) {
  conv1 = register_module(
      "conv1",
      std::make_shared<nn::Conv2d>(
          in_planes, planes, 3, nn::Conv2dOptions{.stride = stride, .padding = 1, .bias = false}));
  bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(planes));
  conv2 = register_module(
      "conv2", std::make_shared<nn::Conv2d>(planes, planes, 3,
                                            nn::Conv2dOptions{.padding = 1, .bias = false}));
  bn2 = register_module("bn2", std::make_shared<nn::BatchNorm2d>(planes));
  shortcut = register_module("shortcut", std::make_shared<nn::Sequential>());
  if (stride != 1 || in_planes != planes) {
    shortcut->push_back(std::make_shared<nn::Conv2d>(
        in_planes, planes, 1, nn::Conv2dOptions{.stride = stride, .bias = false}));
    shortcut->push_back(std::make_shared<nn::BatchNorm2d>(planes));
  }
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor out = (*bn1)((*conv1)(x)).relu();
  out = (*bn2)((*conv2)(out));
  out = out + (shortcut->empty() ? x : (*shortcut)(x));
  return out.relu();
}

ResNet::ResNet(std::vector<int64_t> blocks, int64_t width, int64_t in_channels,
               int64_t num_classes) {
  stem = register_module(
      "stem", std::make_shared<nn::Sequential>(
                  std::make_shared<nn::Conv2d>(in_channels, width, 3,
                                               nn::Conv2dOptions{.padding = 1, .bias = false}),
                  std::make_shared<nn::BatchNorm2d>(width), std::make_shared<nn::ReLU>()));
  stages = register_module("stages", std::make_shared<nn::Sequential>());
  int64_t in_planes = width;
  for (size_t s = 0; s < blocks.size(); ++s) {
    const int64_t planes = width << s;
    for (int64_t b = 0; b < blocks[s]; ++b) {
      const int64_t stride = (s > 0 && b == 0) ? 2 : 1;
      stages->push_back(std::make_shared<BasicBlock>(in_planes, planes, stride));
      in_planes = planes;
    }
  }
  pool = register_module("pool", std::make_shared<nn::AdaptiveAvgPool2d>(1));
  fc = register_module("fc", std::make_shared<nn::Linear>(in_planes, num_classes));
  // As torchvision: Kaiming-normal convolutions, BatchNorm weight 1 and bias 0.
  for (const auto& m : modules())
    if (auto conv = std::dynamic_pointer_cast<nn::Conv2d>(m))
      nn::init::kaiming_normal_(conv->weight, 0.0, nn::init::FanMode::kFanOut,
                                nn::init::Nonlinearity::kReLU);
}

Tensor ResNet::forward(const Tensor& x) {
  Tensor h = (*stages)((*stem)(x));
  return (*fc)((*pool)(h).flatten(1));
}

namespace {

std::shared_ptr<data::Dataset> first_n(std::shared_ptr<data::Dataset> ds, int64_t n) {
  if (n <= 0 || n >= ds->size()) return ds;
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) idx[static_cast<size_t>(i)] = i;
  return std::make_shared<data::Subset>(ds, idx);
}

// Fashion-MNIST-shaped data that can be learnt: class k is a stripe pattern
// (horizontal for k < 5, vertical otherwise, period k % 5 + 2 pixels) under
// Gaussian noise. Stripes survive global average pooling (convolutions see
// their frequency); fixed per-pixel patterns would not.
std::shared_ptr<data::Dataset> synthetic(int64_t n, uint64_t seed) {
  RngStateGuard keep;  // the model's initialisation does not depend on the data
  manual_seed(seed + 1000);
  Tensor labels = randint(0, 10, {n});
  std::vector<Tensor> patterns;
  for (int64_t k = 0; k < 10; ++k) {
    Tensor wave = (arange(0.0, 28.0, 1.0) * (2 * M_PI / static_cast<double>(k % 5 + 2))).sin();
    Tensor img =
        k < 5 ? wave.reshape({28, 1}).expand({28, 28}) : wave.reshape({1, 28}).expand({28, 28});
    patterns.push_back(img.reshape({1, 28, 28}));
  }
  Tensor images =
      randn({n, 1, 28, 28}) * 0.5 + stack(patterns).to(DType::f32).index_select(0, labels);
  return std::make_shared<data::TensorDataset>(std::vector<Tensor>{images, labels});
}

double evaluate(ResNet& model, data::DataLoader& loader, Device device) {
  InferenceMode guard;
  model.eval();
  int64_t correct = 0, total = 0;
  for (auto& [x, y] : loader) {
    correct += model(x.to(device)).argmax(1).eq(y.to(device)).sum().item<int64_t>();
    total += y.numel();
  }
  model.train();
  return total ? static_cast<double>(correct) / static_cast<double>(total) : 0.0;
}

}  // namespace

ResNetResult train_resnet(const ResNetOptions& o, std::ostream& log) {
  ResNetResult r;
  std::shared_ptr<data::Dataset> train_set, test_set;
  const bool have_data = std::filesystem::exists(
      std::filesystem::path(o.root.empty() ? data::FashionMNIST::kDefaultRoot : o.root) /
      "train-images-idx3-ubyte.gz");
  r.synthetic_data = o.synthetic || !have_data;
  if (r.synthetic_data) {
    train_set = synthetic(o.train_limit > 0 ? o.train_limit : 2048, o.seed);
    test_set = synthetic(o.test_limit > 0 ? o.test_limit : 512, o.seed + 1);
  } else {
    train_set = first_n(std::make_shared<data::FashionMNIST>(data::FashionMNISTOptions{
                            .root = o.root, .train = true, .normalize = true}),
                        o.train_limit);
    test_set = first_n(std::make_shared<data::FashionMNIST>(data::FashionMNISTOptions{
                           .root = o.root, .train = false, .normalize = true}),
                       o.test_limit);
  }
  // Full batches only, so every compiled call has the same shapes.
  data::DataLoader train_loader(
      train_set, {.batch_size = o.batch_size, .shuffle = true, .seed = o.seed, .drop_last = true});
  data::DataLoader test_loader(test_set, {.batch_size = 256});

  manual_seed(o.seed);
  r.model = std::make_shared<ResNet>(o.blocks, o.width);
  ResNet& model = *r.model;
  model.to(o.device);  // before the optimizer, whose state follows the parameters
  optim::SGD opt(model.parameters(),
                 {.lr = o.max_lr, .momentum = o.momentum, .weight_decay = o.weight_decay});
  const int64_t total_steps = o.epochs * static_cast<int64_t>(train_loader.size());
  optim::OneCycleLR sched(opt, o.max_lr, total_steps);  // cycle_momentum is on by default
  log << "ResNet: " << model.parameters().size() << " parameter tensors; "
      << (r.synthetic_data ? "synthetic data" : "Fashion-MNIST") << ", " << train_set->size()
      << " training images, " << total_steps << " steps" << (o.compile ? " (compiled)" : "")
      << ", on " << o.device << "\n";

  auto train_step = [&](const Tensor& x, const Tensor& y) {
    Tensor loss = cross_entropy(model(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    return loss;
  };
  auto step = kiln::compile(train_step, {.enabled = o.compile, .name = "resnet_train_step"});

  for (int epoch = 1; epoch <= o.epochs; ++epoch) {
    for (auto& [x, y] : train_loader) {
      r.lrs.push_back(opt.param_groups()[0].lr());
      r.momenta.push_back(opt.param_groups()[0].get("momentum"));
      Tensor loss = step(x.to(o.device), y.to(o.device));
      sched.step();
      r.losses.push_back(loss.item<double>());
      if (r.losses.size() % 10 == 0)
        log << "step " << std::setw(5) << r.losses.size() << "  loss " << std::fixed
            << std::setprecision(4) << r.losses.back() << "  lr " << std::scientific
            << std::setprecision(2) << r.lrs.back() << "  momentum " << std::fixed
            << std::setprecision(3) << r.momenta.back() << std::defaultfloat << std::endl;
    }
    r.test_accuracy = evaluate(model, test_loader, o.device);
    log << "epoch " << epoch << "  last loss " << std::fixed << std::setprecision(4)
        << r.losses.back() << "  test accuracy " << std::setprecision(2) << 100.0 * r.test_accuracy
        << "%" << std::defaultfloat << std::endl;
  }
  if (o.compile) r.compile_stats = step.stats();
  return r;
}

}  // namespace kiln::examples
