// Fashion-MNIST from its IDX files (gzip or raw).
#include "kiln/data/fashion_mnist.h"

#include <algorithm>
#include <filesystem>

#include "kiln/autograd.h"
#include "kiln/data/idx.h"
#include "kiln/error.h"
#include "kiln/functional.h"

namespace kiln::data {
namespace {

constexpr int64_t kSide = 28;
constexpr int64_t kClasses = 10;
constexpr const char* kHowToGet =
    "install Debian's package (apt-get install dataset-fashion-mnist, files in "
    "/usr/share/datasets/fashion-mnist) or download the four *-ubyte.gz files from "
    "https://github.com/zalandoresearch/fashion-mnist into that directory";

// `<root>/<stem>.gz`, or `<root>/<stem>` (uncompressed) if only that exists.
std::string find_file(const std::string& root, const std::string& stem) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path gz = fs::path(root) / (stem + ".gz"), raw = fs::path(root) / stem;
  if (fs::is_regular_file(gz, ec)) return gz.string();
  if (fs::is_regular_file(raw, ec)) return raw.string();
  throw_error(
      str("[FashionMNIST] missing file ", gz.string(), " (or ", raw.string(), "); ", kHowToGet));
}

}  // namespace

FashionMNIST::FashionMNIST(const std::string& root, bool train)
    : FashionMNIST(FashionMNISTOptions{root, train, false}) {}

FashionMNIST::FashionMNIST(const FashionMNISTOptions& opts) {
  std::string root = opts.root.empty() ? kDefaultRoot : opts.root;
  std::error_code ec;
  KILN_CHECK(std::filesystem::is_directory(root, ec), "[FashionMNIST] directory ", root,
             " does not exist; ", kHowToGet);
  std::string prefix = opts.train ? "train" : "t10k";
  std::string image_path = find_file(root, prefix + "-images-idx3-ubyte");
  std::string label_path = find_file(root, prefix + "-labels-idx1-ubyte");
  Tensor raw_images = read_idx(image_path);
  Tensor raw_labels = read_idx(label_path);
  KILN_CHECK(raw_images.dtype() == DType::u8 && raw_images.dim() == 3 &&
                 raw_images.size(1) == kSide && raw_images.size(2) == kSide,
             "[FashionMNIST] ", image_path, ": expected u8 images of shape [N, 28, 28], got ",
             raw_images.dtype(), " ", raw_images.shape());
  KILN_CHECK(raw_labels.dtype() == DType::u8 && raw_labels.dim() == 1, "[FashionMNIST] ",
             label_path, ": expected u8 labels of shape [N], got ", raw_labels.dtype(), " ",
             raw_labels.shape());
  KILN_CHECK(raw_images.size(0) == raw_labels.size(0), "[FashionMNIST] ", image_path, " has ",
             raw_images.size(0), " images but ", label_path, " has ", raw_labels.size(0),
             " labels");
  int64_t n = raw_labels.size(0);
  if (n > 0) {
    int64_t top = amax(raw_labels).item<int64_t>();
    KILN_CHECK(top < kClasses, "[FashionMNIST] ", label_path, ": label ", top,
               " is out of range 0..", kClasses - 1);
  }
  NoGradGuard no_grad;
  Tensor x = raw_images.to(DType::f32).div_(255.0);
  if (opts.normalize) x.sub_(kMean).div_(kStd);
  images_ = x.reshape({n, 1, kSide, kSide});
  labels_ = raw_labels.to(DType::i64);
}

Example FashionMNIST::get(int64_t index) const {
  KILN_CHECK(index >= 0 && index < size(), "[FashionMNIST] index ", index,
             " is out of range for a dataset of size ", size());
  return {images_.select(0, index), labels_.select(0, index)};
}

FashionMNIST FashionMNIST::subset(int64_t n) const {
  KILN_CHECK(n >= 0, "[FashionMNIST] subset size must be >= 0, got ", n);
  n = std::min(n, size());
  return FashionMNIST(images_.narrow(0, 0, n), labels_.narrow(0, 0, n));
}

const std::vector<std::string>& FashionMNIST::class_names() {
  static const std::vector<std::string> names = {"T-shirt/top", "Trouser",   "Pullover", "Dress",
                                                 "Coat",        "Sandal",    "Shirt",    "Sneaker",
                                                 "Bag",         "Ankle boot"};
  return names;
}

}  // namespace kiln::data
