// The Trainer with real ranks (threads over an in-memory store): exactness against a plain LibTorch loop on
// the global batch, logged values reduced as asked, control-flow decisions taken together by all ranks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/cuda.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "../comm/thread_group.h"
#include "lockstep/optim/lr_schedule.h"
#include "lockstep/train/trainer.h"

namespace lockstep::train {
namespace {

using lockstep::testing::expect_all_ok;
using lockstep::testing::run_ranks;

std::shared_ptr<data::TensorDataset> toy_data(int64_t n) {
  torch::manual_seed(11);
  auto images = torch::randint(0, 256, {n, 1, 2, 2}, torch::kByte);
  auto labels = torch::randint(0, 3, {n}, torch::kLong);
  return std::make_shared<data::TensorDataset>(images, labels, "toy");
}

class ToyData : public DataModule {
 public:
  ToyData(std::shared_ptr<data::TensorDataset> data, int64_t batch) : data_(std::move(data)), batch_(batch) {}
  void prepare_data() override { ++prepared; }
  void setup() override { ++set_up; }
  std::shared_ptr<const data::TensorDataset> train_dataset() override { return data_; }
  std::shared_ptr<const data::TensorDataset> val_dataset() override { return data_; }
  static inline std::atomic<int> prepared{0};
  static inline std::atomic<int> set_up{0};
  data::LoaderOptions train_loader_options() override {
    return data::LoaderOptions(batch_).transform(data::TransformOptions().mean({0.5}).std({0.25}));
  }

 private:
  std::shared_ptr<data::TensorDataset> data_;
  int64_t batch_;
};

// A linear classifier whose steps can be given extra logging.
class Toy : public TrainModule {
 public:
  // The same initial weights whatever the generator's state (thread ranks share one generator).
  Toy() : fc(register_module("fc", torch::nn::Linear(4, 3))) {
    torch::NoGradGuard no_grad;
    fc->weight.copy_(torch::linspace(-0.5, 0.5, 12).reshape({3, 4}));
    fc->bias.zero_();
  }
  at::Tensor training_step(const data::Batch& batch, int64_t batch_idx) override {
    at::Tensor loss = torch::nn::functional::cross_entropy(fc(batch.data.flatten(1)), batch.target);
    if (add_loss) loss = loss + add_loss(batch, batch_idx);
    log("train_loss", loss, LogOptions().sync_dist(true));
    if (extra) extra(*this);
    return change_loss ? change_loss(loss) : loss;
  }
  void validation_step(const data::Batch& batch, int64_t) override {
    log("val_loss", torch::nn::functional::cross_entropy(fc(batch.data.flatten(1)), batch.target),
        LogOptions().sync_dist(true));
  }
  OptimizerConfig configure_optimizers() override {
    return {std::make_unique<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1)), std::nullopt};
  }
  torch::nn::Linear fc;
  std::function<void(Toy&)> extra;
  std::function<at::Tensor(const at::Tensor&)> change_loss;         ///< what training_step returns instead
  std::function<at::Tensor(const data::Batch&, int64_t)> add_loss;  ///< added to the loss before logging
};

// A callback made of lambdas.
struct Hooks : Callback {
  std::string state_key() const override { return "Hooks"; }
  void on_train_batch_end(TrainerContext& t, const BatchEnd& b) override {
    if (batch_end) batch_end(t, b);
  }
  void on_validation_end(TrainerContext& t) override {
    if (validation_end) validation_end(t);
  }
  std::function<void(TrainerContext&, const BatchEnd&)> batch_end;
  std::function<void(TrainerContext&)> validation_end;
};

struct Quiet {
  std::FILE* file = std::fopen("/dev/null", "w");
  ~Quiet() { std::fclose(file); }
};

TrainerOptions thread_options(comm::ProcessGroup& group, std::FILE* out) {
  env::Environment environment;
  environment.rank = group.rank();
  environment.local_rank = group.rank();
  environment.world_size = group.size();
  environment.local_world_size = group.size();
  return TrainerOptions().process_group(&group).environment(environment).out(out).save_final_weights(false);
}

// Trains a Toy on `world` thread ranks; returns rank 0's parameters and every rank's result.
std::vector<at::Tensor> train_toy(int world, int64_t batch, TrainerOptions base,
                                  std::vector<TrainerResult>* results = nullptr,
                                  const std::function<void(Toy&, int rank)>& customise = {},
                                  std::vector<std::string>* errors = nullptr) {
  auto data = toy_data(48);
  auto store = c10::make_intrusive<c10d::HashStore>();
  Quiet quiet;
  std::vector<at::Tensor> params;
  std::vector<TrainerResult> all(world);
  auto outcomes = run_ranks(world, [&](int rank) {
    auto group =
        comm::init_process_group(lockstep::testing::thread_group_options(rank, world, store, "trainer-test"));
    auto module = std::make_shared<Toy>();
    if (customise) customise(*module, rank);
    ToyData toy(data, batch);
    TrainerOptions options = base;
    Trainer trainer(options.process_group(&group)
                        .environment(thread_options(group, quiet.file).environment())
                        .out(quiet.file)
                        .save_final_weights(false));
    all[rank] = trainer.fit(module, toy);
    if (rank == 0) {
      for (const auto& p : module->parameters()) params.push_back(p.detach().clone());
    }
    group.shutdown();
  });
  if (errors) {
    for (const auto& o : outcomes) errors->push_back(o.ok ? "" : o.error);
  } else {
    expect_all_ok(outcomes);
  }
  if (results) *results = all;
  return params;
}

void expect_close(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::allclose(a[i], b[i], /*rtol=*/1e-5, /*atol=*/1e-6)) << "parameter " << i << "\n"
                                                                           << a[i] << "\n"
                                                                           << b[i];
  }
}

// The reference, written without lockstep (no sampler, loader, transform, DDP or Trainer): a plain LibTorch
// loop over the toy data with Toy's initial weights and optimizer (SGD, lr 0.1), the samples in PyTorch's
// DistributedSampler order for one replica (torch.randperm(n) from a generator seeded seed + epoch: the
// order DESIGN.md checked against Python), `global_batch` samples a step, torchvision's ToTensor +
// Normalize(0.5, 0.25) in float32, the mean cross-entropy. Heads::kWithSpare adds add_spare_head's head
// (below): its loss added in the epoch's even batches only. Returns the parameters in Toy's order.
enum class Heads { kOne, kWithSpare };
std::vector<at::Tensor> plain_loop(int64_t global_batch, int64_t epochs, uint64_t seed,
                                   Heads heads = Heads::kOne, double lr = 0.1) {
  const auto data = toy_data(48);
  torch::nn::Linear fc(4, 3);
  torch::nn::Linear spare(4, 3);
  {
    torch::NoGradGuard no_grad;
    fc->weight.copy_(torch::linspace(-0.5, 0.5, 12).reshape({3, 4}));
    fc->bias.zero_();
    spare->weight.copy_(torch::linspace(0.3, -0.3, 12).reshape({3, 4}));
    spare->bias.zero_();
  }
  std::vector<at::Tensor> params = fc->parameters();
  if (heads == Heads::kWithSpare) {
    for (const auto& p : spare->parameters()) params.push_back(p);
  }
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(lr));
  const int64_t n = data->size();
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    const at::Tensor order =
        torch::randperm(n, at::detail::createCPUGenerator(seed + static_cast<uint64_t>(epoch)), torch::kLong);
    for (int64_t begin = 0; begin + global_batch <= n; begin += global_batch) {
      const at::Tensor index = order.narrow(0, begin, global_batch);
      const at::Tensor x =
          data->images().index_select(0, index).to(torch::kFloat).div(255).sub(0.5).div(0.25).flatten(1);
      const at::Tensor y = data->labels().index_select(0, index);
      at::Tensor loss = torch::nn::functional::cross_entropy(fc(x), y);
      if (heads == Heads::kWithSpare && (begin / global_batch) % 2 == 0)
        loss = loss + torch::nn::functional::cross_entropy(spare(x), y);
      sgd.zero_grad();
      loss.backward();
      sgd.step();
    }
  }
  std::vector<at::Tensor> out;
  for (const auto& p : params) out.push_back(p.detach().clone());
  return out;
}

// 1 rank x 12 trains the plain loop's weights; 2 ranks x 6 see, step by step, the same samples (the
// sampler's shuffle is global), so DDP's averaged gradients give them too; 2 x 3 with accumulate 2 too.
// 1 rank x 6 (a smaller global batch) must differ. Tolerance: float32 rounding (rtol 1e-5, atol 1e-6); the
// loop with lr 0.11 instead of 0.1 fails every comparison.
TEST(Trainer, RanksMatchAPlainLoopOnTheGlobalBatch) {
  const auto opts = TrainerOptions().max_epochs(2).seed(5);
  const auto want = plain_loop(/*global_batch=*/12, /*epochs=*/2, /*seed=*/5);
  expect_close(train_toy(1, 12, opts), want);
  expect_close(train_toy(2, 6, opts), want);
  expect_close(train_toy(2, 3, TrainerOptions(opts).accumulate_grad_batches(2)), want);
  const auto small = train_toy(1, 6, opts);
  EXPECT_FALSE(torch::allclose(small[0], want[0], 1e-5, 1e-6)) << "a smaller global batch trained the same";
  expect_close(small, plain_loop(/*global_batch=*/6, /*epochs=*/2, /*seed=*/5));
}

// A spare head used by every other batch only, as a new user writes one: with the DDP strategy's
// find_unused_parameters the Trainer trains it on 1, 2 and 3 ranks as the plain loop does on the global
// batch (a parameter unused on every rank keeps its gradient, as without DDP); without the option the
// error names the Trainer's option, not DDP's, and carries no C++ stack trace.
void add_spare_head(Toy& toy, int /*rank*/) {
  auto spare = toy.register_module("spare", torch::nn::Linear(4, 3));
  {
    torch::NoGradGuard no_grad;
    spare->weight.copy_(torch::linspace(0.3, -0.3, 12).reshape({3, 4}));
    spare->bias.zero_();
  }
  toy.add_loss = [spare](const data::Batch& batch, int64_t batch_idx) mutable {
    if (batch_idx % 2 == 1) return at::zeros({}, batch.data.options().dtype(at::kFloat));
    return torch::nn::functional::cross_entropy(spare->forward(batch.data.flatten(1)), batch.target);
  };
}

TEST(Trainer, AParameterUnusedInSomeStepsTrainsWithTheDdpStrategysOption) {
  const auto opts =
      TrainerOptions().max_epochs(2).seed(5).strategy(DdpStrategy().find_unused_parameters(true));
  const auto one = train_toy(1, 12, opts, nullptr, add_spare_head);
  ASSERT_EQ(one.size(), 4u);  // fc and spare
  expect_close(one, plain_loop(/*global_batch=*/12, /*epochs=*/2, /*seed=*/5, Heads::kWithSpare));
  EXPECT_FALSE(torch::allclose(one[2], torch::linspace(0.3, -0.3, 12).reshape({3, 4})))
      << "the spare head was not trained";
  expect_close(train_toy(2, 6, opts, nullptr, add_spare_head), one);
  expect_close(train_toy(3, 4, opts, nullptr, add_spare_head), one);
  // Lightning's string gives the same.
  expect_close(
      train_toy(2, 6, TrainerOptions(opts).strategy(parse_strategy("ddp_find_unused_parameters_true")),
                nullptr, add_spare_head),
      one);

  std::vector<std::string> errors;
  train_toy(2, 6, TrainerOptions().max_epochs(1).seed(5), nullptr, add_spare_head, &errors);
  for (const std::string& error : errors) {
    EXPECT_NE(error.find("spare.weight"), std::string::npos) << error;
    EXPECT_NE(error.find("TrainerOptions().strategy(DdpStrategy().find_unused_parameters(true))"),
              std::string::npos)
        << error;
    EXPECT_NE(error.find("--strategy ddp_find_unused_parameters_true"), std::string::npos) << error;
    EXPECT_EQ(error.find("DdpOptions()"), std::string::npos) << error;
    EXPECT_EQ(error.find("Exception raised from"), std::string::npos) << error;
  }
}

// gradient_clip_val: the step's gradients (all-reduced first, so the same on every rank) are scaled to
// that global norm, so one SGD step of lr 0.1 moves the parameters by 0.1 x 1e-3 in norm; unclipped it
// moves them much further (the check can fail).
TEST(Trainer, GradientClippingBoundsTheStep) {
  auto step_norm = [](double clip) {
    const Toy initial;
    const auto after = train_toy(2, 6, TrainerOptions().max_epochs(1).max_steps(1).gradient_clip_val(clip));
    double squares = 0;
    const auto before = initial.parameters();
    for (std::size_t i = 0; i < after.size(); ++i)
      squares += (after[i] - before[i]).pow(2).sum().item<double>();
    return std::sqrt(squares);
  };
  EXPECT_NEAR(step_norm(1e-3), 1e-4, 1e-7);
  EXPECT_GT(step_norm(0.0), 1e-3);
}

// The step breakdown (every batch sampled here): each epoch's metrics hold every rank's phases, the same on
// every rank; rank 1, made slow by the test, is named the slowest by far (its busy time). Rank 1 is slowed
// by a lag of its step clock (detail::step_clock_lag), 1 s in every training_step, not by a sleep: what it
// measures is exactly 1 s more, whatever the load, so naming it compares no sleep with a clock (the others'
// real step, well under a millisecond here, would have to reach a second to hide it). The loggers get the
// epoch records, breakdown included, in one version directory.
TEST(Trainer, TheStepBreakdownNamesTheSlowRankAndTheLoggersRecordIt) {
  const std::filesystem::path root =
      std::filesystem::temp_directory_path() / ("lockstep_breakdown_" + std::to_string(::getpid()));
  std::filesystem::remove_all(root);
  std::vector<TrainerResult> results;
  const auto options = TrainerOptions()
                           .max_epochs(2)
                           .breakdown_every_n_batches(1)
                           .logger("csv,jsonl")
                           .default_root_dir(root.string());
  train_toy(3, 4, options, &results, [](Toy& toy, int rank) {
    if (rank == 1) toy.extra = [](Toy&) { detail::step_clock_lag() += std::chrono::seconds(1); };
  });
  for (int rank = 0; rank < 3; ++rank) {
    ASSERT_EQ(results[rank].epochs.size(), 2u) << "rank " << rank;
    for (const EpochMetrics& epoch : results[rank].epochs) {
      ASSERT_TRUE(epoch.breakdown.has_value()) << "rank " << rank;
      const EpochBreakdown& b = *epoch.breakdown;
      ASSERT_EQ(b.rank_ms.size(), 3u);
      EXPECT_EQ(b.batches, 4);  // 48 samples / 3 ranks / batch 4, every one sampled
      EXPECT_EQ(b.slowest_rank, 1) << epoch.to_json();
      EXPECT_GT(b.slowest_excess_pct, 100.0) << epoch.to_json();
      EXPECT_TRUE(b.has_straggler());
      EXPECT_GE(b.rank_ms[1][static_cast<size_t>(StepPhase::kForward)], 1000.0) << "the lag is in forward";
      EXPECT_EQ(epoch.to_json(), results[0].epochs[&epoch - results[rank].epochs.data()].to_json());
    }
  }
  const std::filesystem::path dir = root / "lightning_logs" / "version_0";
  for (const char* file : {"metrics.csv", "metrics.jsonl", "hparams.yaml"})
    EXPECT_TRUE(std::filesystem::exists(dir / file)) << file;
  std::ifstream csv(dir / "metrics.csv");
  std::string header;
  std::getline(csv, header);
  for (const char* key :
       {"breakdown/rank_2/allreduce_ms", "breakdown/slowest_rank", "train_loss_epoch", "val_loss"})
    EXPECT_NE(header.find(key), std::string::npos) << key << " not in " << header;
  std::filesystem::remove_all(root);
}

// prepare_data once per node (local rank 0), setup on every rank.
TEST(Trainer, PrepareDataOnLocalRankZeroSetupEverywhere) {
  ToyData::prepared = 0;
  ToyData::set_up = 0;
  train_toy(3, 4, TrainerOptions().max_epochs(1));
  EXPECT_EQ(ToyData::prepared.load(), 1);
  EXPECT_EQ(ToyData::set_up.load(), 3);
}

// sync_dist values are the mean over every rank's batches; other values are rank 0's, on every rank.
TEST(Trainer, LoggedValuesReducedAsAskedAndTheSameOnEveryRank) {
  std::vector<TrainerResult> results;
  std::vector<std::map<std::string, double>> seen(2);
  auto hooks = std::make_shared<Hooks>();
  hooks->validation_end = [&](TrainerContext& t) { seen[t.rank()] = t.callback_metrics(); };
  train_toy(2, 6, TrainerOptions().max_epochs(1).callback(hooks), &results, [](Toy& toy, int rank) {
    toy.extra = [rank](Toy& m) {
      m.log("rank_synced", static_cast<double>(rank), LogOptions().sync_dist(true));
      m.log("rank_local", static_cast<double>(rank) + 10.0);
    };
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_DOUBLE_EQ(seen[r].at("rank_synced"), 0.5) << "rank " << r;
    EXPECT_DOUBLE_EQ(seen[r].at("rank_local"), 10.0) << "rank " << r;
    EXPECT_EQ(seen[r], seen[0]);
    EXPECT_EQ(results[r].epochs.at(0).train_samples, 48);
  }
}

// Lightning#19045: one rank deciding to stop must not leave the other in a collective. Here only rank 1
// asks; both stop after the same epoch.
TEST(Trainer, AStopAskedOnOneRankStopsAllTogether) {
  std::vector<TrainerResult> results;
  auto hooks = std::make_shared<Hooks>();
  hooks->validation_end = [](TrainerContext& t) {
    if (t.rank() == 1 && t.current_epoch() == 1) t.request_stop("rank 1 had enough");
  };
  train_toy(2, 6, TrainerOptions().max_epochs(5).callback(hooks), &results);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(results[r].epochs.size(), 2u) << "rank " << r;
    EXPECT_TRUE(results[r].stopped_early) << "rank " << r;
  }
  EXPECT_EQ(results[1].stop_reason, "rank 1 had enough");
  EXPECT_EQ(results[0].stop_reason, "another rank's callback asked to stop");
}

TEST(Trainer, DifferentSyncDistNamesAreAnErrorNotAHang) {
  std::vector<std::string> errors;
  train_toy(
      2, 6, TrainerOptions().max_epochs(1), nullptr,
      [](Toy& toy, int rank) {
        toy.extra = [rank](Toy& m) { m.log(rank == 0 ? "a" : "b", 1.0, LogOptions().sync_dist(true)); };
      },
      &errors);
  for (int r = 0; r < 2; ++r)
    EXPECT_NE(errors[r].find("log the same names with sync_dist"), std::string::npos) << errors[r];
}

// An infinite loss (not only a NaN: e2e_fit_nan injects those into `lockstep fit`) stops the run at its
// first step, naming the value, the step, the rank and the fixes.
TEST(Trainer, AnInfiniteLossStopsNamingTheStepAndTheFix) {
  std::vector<std::string> errors;
  train_toy(
      1, 6, TrainerOptions().max_epochs(1), nullptr,
      [](Toy& toy, int) {
        toy.change_loss = [](const at::Tensor& loss) {
          return loss * std::numeric_limits<double>::infinity();
        };
      },
      &errors);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("non-finite training loss inf at step 1 (epoch 0, batch 0) on rank 0"),
            std::string::npos)
      << errors[0];
  EXPECT_NE(errors[0].find("lower the learning rate"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("(on_nan skip)"), std::string::npos) << errors[0];
}

// The Trainer trains 16-mixed on CUDA only: accelerator auto without a GPU is refused as accelerator cpu is,
// also where LibTorch's CPU autocast could lower to float16 (>= 2.5; the Accelerator uses it there). On a
// machine with a GPU, auto trains on it (test_cuda: Cuda.SixteenMixedTrainsWithTheGradScaler).
TEST(Trainer, SixteenMixedWithoutAGpuIsRefused) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "runs where there is no GPU";
  std::vector<std::string> errors;
  train_toy(1, 6, TrainerOptions().max_epochs(1).precision(Precision::k16Mixed), nullptr, {}, &errors);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(
      errors[0].find("precision '16-mixed' needs a CUDA device (float16 autocast with a gradient scaler), "
                     "and this run trains on the CPU (accelerator 'auto', and LibTorch sees no GPU)"),
      std::string::npos)
      << errors[0];
}

TEST(Trainer, CheckpointsOfDifferentPathsOnRanksAreAnError) {
  const auto dir = std::filesystem::temp_directory_path() / ("trainer-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto hooks = std::make_shared<Hooks>();
  hooks->validation_end = [&](TrainerContext& t) {
    t.save_checkpoint((dir / (std::to_string(t.rank()) + ".ckpt")).string());
  };
  std::vector<std::string> errors;
  train_toy(2, 6, TrainerOptions().max_epochs(1).callback(hooks), nullptr, {}, &errors);
  for (int r = 0; r < 2; ++r)
    EXPECT_NE(errors[r].find("callbacks must decide from callback_metrics"), std::string::npos) << errors[r];
  EXPECT_FALSE(std::filesystem::exists(dir / "0.ckpt"));
  std::filesystem::remove_all(dir);
}

TEST(Trainer, ACheckpointInsideAnAccumulationGroupIsRefused) {
  const auto dir = std::filesystem::temp_directory_path() / ("trainer-acc-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto hooks = std::make_shared<Hooks>();
  hooks->batch_end = [&](TrainerContext& t, const BatchEnd& b) {
    if (!b.stepped) t.save_checkpoint((dir / "x.ckpt").string());
  };
  std::vector<std::string> errors;
  train_toy(1, 6, TrainerOptions().max_epochs(1).accumulate_grad_batches(2).callback(hooks), nullptr, {},
            &errors);
  EXPECT_NE(errors[0].find("in the middle of an accumulation group"), std::string::npos) << errors[0];
  std::filesystem::remove_all(dir);
}

// A Toy with a cosine schedule (every step its own rate) that records global_step() in validation_step.
class ScheduledToy : public Toy {
 public:
  OptimizerConfig configure_optimizers() override {
    return {std::make_unique<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1)),
            optim::LrSchedule(0.1, optim::LrShape::kCosine, plan().estimated_stepping_batches)};
  }
  void validation_step(const data::Batch& batch, int64_t i) override {
    validated_at.push_back(global_step());
    Toy::validation_step(batch, i);
  }
  std::vector<int64_t> validated_at;
};

// 1 rank, 48 samples of 6: 8 steps per epoch, 2 epochs; a hook may write a checkpoint after a batch.
TrainerResult train_scheduled(const TrainerOptions& base, ScheduledToy& module,
                              const std::shared_ptr<Hooks>& hooks) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  Quiet quiet;
  TrainerResult result;
  auto outcomes = run_ranks(1, [&](int rank) {
    auto group =
        comm::init_process_group(lockstep::testing::thread_group_options(rank, 1, store, "resume-test"));
    ToyData toy(toy_data(48), 6);
    TrainerOptions options = base;
    if (hooks) options.callback(hooks);
    Trainer trainer(options.process_group(&group)
                        .environment(thread_options(group, quiet.file).environment())
                        .out(quiet.file)
                        .save_final_weights(false)
                        .max_epochs(2));
    result = trainer.fit(std::shared_ptr<ScheduledToy>(&module, [](ScheduledToy*) {}), toy);
    group.shutdown();
  });
  expect_all_ok(outcomes);
  return result;
}

// The module reads where the Trainer is (the Trainer's StepState): defaults before a fit, the epoch and
// step of each batch in training_step, the plan from configure_optimizers on, and the fit's last values
// after it.
TEST(Trainer, TheModuleReadsTheTrainersPositionFromSetUpOnAndKeepsItAfterTheFit) {
  ScheduledToy module;
  EXPECT_EQ(module.current_epoch(), 0);
  EXPECT_EQ(module.global_step(), 0);
  EXPECT_EQ(module.plan().batch_size, 0);
  std::vector<std::pair<int64_t, int64_t>> seen;  // (epoch, step) in each training_step
  module.extra = [&](Toy& m) { seen.emplace_back(m.current_epoch(), m.global_step()); };
  const TrainerResult result = train_scheduled(TrainerOptions(), module, nullptr);
  using At = std::pair<int64_t, int64_t>;
  ASSERT_EQ(seen.size(), 16u);
  EXPECT_EQ(seen[0], At(0, 0));
  EXPECT_EQ(seen[7], At(0, 7));
  EXPECT_EQ(seen[8], At(1, 8));
  EXPECT_EQ(seen[15], At(1, 15));
  EXPECT_EQ(module.plan().batch_size, 6);
  EXPECT_EQ(module.plan().estimated_stepping_batches, 16);
  EXPECT_EQ(result.global_step, 16);
  EXPECT_EQ(module.global_step(), 16);
  EXPECT_EQ(module.current_epoch(), 1);
}

// A checkpoint written after an epoch's last batch, before its validation (where a preemption notice
// at that step leaves one): the resumed run validates that epoch first and must report what the
// uninterrupted run did: the same step, learning rate and loss, and global_step() inside validation_step.
TEST(Trainer, ResumingAtAnEpochsLastBatchReportsThatEpochAsTheUninterruptedRun) {
  const auto dir = std::filesystem::temp_directory_path() / ("trainer-end0-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string ckpt = (dir / "end0.ckpt").string();
  ScheduledToy full;
  auto hooks = std::make_shared<Hooks>();
  hooks->batch_end = [&](TrainerContext& t, const BatchEnd& b) {
    if (t.current_epoch() == 0 && b.batch_idx == 7) t.save_checkpoint(ckpt);
  };
  const TrainerResult uninterrupted = train_scheduled(TrainerOptions(), full, hooks);
  ASSERT_EQ(uninterrupted.epochs.size(), 2u);
  ASSERT_TRUE(std::filesystem::exists(ckpt));

  ScheduledToy resumed_module;
  const TrainerResult resumed = train_scheduled(TrainerOptions().resume(ckpt), resumed_module, nullptr);
  ASSERT_EQ(resumed.epochs.size(), 2u);
  for (std::size_t e = 0; e < 2; ++e) {
    const EpochMetrics& want = uninterrupted.epochs[e];
    const EpochMetrics& got = resumed.epochs[e];
    EXPECT_EQ(got.step, want.step) << "epoch " << e;
    EXPECT_DOUBLE_EQ(got.lr, want.lr) << "epoch " << e;
    EXPECT_DOUBLE_EQ(got.val_loss, want.val_loss) << "epoch " << e;
    EXPECT_DOUBLE_EQ(got.train_loss, want.train_loss) << "epoch " << e;
  }
  // The schedule's rate of step 8 (the last of epoch 0) is not its first: the check can fail.
  EXPECT_NE(uninterrupted.epochs[0].lr, 0.1);
  EXPECT_EQ(resumed_module.validated_at, full.validated_at);
  EXPECT_EQ(full.validated_at.front(), 8);
  std::filesystem::remove_all(dir);
}

// cuda_graphs where the step cannot be captured (the CPU here; on a GPU: tests/cuda) runs every step
// eagerly, training what it trains without the option, after one line from rank 0 saying why.
TEST(Trainer, CudaGraphsOnTheCpuRunEagerlySayingWhy) {
  auto data = toy_data(48);
  auto train = [&](bool graphs, std::string* printed) {
    auto store = c10::make_intrusive<c10d::HashStore>();
    std::FILE* out = std::tmpfile();
    auto group = comm::init_process_group(lockstep::testing::thread_group_options(0, 1, store, "graphs"));
    auto module = std::make_shared<Toy>();
    ToyData toy(data, 12);
    Trainer trainer(thread_options(group, out).max_epochs(2).seed(5).cuda_graphs(graphs));
    const TrainerResult result = trainer.fit(module, toy);
    group.shutdown();
    EXPECT_EQ(result.graph_replays, 0);
    std::rewind(out);
    char line[512];
    while (std::fgets(line, sizeof line, out)) *printed += line;
    std::fclose(out);
    std::vector<at::Tensor> params;
    for (const auto& p : module->parameters()) params.push_back(p.detach().clone());
    return params;
  };
  std::string with, without;
  const auto graphs = train(true, &with);
  expect_close(graphs, train(false, &without));
  EXPECT_NE(with.find("cuda graphs: off, every step runs eagerly: "), std::string::npos) << with;
  EXPECT_TRUE(with.find("not on a GPU") != std::string::npos ||
              with.find("without CUDA") != std::string::npos)
      << with;
  EXPECT_EQ(without.find("cuda graphs"), std::string::npos) << without;
}

TEST(TrainerOptions, BadValuesNameTheOption) {
  EXPECT_THROW(TrainerOptions().accumulate_grad_batches(0).validate(), std::invalid_argument);
  EXPECT_THROW(parse_precision("fp8"), std::invalid_argument);
  EXPECT_THROW(parse_on_nan("ignore"), std::invalid_argument);
  EXPECT_EQ(parse_on_nan("skip"), OnNan::kSkip);
  EXPECT_THROW(TrainerOptions().resume("last").validate(), std::invalid_argument);
  try {
    TrainerOptions().max_steps(0).validate();
    FAIL() << "max_steps 0 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("max_steps"), std::string::npos) << e.what();
  }
}

TEST(TrainerOptions, ElasticRefusesWhatCannotLoseARankInPlace) {
  EXPECT_NO_THROW(TrainerOptions().elastic(true).validate());
  EXPECT_NO_THROW(TrainerOptions().elastic(true).backend(comm::Backend::kGloo).validate());
  const auto refused = [](const TrainerOptions& options, const std::string& named) {
    try {
      options.validate();
      ADD_FAILURE() << "accepted: " << named;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
    }
  };
  refused(TrainerOptions().elastic(true).strategy(StrategyOptions(StrategyKind::kZero1)), "strategy 'zero1'");
  refused(TrainerOptions().elastic(true).strategy(StrategyOptions(StrategyKind::kFsdp)), "strategy 'fsdp'");
  refused(TrainerOptions().elastic(true).backend(comm::Backend::kShm), "backend 'shm'");
  refused(TrainerOptions().elastic(true).cuda_graphs(true), "cuda_graphs");
}

}  // namespace
}  // namespace lockstep::train
