// The Trainer on data that is not images (issue: any data): a tabular regression whose batches are tuples
// of float tensors, from a map-style dataset and from a stream (IterableDataset) of known or unknown
// length, with real ranks (threads over an in-memory store). N ranks x B/N must train the same parameters
// as 1 x B; a run stopped mid-epoch and resumed must end bit-identical to the uninterrupted one.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "../comm/thread_group.h"
#include "lockstep/train/trainer.h"

namespace lockstep::train::any_data {
namespace {

using lockstep::testing::expect_all_ok;
using lockstep::testing::run_ranks;
using Rows = std::tuple<at::Tensor, at::Tensor>;

// 48 rows: features [3], target = features . (1, -2, 0.5) + 0.3 + noise. Made once (thread ranks share
// the default generator, so drawing it per rank would race).
struct Table {
  at::Tensor x, y;
  static Table make() {
    static const Table table = [] {
      const auto generator = at::detail::createCPUGenerator(3);
      Table t;
      t.x = at::randn({48, 3}, generator);
      t.y = t.x.matmul(torch::tensor({1.0f, -2.0f, 0.5f})) + 0.3 + 0.05 * at::randn({48}, generator);
      return t;
    }();
    return table;
  }
};

class Regressor : public BasicTrainModule<Rows> {
 public:
  Regressor() : fc(register_module("fc", torch::nn::Linear(3, 1))) {
    torch::NoGradGuard no_grad;
    fc->weight.copy_(torch::tensor({{0.1f, 0.2f, -0.1f}}));
    fc->bias.zero_();
  }
  at::Tensor training_step(const Rows& batch, int64_t) override {
    at::Tensor loss = torch::nn::functional::mse_loss(fc(std::get<0>(batch)).squeeze(1), std::get<1>(batch));
    log("train_loss", loss, LogOptions().sync_dist(true));
    return loss;
  }
  void validation_step(const Rows& batch, int64_t) override {
    log("val_loss", torch::nn::functional::mse_loss(fc(std::get<0>(batch)).squeeze(1), std::get<1>(batch)),
        LogOptions().sync_dist(true));
  }
  OptimizerConfig configure_optimizers() override {
    return {std::make_unique<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.05)), std::nullopt};
  }
  torch::nn::Linear fc;
};

// The table's rows in order, one sample at a time.
class RowStream : public data::IterableDataset<Rows> {
 public:
  RowStream(Table table, bool known) : table_(std::move(table)), known_(known) {}
  std::unique_ptr<data::SampleStream<Rows>> open(int64_t) const override {
    struct Stream : data::SampleStream<Rows> {
      explicit Stream(const Table& t) : t(t) {}
      std::optional<Rows> next() override {
        if (i >= t.x.size(0)) return std::nullopt;
        const int64_t row = i++;
        return Rows{t.x[row], t.y[row]};
      }
      const Table& t;
      int64_t i = 0;
    };
    return std::make_unique<Stream>(table_);
  }
  std::optional<int64_t> size() const override {
    return known_ ? std::optional<int64_t>(table_.x.size(0)) : std::nullopt;
  }

 private:
  Table table_;
  bool known_;
};

enum class Kind { kMap, kStreamKnown, kStreamUnknown };

class RowsData : public BasicDataModule<Rows> {
 public:
  RowsData(Kind kind, int64_t batch) : kind_(kind), batch_(batch), table_(Table::make()) {}
  data::DataSource<Rows> train_data() override { return source(); }
  std::optional<data::DataSource<Rows>> val_data() override { return source().shuffle(false); }

 private:
  data::DataSource<Rows> source() const {
    const auto options = data::LoaderOptions(batch_).num_workers(1);
    if (kind_ == Kind::kMap) {
      const Table t = table_;
      return {data::make_dataset(t.x.size(0), [t](int64_t i) { return Rows{t.x[i], t.y[i]}; }), options};
    }
    return {std::make_shared<RowStream>(table_, kind_ == Kind::kStreamKnown), options};
  }
  Kind kind_;
  int64_t batch_;
  Table table_;
};

struct Quiet {
  std::FILE* file = std::fopen("/dev/null", "w");
  ~Quiet() { std::fclose(file); }
};

// Trains a Regressor on `world` thread ranks; returns rank 0's parameters (and its result).
std::vector<at::Tensor> train_rows(Kind kind, int world, int64_t batch, TrainerOptions base,
                                   TrainerResult* result = nullptr) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  Quiet quiet;
  std::vector<at::Tensor> params;
  auto outcomes = run_ranks(world, [&](int rank) {
    auto group =
        comm::init_process_group(lockstep::testing::thread_group_options(rank, world, store, "any-data"));
    const env::Environment environment = lockstep::testing::thread_environment(rank, world);
    auto module = std::make_shared<Regressor>();
    RowsData data(kind, batch);
    TrainerOptions options = base;
    Trainer trainer(
        options.process_group(&group).environment(environment).out(quiet.file).save_final_weights(false));
    const TrainerResult r = trainer.fit(module, data);
    if (rank == 0) {
      for (const auto& p : module->parameters()) params.push_back(p.detach().clone());
      if (result) *result = r;
    }
    group.shutdown();
  });
  expect_all_ok(outcomes);
  return params;
}

void expect_close(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  for (std::size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-5, 1e-6)) << "parameter " << i << "\n" << a[i] << "\n" << b[i];
}

class AnyData : public ::testing::TestWithParam<Kind> {};

// N ranks x 12/N see, step by step, the samples of 1 rank x 12 (the map-style shuffle is global; a stream's
// ranks read consecutive positions), so the parameters match; 1 x 6 must differ (the check can fail).
TEST_P(AnyData, RanksMatchOneProcessOnTheGlobalBatch) {
  const auto opts = TrainerOptions().max_epochs(2).seed(9);
  TrainerResult result;
  const auto one = train_rows(GetParam(), 1, 12, opts, &result);
  ASSERT_EQ(result.epochs.size(), 2u);
  EXPECT_EQ(result.global_step, 8);
  EXPECT_EQ(result.epochs[1].train_samples, 48);
  EXPECT_EQ(result.epochs[1].val_samples, 48);
  for (int world : {2, 3, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    expect_close(train_rows(GetParam(), world, 12 / world, opts, &result), one);
    EXPECT_EQ(result.global_step, 8);
    EXPECT_EQ(result.epochs[1].val_samples, 48) << "validation counts every sample once";
  }
  const auto small = train_rows(GetParam(), 1, 6, opts);
  EXPECT_FALSE(torch::allclose(small[0], one[0], 1e-5, 1e-6)) << "a smaller global batch trained the same";
}

// Stopped mid-epoch (max_steps 6 of 2 epochs x 4 batches: epoch 2, batch 2) and resumed from last.ckpt,
// the run ends with the uninterrupted run's parameters, bit for bit.
TEST_P(AnyData, MidEpochResumeIsBitIdentical) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("lockstep-any-data-" + std::to_string(static_cast<int>(GetParam())) + "-" +
                    std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const auto opts = TrainerOptions().max_epochs(2).seed(9);
  const auto straight = train_rows(GetParam(), 2, 6, opts);
  TrainerResult stopped;
  train_rows(GetParam(), 2, 6, TrainerOptions(opts).max_steps(6).ckpt_dir(dir.string()), &stopped);
  EXPECT_EQ(stopped.global_step, 6);
  const auto resumed = train_rows(
      GetParam(), 2, 6, TrainerOptions(opts).ckpt_dir(dir.string()).resume((dir / "last.ckpt").string()));
  ASSERT_EQ(resumed.size(), straight.size());
  for (std::size_t i = 0; i < straight.size(); ++i)
    EXPECT_TRUE(torch::equal(resumed[i], straight[i])) << i << ": " << resumed[i] << " vs " << straight[i];
  std::filesystem::remove_all(dir);
}

// Stopped mid-epoch by 2 ranks and resumed by 1 (and by 3): the rest of the epoch is re-sharded (the
// sampler's rest of a map-style epoch; a stream's next positions), so the epoch's samples add up to the
// whole set again, and the run finishes.
TEST_P(AnyData, MidEpochResumeOnAnotherWorldSizeCoversTheEpoch) {
  for (int world : {1, 3}) {
    const auto dir = std::filesystem::temp_directory_path() /
                     ("lockstep-any-data-reshard-" + std::to_string(static_cast<int>(GetParam())) + "-" +
                      std::to_string(world) + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    const auto opts = TrainerOptions().max_epochs(2).seed(9);
    train_rows(GetParam(), 2, 6, TrainerOptions(opts).max_steps(6).ckpt_dir(dir.string()));
    TrainerResult resumed;
    train_rows(GetParam(), world, 6,
               TrainerOptions(opts).ckpt_dir(dir.string()).resume((dir / "last.ckpt").string()), &resumed);
    ASSERT_EQ(resumed.epochs.size(), 1u) << "world " << world;
    EXPECT_EQ(resumed.epochs[0].epoch, 1);
    // 24 samples trained by the 2 old ranks before the stop, the other 24 by the new ones (3 ranks: 8
    // each, a full batch and a short one).
    EXPECT_EQ(resumed.epochs[0].train_samples, 48) << "world " << world;
    std::filesystem::remove_all(dir);
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, AnyData,
                         ::testing::Values(Kind::kMap, Kind::kStreamKnown, Kind::kStreamUnknown),
                         [](const ::testing::TestParamInfo<Kind>& info) {
                           return info.param == Kind::kMap           ? std::string("map")
                                  : info.param == Kind::kStreamKnown ? std::string("stream_known_length")
                                                                     : std::string("stream_unknown_length");
                         });

// A fraction of an epoch of unknown length cannot be planned: the error says so and what to give.
TEST(AnyDataOptions, FractionLimitOnAStreamOfUnknownLengthIsAClearError) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  Quiet quiet;
  auto outcomes = run_ranks(1, [&](int rank) {
    auto group =
        comm::init_process_group(lockstep::testing::thread_group_options(rank, 1, store, "any-data-limit"));
    auto module = std::make_shared<Regressor>();
    RowsData data(Kind::kStreamUnknown, 4);
    Trainer trainer(TrainerOptions()
                        .process_group(&group)
                        .out(quiet.file)
                        .save_final_weights(false)
                        .limit_train_batches(BatchLimit::parse("limit_train_batches", "0.5")));
    try {
      trainer.fit(module, data);
      ADD_FAILURE() << "a fraction of an unknown length was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("limit_train_batches=0.5"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("give a count"), std::string::npos) << e.what();
    }
    group.shutdown();
  });
  expect_all_ok(outcomes);
}

}  // namespace
}  // namespace lockstep::train::any_data
