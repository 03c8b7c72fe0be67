// A small ResNet (BasicBlocks with BatchNorm and residual adds, global average
// pooling) on Fashion-MNIST, trained with SGD + momentum under the 1cycle
// policy (OneCycleLR, momentum cycled), eagerly or through kiln::compile.
#pragma once

#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "kiln/compile.h"
#include "kiln/device.h"
#include "kiln/nn/nn.h"

namespace kiln::examples {

/// torchvision's BasicBlock: two 3x3 conv + BatchNorm, plus the input (through
/// a 1x1 conv + BatchNorm when the shape changes), then ReLU.
class BasicBlock : public nn::Module {
 public:
  BasicBlock(int64_t in_planes, int64_t planes, int64_t stride = 1);
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2;
  std::shared_ptr<nn::Sequential> shortcut;  ///< empty: the identity
};

/// Stem conv -> stages of BasicBlocks (width doubling, stride 2 after the
/// first) -> adaptive average pooling -> linear classifier.
class ResNet : public nn::Module {
 public:
  /// blocks[i] BasicBlocks in stage i, the first stage `width` channels wide.
  ResNet(std::vector<int64_t> blocks, int64_t width = 16, int64_t in_channels = 1,
         int64_t num_classes = 10);
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<nn::Sequential> stem, stages;
  std::shared_ptr<nn::AdaptiveAvgPool2d> pool;
  std::shared_ptr<nn::Linear> fc;
};

/// What to train (small defaults: a run takes seconds).
struct ResNetOptions {
  std::vector<int64_t> blocks = {1, 1};
  int64_t width = 8;
  int epochs = 1;
  int64_t batch_size = 32;
  int64_t train_limit = 512;  ///< first N training images (0 = all 60000)
  int64_t test_limit = 256;   ///< first N test images (0 = all 10000)
  double max_lr = 0.1;        ///< OneCycleLR's peak
  double momentum = 0.9;      ///< SGD momentum (OneCycleLR cycles it 0.85..0.95)
  double weight_decay = 5e-4;
  uint64_t seed = 0;
  bool compile = false;           ///< run the training step through kiln::compile
  bool synthetic = false;         ///< random images even when Fashion-MNIST is installed
  Device device = Device::cpu();  ///< where the model trains (batches are moved there)
  std::string root = "";          ///< Fashion-MNIST directory ("" = Debian's package)
};

/// Figures of a run.
struct ResNetResult {
  std::vector<double> losses;   ///< per step
  std::vector<double> lrs;      ///< learning rate used at each step
  std::vector<double> momenta;  ///< momentum used at each step
  double test_accuracy = 0;     ///< eval mode (running statistics)
  bool synthetic_data = false;  ///< Fashion-MNIST was not found (or not wanted)
  CompileStats compile_stats;   ///< of the compiled step (zeros when eager)
  std::shared_ptr<ResNet> model;
};

/// Trains and evaluates, printing progress to `log`.
ResNetResult train_resnet(const ResNetOptions& opts, std::ostream& log);

}  // namespace kiln::examples
