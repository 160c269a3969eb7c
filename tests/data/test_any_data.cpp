// The data interface that is not about images: batch types, datasets from functions, shard plans,
// streams (IterableDataset) and torch::data interop.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/data/dataloader.h>
#include <torch/data/datasets/base.h>
#include <torch/data/transforms/stack.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "data_test_util.h"
#include "lockstep/data/batch.h"
#include "lockstep/data/device_dataset.h"
#include "lockstep/data/distributed_sampler.h"
#include "lockstep/data/shard_loader.h"
#include "lockstep/data/synthetic_dataset.h"
#include "lockstep/data/torch_data.h"

namespace lockstep::data {
namespace {

using testing::expect_error;
using Pair = std::tuple<at::Tensor, at::Tensor>;

// Sample i of a row dataset: features [3] = (i, 2i, 3i) as float, target = i as int64.
Pair row(int64_t i) {
  return {at::arange(1, 4, at::kFloat) * static_cast<double>(i), at::scalar_tensor(i, at::kLong)};
}

std::vector<int64_t> targets_of(const Pair& batch) {
  const at::Tensor t = std::get<1>(batch).contiguous();
  return {t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel()};
}

TEST(BatchTraits, CountSamplesAndMoveEveryKnownType) {
  EXPECT_EQ(batch_size(at::zeros({5, 2})), 5);
  EXPECT_EQ(batch_size(std::vector<at::Tensor>{at::zeros({4}), at::zeros({9})}), 4);
  EXPECT_EQ(batch_size(Pair{at::zeros({3, 7}), at::zeros({3})}), 3);
  EXPECT_EQ(batch_size(torch::data::Example<>(at::zeros({6, 1}), at::zeros({6}))), 6);
  EXPECT_EQ(batch_size(Batch{at::zeros({2, 1, 2, 2}), at::zeros({2}, at::kLong)}), 2);
  const Pair moved = batch_to(Pair{at::ones({2}), at::zeros({2})}, c10::Device(c10::kCPU));
  EXPECT_TRUE(at::equal(std::get<0>(moved), at::ones({2})));
  expect_error<std::invalid_argument>([] { batch_size(at::scalar_tensor(3)); }, {"batch dimension", "0-d"});
  expect_error<std::invalid_argument>([] { batch_size(std::vector<at::Tensor>{}); }, {"empty"});
}

TEST(Collate, StacksTensorsExamplesAndTuples) {
  const at::Tensor stacked = collate(std::vector<at::Tensor>{at::zeros({3}), at::ones({3})});
  EXPECT_EQ(stacked.sizes(), (std::vector<int64_t>{2, 3}));
  const Pair pair = collate(std::vector<Pair>{row(1), row(2)});
  EXPECT_TRUE(at::equal(std::get<0>(pair), at::stack({std::get<0>(row(1)), std::get<0>(row(2))})));
  EXPECT_EQ(targets_of(pair), (std::vector<int64_t>{1, 2}));
  const auto example = collate(std::vector<torch::data::Example<>>{{at::zeros({2}), at::scalar_tensor(1)},
                                                                   {at::ones({2}), at::scalar_tensor(0)}});
  EXPECT_EQ(example.data.sizes(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(example.target.sizes(), (std::vector<int64_t>{2}));
  expect_error<std::invalid_argument>([] { collate(std::vector<at::Tensor>{}); }, {"no samples"});
}

// Pinning is optional in a batch type's traits: the built-in ones have it, a user type without it is copied
// from pageable memory (batch_pin returns it as it is).
struct NoPin {
  at::Tensor x;
};
}  // namespace
template <>
struct BatchTraits<NoPin> {
  static int64_t size(const NoPin& b) { return b.x.size(0); }
  static NoPin to(const NoPin& b, const c10::Device& d) { return {b.x.to(d)}; }
};
namespace {

TEST(BatchTraits, PinningIsOptional) {
  static_assert(can_pin<Batch>::value && can_pin<at::Tensor>::value && can_pin<Pair>::value &&
                can_pin<std::vector<at::Tensor>>::value &&
                can_pin<std::pair<at::Tensor, at::Tensor>>::value && can_pin<torch::data::Example<>>::value);
  static_assert(!can_pin<NoPin>::value);
  const NoPin same = batch_pin(NoPin{at::ones({2})});
  EXPECT_TRUE(at::equal(same.x, at::ones({2})));
}

// A CUDA graph step's static input (cuda_graphs): batch_copy_into copies a batch into another's tensors
// when every shape and dtype matches, and copies nothing when one differs (an epoch's shorter last batch)
// or the type lists no tensors.
TEST(BatchTraits, CopyIntoTheStaticBatchOnlyWhenShapesMatch) {
  const Batch into{at::zeros({2, 1, 2, 2}), at::zeros({2}, at::kLong)};
  const Batch from{at::ones({2, 1, 2, 2}), at::full({2}, 7, at::kLong)};
  EXPECT_TRUE(batch_copy_into(into, from));
  EXPECT_TRUE(at::equal(into.data, from.data));
  EXPECT_TRUE(at::equal(into.target, from.target));
  const Batch shorter{at::full({1, 1, 2, 2}, 3.0f), at::full({1}, 3, at::kLong)};
  EXPECT_FALSE(batch_copy_into(into, shorter));
  EXPECT_TRUE(at::equal(into.data, from.data)) << "a refused copy changed the static batch";
  const Batch other_dtype{at::ones({2, 1, 2, 2}, at::kDouble), at::zeros({2}, at::kLong)};
  EXPECT_FALSE(batch_copy_into(into, other_dtype));
  const auto tuple_into = std::make_tuple(at::zeros({3}), at::zeros({3, 2}));
  EXPECT_TRUE(batch_copy_into(tuple_into, std::make_tuple(at::ones({3}), at::ones({3, 2}))));
  EXPECT_TRUE(at::equal(std::get<1>(tuple_into), at::ones({3, 2})));
  const torch::data::Example<> example_into{at::zeros({2, 3}), at::zeros({2})};
  EXPECT_TRUE(batch_copy_into(example_into, torch::data::Example<>{at::ones({2, 3}), at::ones({2})}));
  EXPECT_TRUE(at::equal(example_into.target, at::ones({2})));
  // A batch of views into a dataset's memory: once it owns its memory, copies into it leave the dataset be.
  const at::Tensor rows = at::arange(8, at::kFloat).reshape({4, 2});
  const std::vector<at::Tensor> views{rows.narrow(0, 1, 2)};
  batch_own_memory(views);
  EXPECT_TRUE(batch_copy_into(views, std::vector<at::Tensor>{at::full({2, 2}, -1.0f)}));
  EXPECT_TRUE(at::equal(rows, at::arange(8, at::kFloat).reshape({4, 2}))) << "the copy reached the dataset";
  EXPECT_TRUE(at::equal(views[0], at::full({2, 2}, -1.0f)));
  static_assert(can_list_tensors<Batch>::value && can_list_tensors<std::vector<at::Tensor>>::value &&
                !can_list_tensors<NoPin>::value);
  const NoPin none{at::zeros({2})};
  EXPECT_FALSE(batch_copy_into(none, NoPin{at::ones({2})}));
  EXPECT_TRUE(at::equal(none.x, at::zeros({2})));
}

// DeviceImageDataset on the CPU (the logic is the device's): a batch holds exactly the bytes ImageDataset
// builds for the same indices, and augmentation is refused.
TEST(DeviceImageDataset, BatchesHoldTheLoadersBytes) {
  const auto images = std::make_shared<SyntheticDataset>(
      SyntheticOptions().size(40).channels(3).height(6).width(5).seed(2), Split::kTrain);
  const auto normalise = TransformOptions().mean({0.5, 0.4, 0.3}).std({0.2, 0.25, 0.3});
  const ImageDataset host(images, normalise, /*augment=*/false);
  const DeviceImageDataset kept(images, normalise, c10::Device(c10::kCPU));
  EXPECT_EQ(kept.size(), 40);
  EXPECT_NE(kept.description().find("(on cpu)"), std::string::npos) << kept.description();
  for (const std::vector<int64_t>& rows :
       std::vector<std::vector<int64_t>>{{0}, {39, 3, 3, 17}, {5, 6, 7, 8, 9, 10}}) {
    const Batch a = host.get_batch(rows, BatchKey{});
    const Batch b = kept.get_batch(rows, BatchKey{});
    EXPECT_TRUE(at::equal(a.data, b.data));
    EXPECT_TRUE(at::equal(a.target, b.target));
  }
  expect_error<std::invalid_argument>(
      [&] {
        DeviceImageDataset(images, TransformOptions(normalise).horizontal_flip(true), c10::Device(c10::kCPU));
      },
      {"asks for augmentation", "horizontal_flip on", "turn augmentation off"});
  expect_error<std::invalid_argument>([] { DeviceImageDataset(nullptr, {}, c10::Device(c10::kCPU)); },
                                      {"null or empty"});
}

// A dataset from a sample function, batched in order by BasicLoader, with and without workers; the
// user's collate function makes a type of its own.
TEST(MakeDataset, BatchesTheSamplesOfAnyIndexList) {
  auto rows = make_dataset(10, row, "rows");
  EXPECT_EQ(rows->size(), 10);
  EXPECT_EQ(rows->description(), "rows");
  for (int64_t workers : {0, 2}) {
    BasicLoader<Pair> loader(rows, LoaderOptions(4).num_workers(workers));
    loader.start_epoch({9, 0, 3, 3, 7, 1}, 0);
    EXPECT_EQ(targets_of(*loader.next()), (std::vector<int64_t>{9, 0, 3, 3}));
    const Pair last = *loader.next();
    EXPECT_EQ(targets_of(last), (std::vector<int64_t>{7, 1}));
    EXPECT_TRUE(at::equal(std::get<0>(last)[0], std::get<0>(row(7))));
    EXPECT_FALSE(loader.next().has_value());
  }
  struct Sum {
    int64_t total;
  };
  auto sums = make_dataset(
      5, [](int64_t i) { return i; },
      [](std::vector<int64_t>&& values) {
        Sum sum{0};
        for (int64_t v : values) sum.total += v;
        return sum;
      });
  BasicLoader<Sum> loader(sums, LoaderOptions(2));
  loader.start_epoch({1, 2, 4}, 0);
  EXPECT_EQ(loader.next()->total, 3);
  EXPECT_EQ(loader.next()->total, 4);
  expect_error<std::out_of_range>([&] { loader.start_epoch({5}, 0); }, {"index 5", "size 5"});
}

// The batch key: a dataset's randomness depends on (seed, epoch, batch) only, whatever the workers.
TEST(MakeDataset, BatchKeysDoNotDependOnWorkers) {
  struct Keys : Dataset<at::Tensor> {
    int64_t size() const override { return 64; }
    at::Tensor get_batch(c10::ArrayRef<int64_t> rows, const BatchKey& key) const override {
      return at::tensor(
          {key.epoch, key.index, static_cast<int64_t>(key.seed >> 1), static_cast<int64_t>(rows.size())});
    }
  };
  std::vector<std::vector<int64_t>> seen[2];
  for (int64_t workers : {0, 3}) {
    BasicLoader<at::Tensor> loader(std::make_shared<Keys>(), LoaderOptions(8).num_workers(workers).seed(5));
    std::vector<int64_t> indices(64);
    for (int64_t i = 0; i < 64; ++i) indices[i] = i;
    loader.start_epoch(indices, 2);
    while (auto key = loader.next())
      seen[workers > 0].emplace_back(key->data_ptr<int64_t>(), key->data_ptr<int64_t>() + 4);
  }
  ASSERT_EQ(seen[0].size(), 8u);
  EXPECT_EQ(seen[0], seen[1]);
  std::set<int64_t> seeds;
  for (const auto& key : seen[0]) {
    EXPECT_EQ(key[0], 2);
    seeds.insert(key[2]);
  }
  EXPECT_EQ(seeds.size(), 8u) << "every batch gets its own seed";
}

// Validation plans: every sample exactly once over the ranks, none of the sampler's padding.
TEST(ShardPlan, ValidationCoversTheSetOnce) {
  for (int world : {1, 2, 3, 8}) {
    for (int64_t size : {1, 7, 10, 24}) {
      std::multiset<int64_t> seen;
      for (int rank = 0; rank < world; ++rank) {
        ShardPlan plan;
        plan.world = world;
        plan.rank = rank;
        plan.even = false;
        for (int64_t i : detail::plan_indices(size, LoaderOptions(4), /*shuffle=*/false, plan))
          seen.insert(i);
      }
      ASSERT_EQ(static_cast<int64_t>(seen.size()), size) << "world " << world << ", size " << size;
      for (int64_t i = 0; i < size; ++i) EXPECT_EQ(seen.count(i), 1u) << i;
    }
  }
}

// Re-sharding after 0 batches deals the old world's whole epoch; after some, what the old ranks had not
// reached, to the new ranks without overlap.
TEST(ShardPlan, ReshardDealsWhatTheOldRanksHadNotReached) {
  const int64_t size = 40, batch = 4;
  const int old_world = 2;
  for (int world : {1, 3, 8}) {
    for (int64_t done : {0, 2}) {
      std::multiset<int64_t> dealt;
      std::set<int64_t> counts;
      for (int rank = 0; rank < world; ++rank) {
        ShardPlan plan;
        plan.epoch = 1;
        plan.world = world;
        plan.rank = rank;
        plan.seed = 17;
        plan.before = {EpochPart{old_world, done}};
        const auto rest = detail::plan_indices(size, LoaderOptions(batch), /*shuffle=*/true, plan);
        counts.insert(static_cast<int64_t>(rest.size()));
        dealt.insert(rest.begin(), rest.end());
      }
      EXPECT_EQ(counts.size(), 1u) << "every rank gets as many";
      std::set<int64_t> reached;
      for (int r = 0; r < old_world; ++r) {
        DistributedSampler old(size, DistributedSamplerOptions(old_world, r).shuffle(true).seed(17));
        old.set_epoch(1);
        const auto indices = old.indices();
        reached.insert(indices.begin(), indices.begin() + done * batch);
      }
      for (int64_t i = 0; i < size; ++i) {
        if (reached.count(i)) {
          EXPECT_EQ(dealt.count(i), 0u) << "sample " << i << " trained twice";
        } else {
          EXPECT_GE(dealt.count(i), 1u) << "sample " << i << " lost";
        }
      }
    }
  }
}

// An epoch that went through several world sizes (an elastic job: 2 ranks, then 3, then 1): each part
// deals what the one before left, so that no sample is trained twice and none is lost (padding aside).
TEST(ShardPlan, AnEpochOfSeveralWorldSizesTrainsEverySampleOnce) {
  const int64_t size = 101, batch = 3;
  const auto deal = [&](const std::vector<EpochPart>& before, int world) {
    std::vector<std::vector<int64_t>> ranks;
    for (int rank = 0; rank < world; ++rank) {
      ShardPlan plan;
      plan.epoch = 2;
      plan.world = world;
      plan.rank = rank;
      plan.seed = 5;
      plan.before = before;
      ranks.push_back(detail::plan_indices(size, LoaderOptions(batch), /*shuffle=*/true, plan));
    }
    return ranks;
  };
  // Part 1: 2 ranks train 4 batches each; part 2: 3 ranks train 2 batches each of the rest; then 1 rank.
  std::multiset<int64_t> trained;
  const auto first = deal({}, 2);
  for (const auto& r : first) trained.insert(r.begin(), r.begin() + 4 * batch);
  const auto second = deal({EpochPart{2, 4}}, 3);
  for (const auto& r : second) trained.insert(r.begin(), r.begin() + 2 * batch);
  const auto last = deal({EpochPart{2, 4}, EpochPart{3, 2}}, 1);
  trained.insert(last[0].begin(), last[0].end());
  for (int64_t i = 0; i < size; ++i) EXPECT_GE(trained.count(i), 1u) << "sample " << i << " lost";
  // Only padding repeats samples: at most one per rank of each part (2 + 3 + 1).
  EXPECT_LE(static_cast<int64_t>(trained.size()) - size, 6);
  // The rest after part 2 is what part 2's ranks had not reached of what part 1 left.
  for (int64_t i : last[0])
    EXPECT_EQ(std::count(second[0].begin(), second[0].begin() + 2 * batch, i), 0) << i;
}

// A stream of `size` samples: sample p is the int64 tensor {p}; counts opens and samples read.
class Counting : public IterableDataset<at::Tensor> {
 public:
  Counting(int64_t size, bool known) : size_(size), known_(known) {}
  std::unique_ptr<SampleStream<at::Tensor>> open(int64_t epoch) const override {
    struct Stream : SampleStream<at::Tensor> {
      Stream(int64_t n, int64_t e, std::shared_ptr<std::atomic<int64_t>> read) : n(n), e(e), read(read) {}
      std::optional<at::Tensor> next() override {
        if (p >= n) return std::nullopt;
        ++*read;
        return at::tensor({p++ + 1000 * e}, at::kLong);
      }
      int64_t n, e, p = 0;
      std::shared_ptr<std::atomic<int64_t>> read;
    };
    ++*opened;
    return std::make_unique<Stream>(size_, epoch, reads);
  }
  std::optional<int64_t> size() const override {
    return known_ ? std::optional<int64_t>(size_) : std::nullopt;
  }
  std::string description() const override { return "counting stream"; }
  std::shared_ptr<std::atomic<int64_t>> opened = std::make_shared<std::atomic<int64_t>>(0);
  std::shared_ptr<std::atomic<int64_t>> reads = std::make_shared<std::atomic<int64_t>>(0);

 private:
  int64_t size_;
  bool known_;
};

// Every batch of one rank's epoch, as stream positions, and whether at_last() was right for each.
std::vector<std::vector<int64_t>> read_epoch(ShardLoader<at::Tensor>& loader, const ShardPlan& plan,
                                             bool* last_right = nullptr) {
  std::vector<std::vector<int64_t>> batches;
  loader.start(plan);
  bool right = true;
  while (auto batch = loader.next()) {
    const at::Tensor flat = batch->flatten().contiguous();
    batches.emplace_back(flat.data_ptr<int64_t>(), flat.data_ptr<int64_t>() + flat.numel());
    const bool last = loader.at_last();
    if (last && loader.next().has_value()) right = false;
    if (last) break;
  }
  if (last_right) *last_right = right;
  return batches;
}

ShardPlan plan_for(int world, int rank, bool even, int64_t epoch = 0) {
  ShardPlan plan;
  plan.world = world;
  plan.rank = rank;
  plan.even = even;
  plan.epoch = epoch;
  return plan;
}

// Training over a stream: the R ranks' batch k together are positions [kBR, (k+1)BR) (the samples of one
// rank's batch k with R x B: exact across world sizes), every rank the same batch count, the tail not
// every rank can get dropped; the count is known upfront only for a stream of known size.
TEST(StreamShards, RanksTogetherReadTheStreamInOrderWithEqualBatchCounts) {
  for (bool known : {true, false}) {
    for (int64_t workers : {0, 1, 4}) {
      for (int world : {1, 2, 3, 8}) {
        const int64_t size = 53, batch = 4;
        auto stream = std::make_shared<Counting>(size, known);
        DataSource<at::Tensor> source(stream, LoaderOptions(batch).num_workers(workers));
        EXPECT_TRUE(source.iterable());
        std::vector<std::vector<std::vector<int64_t>>> per_rank;
        for (int rank = 0; rank < world; ++rank) {
          auto loader = source.make_loader();
          bool last_right = false;
          per_rank.push_back(read_epoch(*loader, plan_for(world, rank, true), &last_right));
          EXPECT_TRUE(last_right) << "at_last() wrong; world " << world << " rank " << rank;
          EXPECT_EQ(loader->batches(plan_for(world, rank, true)),
                    known ? static_cast<int64_t>(per_rank.back().size()) : -1);
        }
        const size_t count = per_rank[0].size();
        std::vector<int64_t> together;
        for (size_t k = 0; k < count; ++k) {
          std::vector<int64_t> global;
          for (int rank = 0; rank < world; ++rank) {
            ASSERT_EQ(per_rank[rank].size(), count) << "rank " << rank << " of " << world;
            global.insert(global.end(), per_rank[rank][k].begin(), per_rank[rank][k].end());
          }
          std::sort(global.begin(), global.end());
          together.insert(together.end(), global.begin(), global.end());
        }
        const int64_t kept = size / world * world;
        ASSERT_EQ(static_cast<int64_t>(together.size()), kept) << "world " << world;
        for (int64_t p = 0; p < kept; ++p) EXPECT_EQ(together[p], p);
      }
    }
  }
}

// Validation over a stream keeps every sample once; a limit and a resume position cut it as asked.
TEST(StreamShards, ValidationLimitsAndResumePositions) {
  const int64_t size = 23, batch = 3;
  auto stream = std::make_shared<Counting>(size, false);
  DataSource<at::Tensor> source(stream, LoaderOptions(batch));
  std::multiset<int64_t> seen;
  for (int rank = 0; rank < 3; ++rank) {
    auto loader = source.make_loader();
    for (const auto& b : read_epoch(*loader, plan_for(3, rank, false))) seen.insert(b.begin(), b.end());
  }
  ASSERT_EQ(static_cast<int64_t>(seen.size()), size);
  for (int64_t p = 0; p < size; ++p) EXPECT_EQ(seen.count(p), 1u);

  auto loader = source.make_loader();
  const auto whole = read_epoch(*loader, plan_for(2, 1, true, /*epoch=*/3));
  ShardPlan limited = plan_for(2, 1, true, 3);
  limited.max_batches = 2;
  EXPECT_EQ(read_epoch(*loader, limited),
            std::vector<std::vector<int64_t>>(whole.begin(), whole.begin() + 2));
  ShardPlan resumed = plan_for(2, 1, true, 3);
  resumed.first_batch = 2;
  EXPECT_EQ(read_epoch(*loader, resumed), std::vector<std::vector<int64_t>>(whole.begin() + 2, whole.end()));
  EXPECT_EQ(whole.front().front(), 3001) << "epoch 3's stream, rank 1's first position";
}

// Resuming on another world size: the new ranks go on from where the old ones stopped together.
TEST(StreamShards, ReshardGoesOnFromTheOldWorldsPosition) {
  const int64_t size = 60, batch = 2;
  auto stream = std::make_shared<Counting>(size, true);
  DataSource<at::Tensor> source(stream, LoaderOptions(batch));
  std::vector<int64_t> rest;
  std::set<int64_t> counts;
  for (int rank = 0; rank < 3; ++rank) {
    ShardPlan plan = plan_for(3, rank, true);
    plan.before = {EpochPart{2, 5}};  // 2 ranks x 5 batches x 2 = positions [0, 20) done
    auto loader = source.make_loader();
    const auto batches = read_epoch(*loader, plan);
    counts.insert(static_cast<int64_t>(batches.size()));
    EXPECT_EQ(loader->batches(plan), static_cast<int64_t>(batches.size()));
    for (const auto& b : batches) rest.insert(rest.end(), b.begin(), b.end());
  }
  EXPECT_EQ(counts.size(), 1u);
  std::sort(rest.begin(), rest.end());
  std::vector<int64_t> expected(39);  // 40 left for 3 ranks: 13 each, the last one dropped
  for (int64_t i = 0; i < 39; ++i) expected[i] = 20 + i;
  EXPECT_EQ(rest, expected);
}

// A torch::data dataset of the user's: sample i is Example(data [2] = (i, -i), target i).
class TorchRows : public torch::data::datasets::Dataset<TorchRows> {
 public:
  explicit TorchRows(int64_t n) : n_(n) {}
  torch::data::Example<> get(size_t index) override {
    const auto i = static_cast<double>(index);
    return {at::tensor({i, -i}, at::kFloat), at::scalar_tensor(static_cast<int64_t>(index), at::kLong)};
  }
  torch::optional<size_t> size() const override { return static_cast<size_t>(n_); }

 private:
  int64_t n_;
};

// Any torch::data map-style dataset, with .map() transforms or without (stacked as Stack<> would), is a
// lockstep Dataset; several worker threads each use their own copy.
TEST(TorchData, DatasetsWithAndWithoutStackBecomeLockstepDatasets) {
  auto stacked = from_torch(TorchRows(30).map(torch::data::transforms::Stack<>()));
  auto plain = from_torch(TorchRows(30), "rows");
  EXPECT_EQ(stacked->size(), 30);
  EXPECT_EQ(plain->description(), "rows");
  for (int64_t workers : {0, 3}) {
    BasicLoader<torch::data::Example<>> a(stacked, LoaderOptions(4).num_workers(workers));
    BasicLoader<torch::data::Example<>> b(plain, LoaderOptions(4).num_workers(workers));
    std::vector<int64_t> indices(30);
    for (int64_t i = 0; i < 30; ++i) indices[i] = (i * 7) % 30;
    a.start_epoch(indices, 0);
    b.start_epoch(indices, 0);
    int64_t k = 0;
    while (auto x = a.next()) {
      auto y = b.next();
      ASSERT_TRUE(y.has_value());
      EXPECT_TRUE(at::equal(x->data, y->data));
      EXPECT_TRUE(at::equal(x->target, y->target));
      EXPECT_EQ(x->target[0].item<int64_t>(), indices[k * 4]);
      EXPECT_EQ(x->data[0][1].item<float>(), -static_cast<float>(indices[k * 4]));
      ++k;
    }
    EXPECT_EQ(k, 8);
  }
  struct Unsized : torch::data::datasets::Dataset<Unsized> {
    torch::data::Example<> get(size_t) override { return {}; }
    torch::optional<size_t> size() const override { return torch::nullopt; }
  };
  expect_error<std::invalid_argument>([] { from_torch(Unsized()); }, {"has no size()", "IterableDataset"});
}

// lockstep's DistributedSampler drives torch::data::make_data_loader with PyTorch's indices, epoch by
// epoch, and saves its position.
TEST(TorchData, DistributedSamplerPlugsIntoMakeDataLoader) {
  const int world = 3, rank = 1;
  TorchDistributedSampler sampler(30, DistributedSamplerOptions(world, rank).seed(4));
  for (int64_t epoch : {0, 1}) {
    sampler.set_epoch(epoch);
    DistributedSampler reference(30, DistributedSamplerOptions(world, rank).seed(4));
    reference.set_epoch(epoch);
    auto loader = torch::data::make_data_loader(TorchRows(30).map(torch::data::transforms::Stack<>()),
                                                sampler, torch::data::DataLoaderOptions().batch_size(4));
    std::vector<int64_t> seen;
    for (auto& batch : *loader)
      for (int64_t i = 0; i < batch.target.numel(); ++i) seen.push_back(batch.target[i].item<int64_t>());
    EXPECT_EQ(seen, reference.indices()) << "epoch " << epoch;
  }
  TorchDistributedSampler a(30, DistributedSamplerOptions(world, rank).seed(4));
  a.set_epoch(5);
  a.next(3);
  torch::serialize::OutputArchive out;
  a.save(out);
  std::ostringstream bytes;
  out.save_to(bytes);
  TorchDistributedSampler b(30, DistributedSamplerOptions(world, rank).seed(4));
  torch::serialize::InputArchive in;
  std::istringstream read(bytes.str());
  in.load_from(read);
  b.load(in);
  EXPECT_EQ(b.epoch(), 5);
  EXPECT_EQ(b.position(), 3u);
  EXPECT_EQ(*a.next(4), *b.next(4));
}

}  // namespace
}  // namespace lockstep::data
