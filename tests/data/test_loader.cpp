// The data layer's transforms and Loader: exact normalisation, crop/flip, batches in order over exactly
// the given indices whatever the worker count, determinism, errors, cancellation and shutdown.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "../support/wait_until.h"
#include "data_test_util.h"
#include "lockstep/data/loader.h"
#include "lockstep/data/synthetic_dataset.h"
#include "lockstep/data/tensor_dataset.h"
#include "lockstep/data/transforms.h"

namespace lockstep::data {
namespace {

using testing::expect_error;

// torchvision's ToTensor + Normalize, in float32 tensor ops.
at::Tensor reference_normalize(const at::Tensor& u8, const std::vector<double>& mean,
                               const std::vector<double>& std) {
  at::Tensor x = u8.to(at::kFloat).div(255);
  for (int64_t c = 0; c < x.size(1); ++c) {
    at::Tensor ch = x.select(1, c);
    ch.sub_(mean.empty() ? 0.0 : mean[mean.size() == 1 ? 0 : c])
        .div_(std.empty() ? 1.0 : std[std.size() == 1 ? 0 : c]);
  }
  return x;
}

at::Tensor random_u8(std::vector<int64_t> shape, uint64_t seed) {
  return at::randint(0, 256, shape, at::detail::createCPUGenerator(seed), at::TensorOptions(at::kByte));
}

TEST(TransformTest, NormalisationIsTorchvisionsBitForBit) {
  const at::Tensor x = random_u8({5, 3, 7, 9}, 1);
  const std::vector<double> mean{0.4914, 0.4822, 0.4465}, std{0.2470, 0.2435, 0.2616};
  const Transform t(TransformOptions().mean(mean).std(std), 3);
  const at::Tensor y = t(x);
  EXPECT_EQ(y.scalar_type(), at::kFloat);
  EXPECT_EQ(y.sizes(), x.sizes());
  EXPECT_TRUE(at::equal(y, reference_normalize(x, mean, std)));
  // Defaults (x / 255) and one value for all channels.
  EXPECT_TRUE(at::equal(Transform(TransformOptions(), 3)(x), x.to(at::kFloat).div(255)));
  EXPECT_TRUE(at::equal(Transform(TransformOptions().mean({0.5}).std({0.5}), 3)(x),
                        reference_normalize(x, {0.5}, {0.5})));
  // Spot values: 0 -> -mean/std, 255 -> (1 - mean)/std.
  const at::Tensor corners = at::tensor({0, 255}, at::kByte).reshape({2, 1, 1, 1});
  const at::Tensor z = Transform(TransformOptions().mean({0.5}).std({0.25}), 1)(corners);
  EXPECT_FLOAT_EQ(z[0].item<float>(), -2.0f);
  EXPECT_FLOAT_EQ(z[1].item<float>(), 2.0f);
  // The augment path with nothing to augment is the same normalisation.
  EXPECT_TRUE(at::equal(t.augment(x, 3), y));
}

TEST(TransformTest, RejectsBadOptionsAndInputs) {
  expect_error<std::invalid_argument>(
      [] {
        Transform(TransformOptions().mean({0.1, 0.2}), 3);
      },
      {"mean must have 0, 1 or 3", "got 2"});
  expect_error<std::invalid_argument>(
      [] {
        Transform(TransformOptions().std({1, 1, 1, 1}), 3);
      },
      {"std must have 0, 1 or 3", "got 4"});
  expect_error<std::invalid_argument>([] { Transform(TransformOptions().std({0.0}), 1); }, {"non-zero"});
  expect_error<std::invalid_argument>([] { Transform(TransformOptions().random_crop_padding(-1), 1); },
                                      {"random_crop_padding must be >= 0", "-1"});
  const Transform t(TransformOptions(), 3);
  expect_error<std::invalid_argument>(
      [&] {
        t(at::zeros({2, 1, 4, 4}, at::kByte));
      },
      {"[B, 3, H, W]", "[2, 1, 4, 4]"});
  expect_error<std::invalid_argument>([&] { t(at::zeros({2, 3, 4, 4}, at::kFloat)); }, {"uint8", "Float"});
}

TEST(TransformTest, GatherEqualsIndexSelectThenTransform) {
  const at::Tensor all = random_u8({20, 2, 5, 5}, 2);
  const Transform t(
      TransformOptions().mean({0.3, 0.6}).std({0.2}).random_crop_padding(2).horizontal_flip(true), 2);
  const std::vector<int64_t> rows{19, 0, 7, 7, 3};
  const at::Tensor picked = all.index_select(0, at::tensor(rows, at::kLong));
  EXPECT_TRUE(at::equal(t.gather(all, rows), t(picked)));
  const uint64_t seed = 99;
  EXPECT_TRUE(at::equal(t.gather(all, rows, &seed), t.augment(picked, seed)));
  EXPECT_EQ(t.gather(all, {}).size(0), 0);
}

// Every augmented sample must be one of the (2p+1)^2 crops of the zero-padded input, flipped or not.
TEST(TransformTest, CropAndFlipAreTorchvisionsCropOfThePaddedImage) {
  const int64_t pad = 3;
  const at::Tensor x = random_u8({64, 3, 6, 7}, 4);
  const Transform plain(TransformOptions(), 3);
  const Transform t(TransformOptions().random_crop_padding(pad).horizontal_flip(true), 3);
  const at::Tensor y = t.augment(x, 1234);
  ASSERT_EQ(y.sizes(), x.sizes());
  const at::Tensor padded = plain(at::constant_pad_nd(x, {pad, pad, pad, pad}, 0));
  int flipped = 0, shifted = 0;
  for (int64_t b = 0; b < x.size(0); ++b) {
    bool found = false;
    for (int64_t i = 0; i <= 2 * pad && !found; ++i) {
      for (int64_t j = 0; j <= 2 * pad && !found; ++j) {
        const at::Tensor crop = padded[b].slice(1, i, i + 6).slice(2, j, j + 7);
        for (bool flip : {false, true}) {
          if (at::equal(y[b], flip ? crop.flip({2}) : crop)) {
            found = true;
            flipped += flip;
            shifted += (i != pad || j != pad);
            break;
          }
        }
      }
    }
    EXPECT_TRUE(found) << "sample " << b << " is no crop/flip of its padded input";
  }
  EXPECT_GT(flipped, 10);  // p = 0.5 over 64 samples
  EXPECT_LT(flipped, 54);
  EXPECT_GT(shifted, 40);  // 48 of 49 offsets move the image
  // Deterministic in the seed, different across seeds.
  EXPECT_TRUE(at::equal(t.augment(x, 1234), y));
  EXPECT_FALSE(at::equal(t.augment(x, 1235), y));
  at::Generator g1 = at::detail::createCPUGenerator(7), g2 = at::detail::createCPUGenerator(7);
  EXPECT_TRUE(at::equal(t.augment(x, g1), t.augment(x, g2)));
}

TEST(TransformTest, FlipOnlyMirrorsOrKeepsEachSample) {
  const at::Tensor x = random_u8({40, 1, 4, 5}, 5);
  const Transform t(TransformOptions().horizontal_flip(true), 1);
  const at::Tensor ref = t(x);
  const at::Tensor y = t.augment(x, 8);
  int mirrored = 0;
  for (int64_t b = 0; b < 40; ++b) {
    const bool same = at::equal(y[b], ref[b]);
    const bool mirror = at::equal(y[b], ref[b].flip({2}));
    EXPECT_TRUE(same || mirror) << b;
    mirrored += mirror;
  }
  EXPECT_GT(mirrored, 5);
  EXPECT_LT(mirrored, 35);
}

// A dataset whose label is the row index and whose pixels encode it, so batches reveal their rows.
std::shared_ptr<const TensorDataset> indexed_dataset(int64_t n, int64_t c = 1, int64_t h = 3, int64_t w = 2) {
  at::Tensor images =
      (at::arange(n, at::kLong) % 256).to(at::kByte).reshape({n, 1, 1, 1}).expand({n, c, h, w});
  return std::make_shared<const TensorDataset>(images.contiguous(), at::arange(n, at::kLong), "indexed");
}

std::vector<int64_t> shuffled(int64_t n, uint64_t seed) {
  const at::Tensor p = at::randperm(n, at::detail::createCPUGenerator(seed), at::kLong);
  return std::vector<int64_t>(p.data_ptr<int64_t>(), p.data_ptr<int64_t>() + n);
}

std::vector<Batch> drain(Loader& loader) {
  std::vector<Batch> out;
  while (auto b = loader.next()) out.push_back(std::move(*b));
  EXPECT_FALSE(loader.next().has_value());  // stays finished
  return out;
}

using LoaderCase = std::tuple<int64_t /*workers*/, bool /*drop_last*/, bool /*persistent*/>;
class LoaderOrderTest : public ::testing::TestWithParam<LoaderCase> {};

TEST_P(LoaderOrderTest, BatchesInOrderCoverExactlyTheIndices) {
  const auto [workers, drop_last, persistent] = GetParam();
  auto ds = indexed_dataset(1000);
  for (int64_t batch_size : {1, 7, 64}) {
    Loader loader(
        ds,
        LoaderOptions(batch_size).num_workers(workers).drop_last(drop_last).persistent_workers(persistent));
    for (int64_t count : {0, 1, 6, 7, 8, 333, 1000}) {
      for (int64_t epoch = 0; epoch < 2; ++epoch) {
        std::vector<int64_t> indices = shuffled(1000, static_cast<uint64_t>(count + epoch));
        indices.resize(static_cast<size_t>(count));
        if (count > 3) indices[3] = indices[2];  // repeats are allowed (padded samplers repeat)
        loader.start_epoch(indices, epoch);
        const int64_t expected_batches =
            drop_last ? count / batch_size : (count + batch_size - 1) / batch_size;
        ASSERT_EQ(loader.num_batches(), expected_batches);
        const std::vector<Batch> batches = drain(loader);
        ASSERT_EQ(static_cast<int64_t>(batches.size()), expected_batches);
        std::vector<int64_t> seen;
        for (size_t k = 0; k < batches.size(); ++k) {
          const Batch& b = batches[k];
          const int64_t expected_size =
              k + 1 < batches.size() ? batch_size : count - batch_size * static_cast<int64_t>(k);
          ASSERT_EQ(b.target.size(0), drop_last ? batch_size : expected_size);
          ASSERT_EQ(b.data.sizes(), (std::vector<int64_t>{b.target.size(0), 1, 3, 2}));
          ASSERT_EQ(b.data.scalar_type(), at::kFloat);
          ASSERT_EQ(b.target.scalar_type(), at::kLong);
          for (int64_t i = 0; i < b.target.size(0); ++i) {
            const int64_t row = b.target[i].item<int64_t>();
            seen.push_back(row);
            ASSERT_FLOAT_EQ(b.data[i][0][2][1].item<float>(), static_cast<float>(row % 256) / 255.0f);
          }
        }
        const size_t used = static_cast<size_t>(drop_last ? count / batch_size * batch_size : count);
        ASSERT_EQ(seen,
                  std::vector<int64_t>(indices.begin(), indices.begin() + static_cast<std::ptrdiff_t>(used)))
            << "batch_size " << batch_size << " count " << count;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Workers, LoaderOrderTest,
                         ::testing::Combine(::testing::Values(0, 1, 3), ::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           return "workers" + std::to_string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_droplast" : "_keeplast") +
                                  (std::get<2>(info.param) ? "_persistent" : "_perepoch");
                         });

TEST(LoaderTest, SameBytesWhateverTheWorkerCountWithAugmentation) {
  auto ds = std::make_shared<const SyntheticDataset>(
      SyntheticOptions().size(500).channels(3).height(12).width(10).seed(3), Split::kTrain);
  const auto options = LoaderOptions(32)
                           .transform(TransformOptions()
                                          .mean({0.5, 0.4, 0.3})
                                          .std({0.2})
                                          .random_crop_padding(2)
                                          .horizontal_flip(true))
                           .augment(true)
                           .seed(17);
  std::vector<std::vector<Batch>> runs;
  for (int64_t workers : {0, 1, 3}) {
    Loader loader(ds, LoaderOptions(options).num_workers(workers).prefetch_factor(workers == 3 ? 1 : 2));
    std::vector<Batch> all;
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      loader.start_epoch(shuffled(500, 40), epoch);  // same indices both epochs: only the epoch differs
      for (Batch& b : drain(loader)) all.push_back(std::move(b));
    }
    runs.push_back(std::move(all));
  }
  for (size_t r = 1; r < runs.size(); ++r) {
    ASSERT_EQ(runs[r].size(), runs[0].size());
    for (size_t k = 0; k < runs[0].size(); ++k) {
      ASSERT_TRUE(at::equal(runs[r][k].data, runs[0][k].data)) << "run " << r << " batch " << k;
      ASSERT_TRUE(at::equal(runs[r][k].target, runs[0][k].target));
    }
  }
  // Epoch 1 saw the same rows in the same order, but drew other crops/flips.
  const size_t per_epoch = runs[0].size() / 2;
  EXPECT_TRUE(at::equal(runs[0][0].target, runs[0][per_epoch].target));
  EXPECT_FALSE(at::equal(runs[0][0].data, runs[0][per_epoch].data));
  // Without augment(true) the same options only normalise.
  Loader plain(ds, LoaderOptions(options).augment(false));
  plain.start_epoch({5, 6}, 0);
  const Transform t(options.transform(), 3);
  EXPECT_TRUE(at::equal(plain.next()->data, t(ds->images().slice(0, 5, 7))));
}

// Resuming mid-epoch: start_epoch(indices, epoch, k) gives exactly batches k.. of the full epoch
// (augmentation included), with and without worker threads; k == the batch count is an empty epoch.
TEST(LoaderTest, FirstBatchSkipsToTheSameBatchesAsAFullEpoch) {
  auto ds = std::make_shared<const SyntheticDataset>(
      SyntheticOptions().size(300).channels(3).height(8).width(8).seed(5), Split::kTrain);
  const auto options =
      LoaderOptions(32)
          .transform(TransformOptions().mean({0.5}).std({0.25}).random_crop_padding(2).horizontal_flip(true))
          .augment(true)
          .seed(23);
  for (int64_t workers : {0, 2}) {
    Loader loader(ds, LoaderOptions(options).num_workers(workers));
    loader.start_epoch(shuffled(300, 7), 4);
    const std::vector<Batch> full = drain(loader);
    ASSERT_EQ(full.size(), 10u);
    for (int64_t first : {1, 6, 9}) {
      loader.start_epoch(shuffled(300, 7), 4, first);
      const std::vector<Batch> rest = drain(loader);
      ASSERT_EQ(rest.size(), full.size() - static_cast<size_t>(first)) << "workers " << workers;
      for (size_t k = 0; k < rest.size(); ++k) {
        EXPECT_TRUE(at::equal(rest[k].data, full[k + static_cast<size_t>(first)].data))
            << "workers " << workers << " first " << first << " batch " << k;
        EXPECT_TRUE(at::equal(rest[k].target, full[k + static_cast<size_t>(first)].target));
      }
    }
    loader.start_epoch(shuffled(300, 7), 4, 10);
    EXPECT_FALSE(loader.next().has_value());
    try {
      loader.start_epoch(shuffled(300, 7), 4, 11);
      ADD_FAILURE() << "first batch 11 of 10 was accepted";
    } catch (const std::out_of_range& e) {
      EXPECT_NE(std::string(e.what()).find("first batch 11 is outside [0, 10]"), std::string::npos)
          << e.what();
    }
  }
}

TEST(LoaderTest, WorkerExceptionIsRethrownInOrderAndEndsTheEpoch) {
  for (int64_t workers : {0, 1, 3}) {
    auto ds = indexed_dataset(100);
    Loader loader(ds, LoaderOptions(10).num_workers(workers));
    detail::LoaderTesting::set_build_hook(loader, [](int64_t batch) {
      if (batch == 4) throw std::runtime_error("disk on fire in batch 4");
    });
    loader.start_epoch(shuffled(100, 1), 0);
    for (int64_t k = 0; k < 4; ++k) {
      auto b = loader.next();
      ASSERT_TRUE(b.has_value());
      EXPECT_EQ(b->target.size(0), 10);
    }
    expect_error<std::runtime_error>([&] { loader.next(); }, {"disk on fire in batch 4"});
    EXPECT_FALSE(loader.next().has_value()) << "workers " << workers;
    // The loader is usable again for the next epoch.
    detail::LoaderTesting::set_build_hook(loader, nullptr);
    loader.start_epoch({1, 2, 3}, 1);
    auto b = loader.next();
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(b->target.size(0), 3);
  }
}

// Set by the hook of the test below (globals: the hook must not read its own captures once it may be gone).
std::atomic<bool> g_hook_entered{false};
std::atomic<bool> g_hook_release{false};
std::atomic<bool> g_hook_destroyed{false};
struct DestroyedFlag {
  ~DestroyedFlag() { g_hook_destroyed = true; }
};

// A persistent worker may still be inside the old hook (here: building batch 0) when a test replaces it.
// set_build_hook once destroyed the std::function that worker was running; it must live until the worker
// leaves it. Found by TSan (scripts/sanitize.sh thread) in WorkerExceptionIsRethrownInOrderAndEndsTheEpoch,
// which replaces the hook between epochs while a worker finishes the failed epoch's next batch.
TEST(LoaderTest, ReplacingTheBuildHookKeepsTheOneAWorkerIsRunningAlive) {
  auto ds = indexed_dataset(100);
  Loader loader(ds, LoaderOptions(10).num_workers(1));
  auto flag = std::make_shared<DestroyedFlag>();
  detail::LoaderTesting::set_build_hook(loader, [flag](int64_t batch) {
    if (batch != 0) return;
    g_hook_entered = true;
    while (!g_hook_release) std::this_thread::yield();
  });
  flag.reset();  // the hook's copies hold the only references now
  loader.start_epoch(shuffled(100, 1), 0);
  ASSERT_TRUE(lockstep::testing::wait_until([] { return g_hook_entered.load(); }, std::chrono::seconds(60)));
  detail::LoaderTesting::set_build_hook(loader, nullptr);
  const bool destroyed_while_running = g_hook_destroyed;
  g_hook_release = true;
  EXPECT_FALSE(destroyed_while_running) << "the hook a worker was running was destroyed under it";
  for (int64_t k = 0; k < 10; ++k) ASSERT_TRUE(loader.next().has_value()) << "batch " << k;
  EXPECT_FALSE(loader.next().has_value());
  EXPECT_TRUE(g_hook_destroyed) << "the replaced hook outlived the batch that ran it";
}

TEST(LoaderTest, RestartMidEpochCancelsTheOldEpochCleanly) {
  for (bool persistent : {true, false}) {
    auto ds = indexed_dataset(400);
    Loader loader(ds, LoaderOptions(8).num_workers(3).prefetch_factor(2).persistent_workers(persistent));
    detail::LoaderTesting::set_build_hook(
        loader, [](int64_t) { std::this_thread::sleep_for(std::chrono::microseconds(300)); });
    loader.start_epoch(shuffled(400, 1), 0);
    ASSERT_TRUE(loader.next().has_value());
    ASSERT_TRUE(loader.next().has_value());
    std::vector<int64_t> fresh(50);
    for (int64_t i = 0; i < 50; ++i) fresh[static_cast<size_t>(i)] = 399 - i;
    loader.start_epoch(fresh, 1);  // old batches in flight must not leak into this epoch
    std::vector<int64_t> seen;
    for (const Batch& b : drain(loader)) {
      for (int64_t i = 0; i < b.target.size(0); ++i) seen.push_back(b.target[i].item<int64_t>());
    }
    EXPECT_EQ(seen, fresh);
  }
}

TEST(LoaderTest, PrefetchIsBoundedAndDestructorDoesNotHangOnAFullQueue) {
  auto ds = indexed_dataset(10000);
  std::atomic<int64_t> built{0};
  {
    Loader loader(ds, LoaderOptions(4).num_workers(3).prefetch_factor(2));
    detail::LoaderTesting::set_build_hook(loader, [&](int64_t) { ++built; });
    loader.start_epoch(shuffled(10000, 2), 0);
    ASSERT_TRUE(loader.next().has_value());
    ASSERT_TRUE(loader.next().has_value());
    // The workers fill the queue: consumed + num_workers * prefetch_factor batches (waited for, bounded
    // only against a hang), and then stop. A further batch would show within the grace that follows; a
    // slow machine can only make that check pass when it should not, never fail when it should pass.
    const int64_t bound = 2 + 3 * 2;
    lockstep::testing::wait_until([&] { return built.load() >= bound; }, std::chrono::seconds(30));
    ASSERT_EQ(built.load(), bound) << "the workers did not fill the queue";
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(built.load(), bound) << "a worker built past the prefetch bound";
  }  // destroyed with workers waiting on the full queue (a hang here is caught by the ctest timeout)
  // Also destroyed mid-epoch right after starting, and without ever starting an epoch.
  {
    Loader loader(ds, LoaderOptions(4).num_workers(2).persistent_workers(false));
    loader.start_epoch(shuffled(10000, 3), 0);
  }
  { Loader loader(ds, LoaderOptions(4).num_workers(2)); }
}

TEST(LoaderTest, ValidatesOptionsAndIndices) {
  auto ds = indexed_dataset(10);
  expect_error<std::invalid_argument>([&] { Loader(ds, LoaderOptions(0)); },
                                      {"batch_size must be >= 1, got 0"});
  expect_error<std::invalid_argument>([&] { Loader(ds, LoaderOptions(1).num_workers(-1)); },
                                      {"num_workers must be >= 0", "got -1"});
  expect_error<std::invalid_argument>([&] { Loader(ds, LoaderOptions(1).prefetch_factor(0)); },
                                      {"prefetch_factor must be >= 1, got 0"});
  expect_error<std::invalid_argument>([&] { Loader(nullptr, LoaderOptions(1)); },
                                      {"dataset must not be null"});
  expect_error<std::invalid_argument>(
      [&] {
        Loader(ds, LoaderOptions(1).transform(TransformOptions().mean({1, 2})));
      },
      {"mean must have 0, 1 or 1"});
  Loader loader(ds, LoaderOptions(2).num_workers(1));
  EXPECT_EQ(loader.num_batches(), 0);
  expect_error<std::logic_error>([&] { loader.next(); }, {"start_epoch"});
  expect_error<std::out_of_range>(
      [&] {
        loader.start_epoch({0, 3, 10, 1}, 0);
      },
      {"index 10 at position 2", "[0, 10)", "size 10"});
  expect_error<std::out_of_range>([&] { loader.start_epoch({-1}, 0); }, {"index -1"});
  EXPECT_EQ(loader.options().batch_size(), 2);
}

// Every full batch of ten epochs is built (how fast: bench/data_bench.cpp, docs/benchmarks.md).
TEST(LoaderTest, BuildsEverySeedMlpBatchOfTenEpochs) {
  auto ds = std::make_shared<const SyntheticDataset>(SyntheticOptions().size(4096), Split::kTrain);
  Loader loader(ds, LoaderOptions(64).transform(TransformOptions().mean({0.2860}).std({0.3530})));
  const std::vector<int64_t> indices = shuffled(4096, 9);
  int64_t batches = 0;
  for (int epoch = 0; epoch < 10; ++epoch) {
    loader.start_epoch(indices, epoch);
    while (auto b = loader.next()) batches += b->target.size(0) == 64;
  }
  EXPECT_EQ(batches, 640);
}

}  // namespace
}  // namespace lockstep::data
