// Fashion-MNIST (Zalando): 28x28 grayscale clothing images in 10 classes,
// 60000 train / 10000 test, read from the IDX files of Debian's
// dataset-fashion-mnist package (or any directory holding the same files).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kiln/data/dataset.h"

namespace kiln::data {

/// FashionMNIST settings.
struct FashionMNISTOptions {
  std::string root = "";   ///< IDX file directory; "" = FashionMNIST::kDefaultRoot
  bool train = true;       ///< train-* (60000) or t10k-* (10000) files
  bool normalize = false;  ///< (x - kMean) / kStd after scaling to [0, 1]
};

/// Example i is {image f32 [1, 28, 28] in [0, 1] (or normalized), label i64 0-d}.
class FashionMNIST : public Dataset {
 public:
  /// Where `apt-get install dataset-fashion-mnist` puts the files.
  static constexpr const char* kDefaultRoot = "/usr/share/datasets/fashion-mnist";
  /// Mean and standard deviation of the training pixels (after scaling to [0, 1]).
  static constexpr double kMean = 0.2860;
  static constexpr double kStd = 0.3530;

  /// Loads `<root>/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]`. A missing
  /// directory or file raises kiln::Error naming the path and how to get the data.
  explicit FashionMNIST(const std::string& root = "", bool train = true);
  explicit FashionMNIST(const FashionMNISTOptions& opts);

  int64_t size() const override { return labels_.size(0); }
  Example get(int64_t index) const override;
  /// All images, f32 [N, 1, 28, 28].
  const Tensor& images() const { return images_; }
  /// All labels, i64 [N] in 0..9.
  const Tensor& labels() const { return labels_; }
  /// The first n examples (views of this dataset's tensors); n is clamped to size().
  FashionMNIST subset(int64_t n) const;
  /// Names of the 10 classes, indexed by label.
  static const std::vector<std::string>& class_names();

 private:
  FashionMNIST(Tensor images, Tensor labels)
      : images_(std::move(images)), labels_(std::move(labels)) {}
  Tensor images_;
  Tensor labels_;
};

}  // namespace kiln::data
