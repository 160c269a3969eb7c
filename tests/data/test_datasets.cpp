// The data layer's datasets: TensorDataset validation, IDX (plain/gzip, errors, real Fashion-MNIST),
// CIFAR-10 binary, and the synthetic dataset.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "data_test_util.h"
#include "lockstep/data/cifar10_dataset.h"
#include "lockstep/data/data_error.h"
#include "lockstep/data/idx_dataset.h"
#include "lockstep/data/synthetic_dataset.h"
#include "lockstep/data/tensor_dataset.h"

namespace lockstep::data {
namespace {

using testing::idx_bytes;
using testing::TempDir;
using testing::write_gz;
using testing::write_plain;

using testing::expect_error;

// n images of h x w where pixel j of image i is (i * 7 + j) % 256, and labels i % 10.
struct IdxPair {
  std::vector<uint8_t> images, labels;
};
IdxPair make_idx(uint32_t n, uint32_t h, uint32_t w) {
  std::vector<uint8_t> pixels(static_cast<size_t>(n) * h * w), labels(n);
  for (uint32_t i = 0; i < n; ++i) {
    labels[i] = static_cast<uint8_t>(i % 10);
    for (uint32_t j = 0; j < h * w; ++j)
      pixels[static_cast<size_t>(i) * h * w + j] = static_cast<uint8_t>((i * 7 + j) % 256);
  }
  return {idx_bytes(0x803, {n, h, w}, pixels), idx_bytes(0x801, {n}, labels)};
}

void expect_matches(const TensorDataset& ds, uint32_t n, uint32_t h, uint32_t w) {
  ASSERT_EQ(ds.size(), n);
  EXPECT_EQ(ds.channels(), 1);
  EXPECT_EQ(ds.height(), h);
  EXPECT_EQ(ds.width(), w);
  EXPECT_EQ(ds.images().scalar_type(), at::kByte);
  EXPECT_TRUE(ds.images().is_contiguous());
  EXPECT_EQ(ds.labels().scalar_type(), at::kLong);
  const uint8_t* px = ds.images().data_ptr<uint8_t>();
  const int64_t* lb = ds.labels().data_ptr<int64_t>();
  for (uint32_t i = 0; i < n; ++i) {
    ASSERT_EQ(lb[i], i % 10);
    for (uint32_t j = 0; j < h * w; ++j) ASSERT_EQ(px[static_cast<size_t>(i) * h * w + j], (i * 7 + j) % 256);
  }
}

TEST(TensorDatasetTest, AcceptsValidTensorsAndSharesStorageOnCopy) {
  TensorDataset ds(at::zeros({6, 3, 4, 5}, at::kByte), at::arange(6, at::kLong), "toy");
  EXPECT_EQ(ds.size(), 6);
  EXPECT_EQ(ds.channels(), 3);
  EXPECT_EQ(ds.height(), 4);
  EXPECT_EQ(ds.width(), 5);
  EXPECT_EQ(ds.description(), "toy");
  const TensorDataset copy = ds;
  EXPECT_EQ(copy.images().data_ptr(), ds.images().data_ptr());  // no deep copy
  // A non-contiguous images tensor is made contiguous.
  TensorDataset t(at::zeros({2, 4, 4, 1}, at::kByte).permute({0, 3, 1, 2}), at::zeros({2}, at::kLong),
                  "perm");
  EXPECT_TRUE(t.images().is_contiguous());
  EXPECT_EQ(TensorDataset().size(), 0);
}

TEST(TensorDatasetTest, RejectsBadShapesDtypesAndLabels) {
  expect_error<std::invalid_argument>(
      [] {
        TensorDataset(at::zeros({6, 4, 5}, at::kByte), at::zeros({6}, at::kLong), "x");
      },
      {"images must be a CPU uint8 tensor [N, C, H, W]", "[6, 4, 5]"});
  expect_error<std::invalid_argument>(
      [] {
        TensorDataset(at::zeros({6, 1, 4, 5}, at::kFloat), at::zeros({6}, at::kLong), "x");
      },
      {"Float"});
  expect_error<std::invalid_argument>(
      [] {
        TensorDataset(at::zeros({6, 1, 4, 5}, at::kByte), at::zeros({5}, at::kLong), "x");
      },
      {"labels must be a CPU int64 tensor [N] with N = 6", "[5]"});
  expect_error<std::invalid_argument>(
      [] {
        TensorDataset(at::zeros({2, 1, 1, 1}, at::kByte), at::tensor({0, -3}, at::kLong), "x");
      },
      {"labels must be >= 0, got -3 at index 1"});
}

TEST(IdxDatasetTest, PlainRoundTrip) {
  TempDir dir;
  const IdxPair pair = make_idx(13, 5, 3);
  write_plain(dir.file("img"), pair.images);
  write_plain(dir.file("lab"), pair.labels);
  const IdxDataset ds(dir.file("img"), dir.file("lab"));
  expect_matches(ds, 13, 5, 3);
}

TEST(IdxDatasetTest, GzipDetectedByMagicBytesNotByName) {
  TempDir dir;
  const IdxPair pair = make_idx(300, 28, 28);
  write_gz(dir.file("images-without-suffix"), pair.images);  // gzipped, name says nothing
  write_plain(dir.file("labels.gz"), pair.labels);           // plain, despite the name
  const IdxDataset ds(dir.file("images-without-suffix"), dir.file("labels.gz"));
  expect_matches(ds, 300, 28, 28);
}

TEST(IdxDatasetTest, FromDirFindsBothSplitsAndDescribesThem) {
  TempDir dir;
  const IdxPair train = make_idx(20, 4, 4), test = make_idx(7, 4, 4);
  write_gz(dir.file("train-images-idx3-ubyte.gz"), train.images);
  write_gz(dir.file("train-labels-idx1-ubyte.gz"), train.labels);
  write_plain(dir.file("t10k-images-idx3-ubyte"), test.images);
  write_plain(dir.file("t10k-labels-idx1-ubyte"), test.labels);
  const IdxDataset tr = IdxDataset::from_dir(dir.str(), Split::kTrain);
  expect_matches(tr, 20, 4, 4);
  EXPECT_EQ(tr.description(), "IDX train split (20 images 1x4x4) from " + dir.str());
  const IdxDataset te = IdxDataset::from_dir(dir.str(), Split::kTest);
  expect_matches(te, 7, 4, 4);
  EXPECT_EQ(te.description(), "IDX test split (7 images 1x4x4) from " + dir.str());
}

TEST(IdxDatasetTest, WrongMagicNamesFileExpectedAndGotInHex) {
  TempDir dir;
  const IdxPair pair = make_idx(3, 2, 2);
  write_plain(dir.file("img"), pair.images);
  write_plain(dir.file("lab"), pair.labels);
  // Swapped files: the images reader sees the labels magic.
  expect_error<DataError>([&] { IdxDataset(dir.file("lab"), dir.file("img")); },
                          {dir.file("lab"), "expected 0x00000803", "got 0x00000801", "swapped"});
  write_plain(dir.file("junk"), idx_bytes(0xDEADBEEF, {3, 2, 2}, std::vector<uint8_t>(12)));
  expect_error<DataError>([&] { IdxDataset(dir.file("junk"), dir.file("lab")); },
                          {dir.file("junk"), "expected 0x00000803, got 0xDEADBEEF"});
}

TEST(IdxDatasetTest, TruncatedPayloadSaysExpectedAndGotBytes) {
  TempDir dir;
  IdxPair pair = make_idx(10, 4, 4);
  pair.images.resize(pair.images.size() - 5);  // 160 pixel bytes promised, 155 present
  write_plain(dir.file("img"), pair.images);
  write_plain(dir.file("lab"), pair.labels);
  expect_error<DataError>([&] { IdxDataset(dir.file("img"), dir.file("lab")); },
                          {dir.file("img"), "expected 160 bytes", "got 155", "truncated"});
  // The same, gzipped: the check applies to the decompressed payload.
  write_gz(dir.file("img.gz"), pair.images);
  expect_error<DataError>([&] { IdxDataset(dir.file("img.gz"), dir.file("lab")); },
                          {dir.file("img.gz"), "expected 160 bytes", "got 155"});
  // A header cut short.
  write_plain(dir.file("short"), std::vector<uint8_t>{0, 0, 8, 3, 0});
  expect_error<DataError>([&] { IdxDataset(dir.file("short"), dir.file("lab")); },
                          {dir.file("short"), "too short for an IDX header", "got 5"});
}

TEST(IdxDatasetTest, TruncatedOrCorruptGzipStreamNamesFile) {
  TempDir dir;
  const IdxPair pair = make_idx(200, 28, 28);
  write_gz(dir.file("full.gz"), pair.images);
  write_plain(dir.file("lab"), pair.labels);
  std::vector<uint8_t> gz = testing::read_all(dir.file("full.gz"));
  gz.resize(gz.size() / 2);
  write_plain(dir.file("cut.gz"), gz);
  expect_error<DataError>([&] { IdxDataset(dir.file("cut.gz"), dir.file("lab")); },
                          {dir.file("cut.gz"), "gzip stream ends early", "truncated"});
  gz = testing::read_all(dir.file("full.gz"));
  for (size_t i = 20; i < 60; ++i) gz[i] ^= 0x5A;
  write_plain(dir.file("bad.gz"), gz);
  expect_error<DataError>([&] { IdxDataset(dir.file("bad.gz"), dir.file("lab")); },
                          {dir.file("bad.gz"), "gzip"});
}

TEST(IdxDatasetTest, CountMismatchNamesBothFilesAndCounts) {
  TempDir dir;
  write_plain(dir.file("img"), make_idx(12, 2, 2).images);
  write_plain(dir.file("lab"), make_idx(11, 2, 2).labels);
  expect_error<DataError>([&] { IdxDataset(dir.file("img"), dir.file("lab")); },
                          {dir.file("img"), "12 images", dir.file("lab"), "11 labels"});
}

TEST(IdxDatasetTest, ZeroOrImplausibleDimensionIsRejected) {
  TempDir dir;
  write_plain(dir.file("lab"), make_idx(3, 2, 2).labels);
  write_plain(dir.file("zero"), idx_bytes(0x803, {3, 0, 2}, {}));
  expect_error<DataError>([&] { IdxDataset(dir.file("zero"), dir.file("lab")); },
                          {dir.file("zero"), "implausible dimension 1 of 0"});
  write_plain(dir.file("huge"), idx_bytes(0x803, {3, 2, 1u << 20}, {}));
  expect_error<DataError>([&] { IdxDataset(dir.file("huge"), dir.file("lab")); },
                          {dir.file("huge"), "dimension 2 of 1048576"});
}

TEST(IdxDatasetTest, MissingFileOrDirNamesPathAndHowToGetData) {
  TempDir dir;
  const std::string missing = dir.file("no-such-dir");
  expect_error<DataError>([&] { IdxDataset::from_dir(missing, Split::kTrain); },
                          {missing, "does not exist", "apt-get install dataset-fashion-mnist", "data_dir"});
  write_plain(dir.file("train-images-idx3-ubyte"), make_idx(3, 2, 2).images);
  expect_error<DataError>([&] { IdxDataset::from_dir(dir.str(), Split::kTrain); },
                          {"train-labels-idx1-ubyte", dir.str(), "dataset-fashion-mnist", "data_dir"});
  expect_error<DataError>([&] { IdxDataset::from_dir(dir.str(), Split::kTest); },
                          {"t10k-images-idx3-ubyte", "test split"});
  expect_error<DataError>([&] { IdxDataset(dir.file("nope"), dir.file("nope2")); },
                          {dir.file("nope"), "does not exist"});
}

TEST(IdxDatasetTest, RealFashionMnist) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(dir + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << dir << " is absent (apt-get install dataset-fashion-mnist)";
  }
  const IdxDataset train = IdxDataset::from_dir(dir, Split::kTrain);  // its load time: bench/data_bench.cpp
  ASSERT_EQ(train.size(), 60000);
  EXPECT_EQ(train.channels(), 1);
  EXPECT_EQ(train.height(), 28);
  EXPECT_EQ(train.width(), 28);
  const at::Tensor counts = at::bincount(train.labels());
  ASSERT_EQ(counts.numel(), 10);
  for (int64_t c = 0; c < 10; ++c) EXPECT_EQ(counts[c].item<int64_t>(), 6000) << "class " << c;
  // Real images, not zeros: Fashion-MNIST's mean pixel is ~72.9 (0.2860 * 255).
  EXPECT_NEAR(static_cast<double>(train.images().sum(at::kLong).item<int64_t>()) / train.images().numel(),
              72.94, 0.1);
  const IdxDataset test = IdxDataset::from_dir(dir, Split::kTest);
  EXPECT_EQ(test.size(), 10000);
  EXPECT_EQ(at::bincount(test.labels()).min().item<int64_t>(), 1000);
}

// CIFAR-10 records for n images: label (i + offset) % 10, pixel j = (i + j) % 251.
std::vector<uint8_t> cifar_bytes(int n, int offset) {
  std::vector<uint8_t> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(static_cast<uint8_t>((i + offset) % 10));
    for (int j = 0; j < 3072; ++j) out.push_back(static_cast<uint8_t>((i + j) % 251));
  }
  return out;
}

TEST(Cifar10DatasetTest, ReadsTrainBatchesInOrderAndTestFromSubdir) {
  TempDir dir;
  for (int b = 1; b <= 5; ++b)
    write_plain(dir.file("data_batch_" + std::to_string(b) + ".bin"), cifar_bytes(b, b));
  const Cifar10Dataset train = Cifar10Dataset::from_dir(dir.str(), Split::kTrain);
  ASSERT_EQ(train.size(), 1 + 2 + 3 + 4 + 5);
  EXPECT_EQ(train.channels(), 3);
  EXPECT_EQ(train.height(), 32);
  EXPECT_EQ(train.width(), 32);
  std::vector<int64_t> expected_labels;
  for (int b = 1; b <= 5; ++b) {
    for (int i = 0; i < b; ++i) expected_labels.push_back((i + b) % 10);
  }
  const int64_t* lab = train.labels().data_ptr<int64_t>();
  EXPECT_EQ(std::vector<int64_t>(lab, lab + train.size()), expected_labels);
  // Pixels, channel-major: the record's byte 1 + c*1024 + y*32 + x is image[c][y][x].
  const at::Tensor img = train.images()[4];  // batch 3, record 1
  EXPECT_EQ(img[0][0][0].item<int>(), (1 + 0) % 251);
  EXPECT_EQ(img[2][1][3].item<int>(), (1 + 2 * 1024 + 32 + 3) % 251);

  TempDir root;
  std::filesystem::create_directory(root.file("cifar-10-batches-bin"));
  write_plain(root.file("cifar-10-batches-bin/test_batch.bin"), cifar_bytes(4, 0));
  const Cifar10Dataset test = Cifar10Dataset::from_dir(root.str(), Split::kTest);
  EXPECT_EQ(test.size(), 4);
  EXPECT_NE(test.description().find("CIFAR-10 test split (4 images 3x32x32)"), std::string::npos);
}

TEST(Cifar10DatasetTest, BadSizeBadLabelAndMissingFilesAreNamed) {
  TempDir dir;
  std::vector<uint8_t> bytes = cifar_bytes(2, 0);
  bytes.pop_back();
  write_plain(dir.file("test_batch.bin"), bytes);
  expect_error<DataError>([&] { Cifar10Dataset::from_dir(dir.str(), Split::kTest); },
                          {dir.file("test_batch.bin"), "6145 bytes", "multiple of 3073"});
  bytes = cifar_bytes(3, 0);
  bytes[2 * 3073] = 10;  // record 2's label
  write_plain(dir.file("test_batch.bin"), bytes);
  expect_error<DataError>([&] { Cifar10Dataset::from_dir(dir.str(), Split::kTest); },
                          {dir.file("test_batch.bin"), "record 2", "label 10", "0..9"});
  write_plain(dir.file("data_batch_1.bin"), cifar_bytes(1, 0));
  expect_error<DataError>(
      [&] { Cifar10Dataset::from_dir(dir.str(), Split::kTrain); },
      {dir.file("data_batch_2.bin"), "does not exist", "cifar-10-batches-bin", "data_dir"});
  expect_error<DataError>([&] { Cifar10Dataset::from_dir(dir.file("absent"), Split::kTrain); },
                          {dir.file("absent"), "does not exist"});
}

TEST(SyntheticDatasetTest, DeterministicPerSeedAndSplit) {
  const auto opts = SyntheticOptions().size(100).channels(3).height(8).width(6).num_classes(4).seed(5);
  const SyntheticDataset a(opts, Split::kTrain), b(opts, Split::kTrain);
  EXPECT_TRUE(at::equal(a.images(), b.images()));
  EXPECT_TRUE(at::equal(a.labels(), b.labels()));
  const SyntheticDataset test(opts, Split::kTest);
  EXPECT_FALSE(at::equal(a.images(), test.images()));
  const SyntheticDataset other(SyntheticOptions(opts).seed(6), Split::kTrain);
  EXPECT_FALSE(at::equal(a.images(), other.images()));
  EXPECT_EQ(a.images().sizes(), (std::vector<int64_t>{100, 3, 8, 6}));
  EXPECT_EQ(a.description(), "synthetic train split (100 images 3x8x6, 4 classes, seed 5)");
  // Defaults: 4096 images 1x28x28, 10 balanced classes.
  const SyntheticDataset d(SyntheticOptions(), Split::kTrain);
  EXPECT_EQ(d.images().sizes(), (std::vector<int64_t>{4096, 1, 28, 28}));
  const at::Tensor counts = at::bincount(d.labels());
  EXPECT_EQ(counts.numel(), 10);
  EXPECT_LE((counts.max() - counts.min()).item<int64_t>(), 1);
}

TEST(SyntheticDatasetTest, LearnableNearestClassMeanBeatsChanceByFar) {
  const auto opts = SyntheticOptions().size(2000).seed(11);
  const SyntheticDataset train(opts, Split::kTrain);
  const SyntheticDataset test(SyntheticOptions(opts).size(500), Split::kTest);
  const at::Tensor x = train.images().to(at::kFloat).flatten(1);
  at::Tensor means = at::zeros({10, x.size(1)});
  means.index_add_(0, train.labels(), x);
  means.div_(at::bincount(train.labels()).to(at::kFloat).unsqueeze(1));
  const at::Tensor dist = at::cdist(test.images().to(at::kFloat).flatten(1), means);
  const double acc = dist.argmin(1).eq(test.labels()).to(at::kDouble).mean().item<double>();
  EXPECT_GT(acc, 0.9);  // chance is 0.1
  // Noisy, not copies of the prototypes: two samples of one class differ.
  const at::Tensor same = at::nonzero(train.labels() == train.labels()[0]).flatten();
  EXPECT_FALSE(at::equal(train.images()[same[0].item<int64_t>()], train.images()[same[1].item<int64_t>()]));
}

// Images over 16 KiB (as float) are drawn fewer than 4096 at a time, to bound the scratch memory: the
// samples of every step are still their class prototype plus fresh noise.
TEST(SyntheticDatasetTest, LargeImagesAreDrawnInStepsAndStayLearnable) {
  const auto opts = SyntheticOptions().size(1500).channels(3).height(96).width(96).seed(3);  // 606 per step
  const SyntheticDataset train(opts, Split::kTrain);
  EXPECT_EQ(train.images().sizes(), (std::vector<int64_t>{1500, 3, 96, 96}));
  EXPECT_TRUE(at::equal(train.images(), SyntheticDataset(opts, Split::kTrain).images()));
  const SyntheticDataset test(SyntheticOptions(opts).size(300), Split::kTest);
  const at::Tensor x = train.images().to(at::kFloat).flatten(1);
  at::Tensor means = at::zeros({10, x.size(1)});
  means.index_add_(0, train.labels(), x);
  means.div_(at::bincount(train.labels()).to(at::kFloat).unsqueeze(1));
  const at::Tensor dist = at::cdist(test.images().to(at::kFloat).flatten(1), means);
  EXPECT_GT(dist.argmin(1).eq(test.labels()).to(at::kDouble).mean().item<double>(), 0.9);
  // The last step's samples are not copies of the first step's.
  EXPECT_FALSE(at::equal(train.images().slice(0, 0, 100), train.images().slice(0, 1400, 1500)));
}

TEST(SyntheticDatasetTest, RejectsBadOptions) {
  expect_error<std::invalid_argument>([] { SyntheticDataset(SyntheticOptions().size(-1), Split::kTrain); },
                                      {"size must be >= 0, got -1"});
  expect_error<std::invalid_argument>(
      [] { SyntheticDataset(SyntheticOptions().num_classes(0), Split::kTrain); },
      {"num_classes must be >= 1, got 0"});
  expect_error<std::invalid_argument>([] { SyntheticDataset(SyntheticOptions().width(0), Split::kTest); },
                                      {"width must be >= 1, got 0"});
  EXPECT_EQ(SyntheticDataset(SyntheticOptions().size(0), Split::kTrain).size(), 0);
}

}  // namespace
}  // namespace lockstep::data
