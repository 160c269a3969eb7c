// The Trainer and the Accelerator with tensor_parallel T: ranks as threads over an in-memory store. A GPT
// TrainModule that builds models::TensorParallelGpt in configure_model() over device_mesh()->tp(): T = 2
// and 4 alone, and 2 data x 2 tensor parallel under ddp and zero1, end in float64 on the parameters one
// process trains on the same global batches (1e-12), with the same epoch metrics and sample counts (each
// sample counted once, not T times). A loop of the program's own under the Accelerator does the same. What
// tensor parallelism cannot work with yet is refused, naming the fix.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "../comm/thread_group.h"
#include "lit_gpt.h"
#include "lockstep/comm/device_mesh.h"
#include "lockstep/models/gpt.h"
#include "lockstep/models/tensor_parallel_gpt.h"
#include "lockstep/models/vocab_parallel.h"
#include "lockstep/train/accelerator.h"
#include "lockstep/train/checkpoint.h"
#include "lockstep/train/checkpoint_export.h"
#include "lockstep/train/safetensors.h"
#include "lockstep/train/trainer.h"

namespace lockstep::train::tensor_parallel {
namespace {

using namespace gpt_fixture;  // NOLINT(google-build-using-namespace): the fixture is this file's vocabulary

using lockstep::testing::expect_all_ok;
using lockstep::testing::lock_default_generator;
using lockstep::testing::RankOutcome;
using lockstep::testing::run_ranks;

// At the fit's end, while the mesh is open: the parameters whole, on every rank.
class Gather : public Callback {
 public:
  explicit Gather(std::shared_ptr<LitGpt> module) : module_(std::move(module)) {}
  std::string state_key() const override { return "Gather"; }
  void on_fit_end(TrainerContext&) override { whole = module_->whole(); }
  std::map<std::string, at::Tensor> whole;

 private:
  std::shared_ptr<LitGpt> module_;
};

struct Trained {
  std::map<std::string, at::Tensor> whole;  // rank 0's, gathered
  TrainerResult result;                     // rank 0's
};

// Fits LitGpt on `world` thread ranks, `batch` windows per data-parallel rank.
Trained fit_gpt(int world, int64_t batch, const TrainerOptions& base) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  QuietOutput quiet;
  std::vector<Trained> ranks(static_cast<size_t>(world));
  std::vector<std::shared_ptr<LitGpt>> modules;  // built before the ranks start, as in accelerate_gpt
  for (int r = 0; r < world; ++r) modules.push_back(std::make_shared<LitGpt>());
  expect_all_ok(run_ranks(world, [&](int rank) {
    auto group =
        comm::init_process_group(lockstep::testing::thread_group_options(rank, world, store, "tp-fit"));
    const env::Environment environment = lockstep::testing::thread_environment(rank, world);
    const std::shared_ptr<LitGpt>& module = modules[static_cast<size_t>(rank)];
    auto gather = std::make_shared<Gather>(module);
    Corpus data(batch);
    TrainerOptions options = base;
    Trainer trainer(options.process_group(&group).environment(environment).out(quiet.file).callback(gather));
    Trained& mine = ranks[static_cast<size_t>(rank)];
    mine.result = trainer.fit(module, data);
    mine.whole = gather->whole;
    group.shutdown();
  }));
  for (int r = 1; r < world; ++r) {  // every rank gathered the same model
    for (const auto& [name, value] : ranks[0].whole)
      EXPECT_TRUE(value.equal(ranks[static_cast<size_t>(r)].whole.at(name))) << name << " on rank " << r;
  }
  return ranks[0];
}

struct Shape {
  int world;
  int tensor_parallel;
  StrategyKind strategy;
};

std::string shape_name(const ::testing::TestParamInfo<Shape>& info) {
  return "dp" + std::to_string(info.param.world / info.param.tensor_parallel) + "_tp" +
         std::to_string(info.param.tensor_parallel) + "_" + to_string(info.param.strategy);
}

class TrainerTensorParallel : public ::testing::TestWithParam<Shape> {};

// Two epochs of 4-window batches per data-parallel rank against one process with the global batch: the same
// samples in each step (the sampler deals over the data-parallel ranks only), the same parameters, and the
// same epoch values and counts.
TEST_P(TrainerTensorParallel, EndsOnOneProcessesParametersAndMetrics) {
  const Shape shape = GetParam();
  const int dp = shape.world / shape.tensor_parallel;
  const auto options = TrainerOptions().max_epochs(2).seed(3);
  const Trained reference = fit_gpt(1, 4 * dp, options);
  const Trained split =
      fit_gpt(shape.world, 4,
              TrainerOptions(options).tensor_parallel(shape.tensor_parallel).strategy(shape.strategy));
  ASSERT_FALSE(reference.whole.empty());
  ASSERT_EQ(split.whole.size(), reference.whole.size());
  for (const auto& [name, value] : reference.whole) {
    EXPECT_LT((split.whole.at(name) - value).abs().max().item<double>(), 1e-12) << name;
  }
  expect_moved(reference.whole);  // the check can fail
  expect_same_epochs(split.result, reference.result, shape.world);
}

INSTANTIATE_TEST_SUITE_P(Shapes, TrainerTensorParallel,
                         ::testing::Values(Shape{2, 2, StrategyKind::kDdp}, Shape{4, 4, StrategyKind::kDdp},
                                           Shape{4, 2, StrategyKind::kDdp},
                                           Shape{4, 2, StrategyKind::kZero1}),
                         shape_name);

// A loop of the program's own under the Accelerator on `world` ranks, `tensor_parallel` T: the split model
// built over device_mesh()->tp() and prepared with SGD and the training windows (`batch` per data-parallel
// rank), two passes. Rank 0's parameters, whole.
// Passes [from, to) of a loop, after load_state(load) when given, then save_state(save) when given.
struct Passes {
  int from = 0;
  int to = 2;
  std::string load;
  std::string save;
};

std::map<std::string, at::Tensor> accelerate_gpt(int world, int tensor_parallel, int64_t batch,
                                                 const Passes& passes = {}) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::map<std::string, at::Tensor> result;
  // Built before the ranks start: a rank's Accelerator may seed the default generator meanwhile.
  std::vector<models::Gpt> models;
  for (int r = 0; r < world; ++r) models.push_back(seeded_gpt());
  expect_all_ok(run_ranks(world, [&](int rank) {
    auto group = comm::init_process_group(
        lockstep::testing::thread_group_options(rank, world, store, "tp-accelerate"));
    Accelerator accelerator(group, AcceleratorOptions().tensor_parallel(tensor_parallel).seed(3));
    models::Gpt full = models[static_cast<size_t>(rank)];
    std::map<std::string, at::Tensor> whole;
    const auto loop = [&](auto net, auto loss_of) {
      auto [model, optimizer, loader] = accelerator.prepare(
          net, torch::optim::SGD(net->parameters(), torch::optim::SGDOptions(0.5)), windows(0, 32, batch));
      if (!passes.load.empty()) accelerator.load_state(passes.load);
      for (int pass = passes.from; pass < passes.to; ++pass) {
        for (auto& [x, y] : loader) {
          auto scope = accelerator.accumulate(model);
          accelerator.backward(loss_of(model(x).flatten(0, -2), y.flatten()));
          optimizer.step();
          optimizer.zero_grad();
        }
      }
      if (!passes.save.empty()) accelerator.save_state(passes.save);
    };
    if (comm::DeviceMesh* mesh = accelerator.device_mesh()) {
      models::TensorParallelGpt split(*full, mesh->tp());
      loop(split, [mesh](const at::Tensor& logits, const at::Tensor& target) {
        return models::vocab_parallel_cross_entropy(logits, target, mesh->tp()).mean();
      });
      for (auto& [name, value] : split->full_parameters()) whole[name] = value.detach().clone();
    } else {
      loop(full, [](const at::Tensor& logits, const at::Tensor& target) {
        return torch::nn::functional::cross_entropy(logits, target);
      });
      for (const auto& p : full->named_parameters()) whole[p.key()] = p.value().detach().clone();
    }
    EXPECT_EQ(accelerator.step(), passes.to * 32 / (batch * world / tensor_parallel));
    accelerator.end_training();
    if (rank == 0) result = whole;
    group.shutdown();
  }));
  return result;
}

TEST(AcceleratorTensorParallel, ALoopOverTheSplitModelEndsOnOneProcessesParameters) {
  const auto one = accelerate_gpt(1, 1, 8);
  ASSERT_FALSE(one.empty());
  for (const auto& [world, tp] : {std::pair{2, 2}, std::pair{4, 2}}) {
    const auto split = accelerate_gpt(world, tp, 8 * tp / world);
    ASSERT_EQ(split.size(), one.size());
    for (const auto& [name, value] : one)
      EXPECT_LT((split.at(name) - value).abs().max().item<double>(), 1e-12) << name << " world " << world;
  }
  EXPECT_GT(
      (one.at("wte.weight") - seeded_gpt()->named_parameters()["wte.weight"]).abs().max().item<double>(),
      1e-3);
}

// save_state under tensor parallelism, ddp: one part per tensor-parallel rank (dir, dir.tp1.step-S-<save>). 2
// x 2 saved after the first pass and loaded into fresh objects for the second ends exactly where the
// uninterrupted loop does; on 1 x 2 (another data-parallel size, the same global batch) within 1e-12. Another
// tensor_parallel is refused, naming both.
TEST(AcceleratorTensorParallel, SaveStateInPartsAndLoadItOntoAnotherDataParallelSize) {
  EXPECT_THROW(AcceleratorOptions().tensor_parallel(2).strategy(StrategyKind::kFsdp).validate(),
               std::invalid_argument);
  const std::string dir = ::testing::TempDir() + "tp_accelerator_state";
  std::filesystem::remove_all(dir);
  for (const std::string& name : names_beside(dir)) std::filesystem::remove_all(::testing::TempDir() + name);
  // What a save that crashed before its rank 0 part (a later step) and a save of a larger tensor_parallel
  // left: named by no state, not loaded, removed by the next save.
  std::filesystem::create_directories(dir + ".tp1.step-999");
  std::filesystem::create_directories(dir + ".tp3.step-1");
  const auto uninterrupted = accelerate_gpt(4, 2, 4);
  accelerate_gpt(4, 2, 4, Passes{0, 1, "", dir});
  const std::vector<std::string> parts = names_beside(dir);
  ASSERT_EQ(parts.size(), 1u) << ::testing::PrintToString(parts);
  EXPECT_EQ(parts[0].rfind(std::filesystem::path(dir).filename().string() + ".tp1.step-", 0), 0u) << parts[0];
  EXPECT_TRUE(std::filesystem::is_directory(::testing::TempDir() + parts[0]));
  std::filesystem::create_directories(dir + ".tp1.step-999");
  EXPECT_EQ(max_diff(accelerate_gpt(4, 2, 4, Passes{1, 2, dir, ""}), uninterrupted), 0.0);
  EXPECT_LT(max_diff(accelerate_gpt(2, 2, 8, Passes{1, 2, dir, ""}), uninterrupted), 1e-12);
  lockstep::testing::run_group_ranks(2, "tp-other-state", [&](int, comm::ProcessGroup& group) {
    Accelerator accelerator(group);
    try {
      accelerator.load_state(dir);
      ADD_FAILURE() << "loaded a tensor-parallel state without tensor parallelism";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("written with tensor_parallel 2"), std::string::npos) << e.what();
    }
  });
  // A part missing (only `dir` copied): every rank fails, none goes on with half a state.
  std::filesystem::remove_all(dir + ".tp1.step-999");
  std::filesystem::remove_all(only_part(dir, 1));
  lockstep::testing::run_group_ranks(4, "tp-missing-part", [&](int, comm::ProcessGroup& group) {
    Accelerator accelerator(group, AcceleratorOptions().tensor_parallel(2));
    try {
      accelerator.load_state(dir);
      ADD_FAILURE() << "loaded a state with a part missing";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(".tp1.step-"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
    }
    accelerator.end_training();
  });
}

// gradient_clip_val by the whole model's norm (Strategy::split_over): 0.05 clips the steps here, and 1 x 2
// and 2 x 2 end on one process's clipped parameters; clipping changed them (the check can fail).
TEST(TrainerTensorParallelClip, ClipsByTheNormOneProcessComputes) {
  const auto clipped = TrainerOptions().max_epochs(1).seed(3).gradient_clip_val(0.05);
  for (const auto& [world, tp] : {std::pair{2, 2}, std::pair{4, 2}}) {
    const int dp = world / tp;
    const Trained one = fit_gpt(1, 4 * dp, clipped);
    EXPECT_LT(max_diff(fit_gpt(world, 4, TrainerOptions(clipped).tensor_parallel(tp)).whole, one.whole),
              1e-12)
        << "world " << world;
    EXPECT_GT(max_diff(fit_gpt(1, 4 * dp, TrainerOptions(clipped).gradient_clip_val(0)).whole, one.whole),
              1e-4);
  }
}

// Checkpoints under tensor parallelism, ddp and zero1 (its shards beside each part): one part per
// tensor-parallel rank (last.ckpt, last.ckpt.tp1.step-4-<save>), each written by its data-parallel group. 2 x
// 2 trained one epoch and resumed for the second ends exactly where the uninterrupted run does; resumed on 1
// x 2 (another data-parallel size, the same global batch) within 1e-12. final.safetensors holds the model
// whole, and so does `lockstep export` of the parts. Another tensor_parallel is refused, naming both.
class TrainerTensorParallelCheckpoints : public ::testing::TestWithParam<StrategyKind> {};

TEST_P(TrainerTensorParallelCheckpoints, ResumeOntoTheSameOrAnotherDataParallelSize) {
  const std::string dir = ::testing::TempDir() + "tp_checkpoints_" + to_string(GetParam());
  std::filesystem::remove_all(dir);
  const auto options = TrainerOptions().seed(3).tensor_parallel(2).strategy(GetParam());
  const Trained uninterrupted = fit_gpt(4, 4, TrainerOptions(options).max_epochs(2));
  fit_gpt(4, 4, TrainerOptions(options).max_epochs(1).ckpt_dir(dir));
  EXPECT_TRUE(std::filesystem::is_regular_file(dir + "/last.ckpt"));
  const std::string part1 = only_part(dir + "/last.ckpt", 1);
  EXPECT_EQ(part1.rfind(dir + "/last.ckpt.tp1.step-4-", 0), 0u) << part1;
  EXPECT_FALSE(std::filesystem::exists(dir + "/final.pt"));  // it would hold one rank's slices
  if (GetParam() == StrategyKind::kZero1) {  // each part's optimizer shards beside it, one per dp rank
    for (const std::string& part : {dir + "/last.ckpt", part1}) {
      for (int r = 0; r < 2; ++r) {
        EXPECT_TRUE(std::filesystem::is_regular_file(checkpoint_shard_path(part, r, 2, 4)))
            << part << " shard " << r;
      }
    }
  }

  // final.safetensors: the whole model (LitGpt's parameters sit under "model.").
  const Trained first_epoch = fit_gpt(4, 4, TrainerOptions(options).max_epochs(1));
  const SafetensorsFile final_weights = load_safetensors(dir + "/final.safetensors");
  ASSERT_EQ(final_weights.tensors.size(), first_epoch.whole.size());
  for (const auto& [name, tensor] : final_weights.tensors)
    EXPECT_TRUE(tensor.equal(first_epoch.whole.at(name.substr(std::string("model.").size())))) << name;

  const std::string last = dir + "/last.ckpt";
  const auto resumed = TrainerOptions(options).max_epochs(2).resume(last).save_final_weights(false);
  for (const auto& [world, batch] : {std::pair{4, 4}, std::pair{2, 8}}) {
    const Trained again = fit_gpt(world, batch, resumed);
    ASSERT_EQ(again.result.epochs.size(), 1u) << "world " << world << " trained more than the second epoch";
    EXPECT_EQ(again.result.epochs[0].epoch, 1);
    const double diff = max_diff(again.whole, uninterrupted.whole);
    if (world == 4) {
      EXPECT_EQ(diff, 0.0) << "2 x 2 resumed";
    }
    EXPECT_LT(diff, 1e-12) << "world " << world;
  }

  for (const int tensor_parallel : {1, 4}) {
    expect_refused_on_four_ranks(TrainerOptions(resumed).tensor_parallel(tensor_parallel),
                                 "checkpoint '" + last + "': written with tensor_parallel 2, resumed with " +
                                     std::to_string(tensor_parallel));
  }
  // lockstep export puts the parts together (zero1: each part's shards first): final.safetensors exactly.
  const ExportResult exported = export_safetensors(last, dir + "/last.safetensors");
  EXPECT_EQ(exported.metadata.at("tensor_parallel"), "2");
  const SafetensorsFile joined = load_safetensors(exported.output);
  ASSERT_EQ(joined.tensors.size(), final_weights.tensors.size());
  for (size_t i = 0; i < joined.tensors.size(); ++i) {
    EXPECT_EQ(joined.tensors[i].first, final_weights.tensors[i].first);
    EXPECT_TRUE(joined.tensors[i].second.equal(final_weights.tensors[i].second)) << joined.tensors[i].first;
  }
  try {
    export_safetensors(part1, dir + "/part.safetensors");
    ADD_FAILURE() << "exported one part as if it were the checkpoint";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("is tensor-parallel rank 1's part of a checkpoint"),
              std::string::npos)
        << e.what();
  }

  // Saves that crashed after tensor-parallel rank 1's part and before rank 0's (a later step, and a second
  // save at the checkpoint's own step, as an epoch end after a step-boundary save makes), and a save of a
  // larger tensor_parallel, left parts behind: the checkpoint on disk names its own set, the resume is
  // exact, and its next save removes what no checkpoint names.
  const auto plant = [&](const std::string& name) { std::ofstream(dir + "/" + name) << "not a checkpoint"; };
  plant("last.ckpt.tp1.step-8-0000000000000000");
  plant("last.ckpt.tp1.step-4-ffffffffffffffff");
  plant("last.ckpt.tp3.step-4-0000000000000000");
  const Trained again = fit_gpt(4, 4, TrainerOptions(resumed).ckpt_dir(dir));
  EXPECT_EQ(max_diff(again.whole, uninterrupted.whole), 0.0);
  const std::string new_part1 = only_part(dir + "/last.ckpt", 1);
  EXPECT_EQ(new_part1.rfind(dir + "/last.ckpt.tp1.step-8-", 0), 0u) << new_part1;
  EXPECT_NE(new_part1, dir + "/last.ckpt.tp1.step-8-0000000000000000");
  std::vector<std::string> expected = {std::filesystem::path(new_part1).filename().string()};
  if (GetParam() == StrategyKind::kZero1) {
    for (int r = 0; r < 2; ++r)
      expected.push_back(
          std::filesystem::path(checkpoint_shard_path(new_part1, r, 2, 8)).filename().string());
  }
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(names_beside(dir + "/last.ckpt"), expected);
}

// A module whose logged value differs by tensor-parallel rank (as a loss computed from other slices may, in
// its last bits).
class LitGptLoggingItsSlice : public LitGpt {
 public:
  at::Tensor training_step(const Windows& batch, int64_t index) override {
    log("slice", static_cast<double>(device_mesh()->tp_rank() + 1));
    return LitGpt::training_step(batch, index);
  }
};

class SeenMetric : public Callback {
 public:
  std::string state_key() const override { return "SeenMetric"; }
  void on_train_epoch_end(TrainerContext& trainer) override { seen = trainer.callback_metrics().at("slice"); }
  double seen = 0;
};

// callback_metrics() are rank 0's on every rank under tensor parallelism too (tensor-parallel rank 0's
// values shared over each tensor-parallel group), so callbacks decide alike: 2 x 2, every rank sees 1.
TEST(TrainerTensorParallelMetrics, CallbacksSeeRankZerosValuesOnEveryRank) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  QuietOutput quiet;
  std::vector<std::shared_ptr<LitGptLoggingItsSlice>> modules;
  for (int r = 0; r < 4; ++r) modules.push_back(std::make_shared<LitGptLoggingItsSlice>());
  std::vector<double> seen(4, -1);
  expect_all_ok(run_ranks(4, [&](int rank) {
    auto group =
        comm::init_process_group(lockstep::testing::thread_group_options(rank, 4, store, "tp-metrics"));
    auto metric = std::make_shared<SeenMetric>();
    Corpus data(4);
    Trainer trainer(TrainerOptions()
                        .max_epochs(1)
                        .tensor_parallel(2)
                        .process_group(&group)
                        .environment(lockstep::testing::thread_environment(rank, 4))
                        .out(quiet.file)
                        .callback(metric));
    trainer.fit(modules[static_cast<size_t>(rank)], data);
    seen[static_cast<size_t>(rank)] = metric->seen;
    group.shutdown();
  }));
  EXPECT_EQ(seen, std::vector<double>(4, 1.0));
}

// A checkpoint file that fails to write (injected: tensor-parallel rank 1's part, or rank 0's, with and
// without tensor parallelism) fails save_checkpoint on every rank, the writer with its own error and the
// others naming its rank, instead of leaving them waiting for it (or training on); no checkpoint is left
// at the path.
TEST(TrainerTensorParallelCheckpointFailure, AFileThatCannotBeWrittenFailsEveryRank) {
  for (const auto& [tensor_parallel, failing] :
       {std::pair{2, std::string(".tp1.step-")}, std::pair{2, std::string("/.last.ckpt.tmp.")},
        std::pair{1, std::string("/.last.ckpt.tmp.")}}) {
    const std::string dir = ::testing::TempDir() + "tp_checkpoint_failure";
    std::filesystem::remove_all(dir);
    detail::checkpoint_written_hook() = [failing = failing](const std::string& tmp) {
      if (tmp.find(failing) != std::string::npos) throw std::runtime_error("injected: disk full");
    };
    auto store = c10::make_intrusive<c10d::HashStore>();
    QuietOutput quiet;
    std::vector<std::shared_ptr<LitGpt>> modules;
    for (int r = 0; r < 4; ++r) modules.push_back(std::make_shared<LitGpt>());
    const std::vector<RankOutcome> outcomes = run_ranks(4, [&](int rank) {
      auto group =
          comm::init_process_group(lockstep::testing::thread_group_options(rank, 4, store, "tp-fail"));
      Corpus data(4);
      Trainer trainer(TrainerOptions()
                          .max_epochs(1)
                          .tensor_parallel(tensor_parallel)
                          .ckpt_dir(dir)
                          .process_group(&group)
                          .environment(lockstep::testing::thread_environment(rank, 4))
                          .out(quiet.file));
      try {
        trainer.fit(modules[static_cast<size_t>(rank)], data);
      } catch (...) {
        group.shutdown();
        throw;
      }
      group.shutdown();
    });
    detail::checkpoint_written_hook() = nullptr;
    for (size_t r = 0; r < outcomes.size(); ++r) {
      EXPECT_FALSE(outcomes[r].ok) << "rank " << r << " went on, T " << tensor_parallel << ", " << failing;
      EXPECT_NE(outcomes[r].error.find("injected: disk full"), std::string::npos) << outcomes[r].error;
    }
    EXPECT_FALSE(std::filesystem::exists(dir + "/last.ckpt")) << failing;
  }
}

INSTANTIATE_TEST_SUITE_P(Strategies, TrainerTensorParallelCheckpoints,
                         ::testing::Values(StrategyKind::kDdp, StrategyKind::kZero1),
                         [](const ::testing::TestParamInfo<StrategyKind>& info) {
                           return to_string(info.param);
                         });

// What tensor parallelism does not work with yet: refused by validate(), before any rank waits.
TEST(TrainerTensorParallelOptions, WhatItCannotWorkWithIsRefusedNamingTheFix) {
  const auto tp = TrainerOptions().tensor_parallel(2);
  const std::vector<std::pair<TrainerOptions, std::string>> cases = {
      {TrainerOptions().tensor_parallel(0), "tensor_parallel must be >= 1, got 0"},
      {TrainerOptions(tp).strategy(StrategyKind::kFsdp),
       "tensor_parallel 2 does not work with strategy 'fsdp': the data-parallel dimension runs ddp or zero1"},
      {TrainerOptions(tp).strategy(StrategyKind::kZero2), "does not work with strategy 'zero2'"},
      {TrainerOptions(tp).elastic(true), "does not work with elastic: a lost rank"},
  };
  for (const auto& [options, message] : cases) {
    try {
      options.validate();
      ADD_FAILURE() << "accepted; expected: " << message;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
  EXPECT_NO_THROW(TrainerOptions(tp).strategy(StrategyKind::kZero1).validate());
}

// A world T does not divide: every rank names both numbers (DeviceMesh), none hangs.
TEST(TrainerTensorParallelOptions, AWorldTheSplitDoesNotDivideIsRefusedOnEveryRank) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  QuietOutput quiet;
  const auto outcomes = run_ranks(3, [&](int rank) {
    auto group = comm::init_process_group(lockstep::testing::thread_group_options(rank, 3, store, "tp-bad"));
    Corpus data(4);
    Trainer trainer(TrainerOptions().max_epochs(1).tensor_parallel(2).process_group(&group).out(quiet.file));
    try {
      trainer.fit(std::make_shared<LitGpt>(), data);
      ADD_FAILURE() << "rank " << rank << " trained";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("tensor_parallel 2 does not divide the world of 3 ranks"),
                std::string::npos)
          << e.what();
    }
    group.shutdown();
  });
  expect_all_ok(outcomes);
}

}  // namespace
}  // namespace lockstep::train::tensor_parallel
