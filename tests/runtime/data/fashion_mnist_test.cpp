// Verifies FashionMNIST against Debian's dataset-fashion-mnist files (skipped if absent).
#include <gtest/gtest.h>

#include <filesystem>

#include "kiln/data/data.h"
#include "kiln/kiln.h"

using namespace kiln;
using namespace kiln::data;

namespace {
bool have_data() {
  std::error_code ec;
  return std::filesystem::is_directory(FashionMNIST::kDefaultRoot, ec);
}
#define SKIP_WITHOUT_DATA()                  \
  if (!have_data())                          \
  GTEST_SKIP() << FashionMNIST::kDefaultRoot \
               << " is missing (apt-get install dataset-fashion-mnist to run this test)"
}  // namespace

// The train split has 60000 f32 [1, 28, 28] images in [0, 1] and i64 labels in 0..9.
TEST(DataFashionMNIST, LoadsTrainSplit) {
  SKIP_WITHOUT_DATA();
  FashionMNIST ds;
  ASSERT_EQ(ds.size(), 60000);
  EXPECT_EQ(ds.images().shape(), (Dims{60000, 1, 28, 28}));
  EXPECT_EQ(ds.images().dtype(), DType::f32);
  EXPECT_EQ(ds.labels().shape(), (Dims{60000}));
  EXPECT_EQ(ds.labels().dtype(), DType::i64);
  EXPECT_EQ(amin(ds.labels()).item<int64_t>(), 0);
  EXPECT_EQ(amax(ds.labels()).item<int64_t>(), 9);
  EXPECT_EQ(amin(ds.images()).item<float>(), 0.0f);
  EXPECT_EQ(amax(ds.images()).item<float>(), 1.0f);
  // Pixel mean of the training set is the documented normalization constant.
  EXPECT_NEAR(mean(ds.images()).item<double>(), FashionMNIST::kMean, 1e-3);
  // Balanced classes: 6000 per class.
  EXPECT_EQ(sum(eq(ds.labels(), 3)).item<int64_t>(), 6000);
  Example e = ds.get(0);
  EXPECT_EQ(e[0].shape(), (Dims{1, 28, 28}));
  EXPECT_EQ(e[1].dim(), 0);
  EXPECT_EQ(e[1].item<int64_t>(), 9);  // the first training image is an ankle boot
  EXPECT_EQ(FashionMNIST::class_names().size(), 10u);
  EXPECT_EQ(FashionMNIST::class_names()[9], "Ankle boot");
  EXPECT_THROW(ds.get(60000), Error);
}

// The test split has 10000 examples; normalization and subset work; a loader batches it.
TEST(DataFashionMNIST, TestSplitNormalizeSubsetAndLoader) {
  SKIP_WITHOUT_DATA();
  FashionMNIST ds(FashionMNISTOptions{.train = false, .normalize = true});
  ASSERT_EQ(ds.size(), 10000);
  EXPECT_NEAR(amin(ds.images()).item<double>(), -FashionMNIST::kMean / FashionMNIST::kStd, 1e-5);
  auto small = std::make_shared<FashionMNIST>(ds.subset(100));
  EXPECT_EQ(small->size(), 100);
  EXPECT_EQ(ds.subset(20000).size(), 10000);
  DataLoader loader(small, {.batch_size = 32, .shuffle = true, .num_workers = 2});
  int64_t seen = 0;
  for (auto& b : loader) {
    EXPECT_EQ(b[0].dim(), 4);
    EXPECT_EQ(b[0].size(1), 1);
    seen += b[1].size(0);
  }
  EXPECT_EQ(seen, 100);
}

// A missing directory or file raises kiln::Error naming the path and the apt package.
TEST(DataFashionMNIST, MissingFilesExplainHowToGetThem) {
  try {
    FashionMNIST ds("/nonexistent/kiln-fashion");
    FAIL() << "expected kiln::Error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("/nonexistent/kiln-fashion"), std::string::npos) << msg;
    EXPECT_NE(msg.find("apt-get install dataset-fashion-mnist"), std::string::npos) << msg;
  }
  auto dir = std::filesystem::temp_directory_path() / "kiln_fashion_empty_dir_test";
  std::filesystem::create_directories(dir);
  try {
    FashionMNIST ds(dir.string(), false);
    ADD_FAILURE() << "expected kiln::Error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("t10k-images-idx3-ubyte.gz"), std::string::npos) << msg;
  }
  std::filesystem::remove_all(dir);
}
