// The Trainer with pipeline_parallel P: ranks as threads over an in-memory store. The float64 GPT of
// lit_gpt.h cut into P stages: P = 2 and 4 alone, 2 data x 2 pipeline under ddp and zero1, GPipe and 1F1B,
// with accumulation and clipping, end on the parameters one process trains on the same global batches
// (1e-12), with the same epoch metrics and sample counts; every rank leaves fit() with the whole model.
// Checkpoints come in one part per stage and resume exactly, onto the same or another data-parallel size;
// `lockstep export` of the checkpoint is the whole model. What a pipeline cannot work with is refused,
// naming the fix.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "../comm/thread_group.h"
#include "../support/error_of.h"
#include "lit_gpt.h"
#include "lockstep/train/accelerator.h"
#include "lockstep/train/checkpoint_export.h"
#include "lockstep/train/model_checkpoint.h"
#include "lockstep/train/safetensors.h"
#include "lockstep/train/trainer.h"

namespace lockstep::train::pipeline_parallel {
namespace {

using namespace gpt_fixture;  // NOLINT(google-build-using-namespace): the fixture is this file's vocabulary

using lockstep::testing::expect_all_ok;
using lockstep::testing::run_ranks;

struct Trained {
  std::vector<std::map<std::string, at::Tensor>> whole;  // by rank: its module's parameters after fit()
  TrainerResult result;                                  // rank 0's
};

// Fits LitGpt (SGD with `momentum`) on `world` thread ranks, `batch` windows per data-parallel rank, with
// the callback `callback` makes for each rank, if any.
Trained fit_gpt(int world, int64_t batch, const TrainerOptions& base, double momentum = 0.0,
                const std::function<std::shared_ptr<Callback>()>& callback = nullptr) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  QuietOutput quiet;
  Trained trained;
  trained.whole.resize(static_cast<size_t>(world));
  std::vector<std::shared_ptr<LitGpt>> modules;  // built before the ranks start (the default generator)
  for (int r = 0; r < world; ++r) modules.push_back(std::make_shared<LitGpt>(momentum));
  expect_all_ok(run_ranks(world, [&](int rank) {
    auto group =
        comm::init_process_group(lockstep::testing::thread_group_options(rank, world, store, "pp-fit"));
    const std::shared_ptr<LitGpt>& module = modules[static_cast<size_t>(rank)];
    Corpus data(batch);
    TrainerOptions options = TrainerOptions(base)
                                 .process_group(&group)
                                 .environment(lockstep::testing::thread_environment(rank, world))
                                 .out(quiet.file);
    if (callback) options.callback(callback());
    Trainer trainer(options);
    const TrainerResult result = trainer.fit(module, data);
    if (rank == 0) trained.result = result;
    trained.whole[static_cast<size_t>(rank)] = module->whole();
    group.shutdown();
  }));
  return trained;
}

struct Shape {
  int world;
  int stages;
  int micro_batches;
  pipeline::Schedule schedule;
  StrategyKind strategy;
};

std::string shape_name(const ::testing::TestParamInfo<Shape>& info) {
  const Shape& s = info.param;
  return "dp" + std::to_string(s.world / s.stages) + "_pp" + std::to_string(s.stages) + "_m" +
         std::to_string(s.micro_batches) + "_" + pipeline::to_string(s.schedule) + "_" +
         to_string(s.strategy);
}

class TrainerPipelineParallel : public ::testing::TestWithParam<Shape> {};

// Two epochs of 4-window batches per data-parallel rank, two batches accumulated per step and the gradients
// clipped, against one process with the global batch: the same parameters on every rank, the same epoch
// values and counts (each sample counted once, not P times).
TEST_P(TrainerPipelineParallel, EndsOnOneProcessesParametersAndMetrics) {
  const Shape shape = GetParam();
  const int dp = shape.world / shape.stages;
  const auto options =
      TrainerOptions().max_epochs(2).seed(3).accumulate_grad_batches(2).gradient_clip_val(0.5);
  const Trained reference = fit_gpt(1, 4 * dp, options);
  const Trained piped = fit_gpt(shape.world, 4,
                                TrainerOptions(options)
                                    .pipeline_parallel(shape.stages)
                                    .micro_batches(shape.micro_batches)
                                    .pipeline_schedule(shape.schedule)
                                    .strategy(shape.strategy));
  const auto& one = reference.whole[0];
  for (int r = 0; r < shape.world; ++r)
    EXPECT_LT(max_diff(piped.whole[static_cast<size_t>(r)], one), 1e-12) << "rank " << r;
  expect_moved(one);  // the check can fail
  expect_same_epochs(piped.result, reference.result, shape.world);
}

INSTANTIATE_TEST_SUITE_P(Shapes, TrainerPipelineParallel,
                         ::testing::Values(Shape{2, 2, 2, pipeline::Schedule::k1F1B, StrategyKind::kDdp},
                                           Shape{2, 2, 1, pipeline::Schedule::kGPipe, StrategyKind::kDdp},
                                           Shape{4, 4, 4, pipeline::Schedule::k1F1B, StrategyKind::kDdp},
                                           Shape{4, 2, 2, pipeline::Schedule::kGPipe, StrategyKind::kDdp},
                                           Shape{4, 2, 2, pipeline::Schedule::k1F1B, StrategyKind::kZero1}),
                         shape_name);

// Checkpoints under 2 data x 2 pipeline, ddp and zero1: one part per stage (last.ckpt, last.ckpt.tp1.<save>),
// each written by its data-parallel group. Trained one epoch and resumed for the second, the run ends
// exactly where the uninterrupted one does; resumed on 1 x 2 (another data-parallel size, the same global
// batch) within 1e-12. final.safetensors and `lockstep export` of last.ckpt hold the whole model. Another
// pipeline_parallel is refused, naming both.
class TrainerPipelineCheckpoints : public ::testing::TestWithParam<StrategyKind> {};

TEST_P(TrainerPipelineCheckpoints, ResumeOntoTheSameOrAnotherDataParallelSize) {
  const std::string dir = ::testing::TempDir() + "pp_checkpoints_" + to_string(GetParam());
  std::filesystem::remove_all(dir);
  const auto options = TrainerOptions().seed(3).pipeline_parallel(2).micro_batches(2).strategy(GetParam());
  constexpr double kMomentum = 0.9;  // optimizer state in each stage's part
  const Trained uninterrupted = fit_gpt(4, 4, TrainerOptions(options).max_epochs(2), kMomentum);
  const Trained first_epoch = fit_gpt(4, 4, TrainerOptions(options).max_epochs(1).ckpt_dir(dir), kMomentum);
  const std::string last = dir + "/last.ckpt";
  EXPECT_TRUE(std::filesystem::is_regular_file(last));
  const std::string part1 = only_part(last, 1);
  EXPECT_EQ(part1.rfind(last + ".tp1.step-4-", 0), 0u) << part1;

  // final.safetensors: the whole model (LitGpt's parameters sit under "model."), and so is last.ckpt's.
  const SafetensorsFile final_weights = load_safetensors(dir + "/final.safetensors");
  ASSERT_EQ(final_weights.tensors.size(), first_epoch.whole[0].size());
  for (const auto& [name, tensor] : final_weights.tensors)
    EXPECT_TRUE(tensor.equal(first_epoch.whole[0].at(name.substr(std::string("model.").size())))) << name;
  // Every part holds the whole model (stage 1's too: its shards fill its stage, the rest is beside them).
  for (const std::string& part : {last, part1}) {
    const SafetensorsFile exported = load_safetensors(export_safetensors(part, part + ".safetensors").output);
    ASSERT_EQ(exported.tensors.size(), final_weights.tensors.size()) << part;
    for (size_t i = 0; i < exported.tensors.size(); ++i)
      EXPECT_TRUE(exported.tensors[i].second.equal(final_weights.tensors[i].second))
          << part << " " << exported.tensors[i].first;
  }

  const auto resumed = TrainerOptions(options).max_epochs(2).resume(last).save_final_weights(false);
  for (const auto& [world, batch] : {std::pair{4, 4}, std::pair{2, 8}}) {
    const Trained again = fit_gpt(world, batch, resumed, kMomentum);
    ASSERT_EQ(again.result.epochs.size(), 1u) << "world " << world << " trained more than the second epoch";
    const double diff = max_diff(again.whole[0], uninterrupted.whole[0]);
    if (world == 4) {
      EXPECT_EQ(diff, 0.0) << "2 x 2 resumed";
    }
    EXPECT_LT(diff, 1e-12) << "world " << world;
  }

  for (const int stages : {1, 4}) {
    expect_refused_on_four_ranks(
        TrainerOptions(resumed).pipeline_parallel(stages).micro_batches(stages > 1 ? 2 : 1),
        "checkpoint '" + last + "': written with pipeline_parallel 2, resumed with " +
            std::to_string(stages));
  }
}

INSTANTIATE_TEST_SUITE_P(Strategies, TrainerPipelineCheckpoints,
                         ::testing::Values(StrategyKind::kDdp, StrategyKind::kZero1),
                         [](const auto& info) { return std::string(to_string(info.param)); });

// The names of the files in `dir` that end with ".ckpt", sorted.
std::vector<std::string> checkpoints_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".ckpt") == 0) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// max_steps inside the second epoch and a ModelCheckpoint on val_loss (its saves are collectives of every
// rank, decided from callback_metrics(), which every stage shares): 2 data x 2 stages end where one process
// does, at the same step, and save the same checkpoints.
TEST(TrainerPipelineCallbacks, MaxStepsAndModelCheckpointAsOneProcess) {
  const std::string dir = ::testing::TempDir() + "pp_callbacks";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/one");
  std::filesystem::create_directories(dir + "/pp");
  const auto checkpoint = [](const std::string& path) {
    return [path] {
      return std::make_shared<ModelCheckpoint>(ModelCheckpointOptions().dirpath(path).monitor("val_loss"));
    };
  };
  const auto options = TrainerOptions().seed(3).max_epochs(3).max_steps(6);
  const Trained one = fit_gpt(1, 8, options, 0.0, checkpoint(dir + "/one"));
  const Trained piped = fit_gpt(4, 4, TrainerOptions(options).pipeline_parallel(2).micro_batches(2), 0.0,
                                checkpoint(dir + "/pp"));
  EXPECT_EQ(one.result.global_step, 6);
  EXPECT_EQ(piped.result.global_step, 6);
  EXPECT_EQ(piped.result.stop_reason, "max_steps");
  for (int r = 0; r < 4; ++r)
    EXPECT_LT(max_diff(piped.whole[static_cast<size_t>(r)], one.whole[0]), 1e-12) << "rank " << r;
  EXPECT_FALSE(checkpoints_in(dir + "/one").empty());
  EXPECT_EQ(checkpoints_in(dir + "/pp"), checkpoints_in(dir + "/one"));
}

// A loop of the program's own under the Accelerator on `world` thread ranks: LitGpt's Gpt (SGD, lr 0.5,
// momentum 0.9) prepared under pipeline_parallel `stages` (micro-batches 2; 1 stage: plain DDP, model(x)
// and backward()), `batch` windows per data-parallel rank, two micro-steps accumulated and the gradients
// clipped at 0.5, passes [from, to), after load_state(load) and then save_state(save) when given. Rank 0's
// parameters, whole.
struct AcceleratedRun {
  int world = 1;
  int stages = 1;
  int64_t batch = 8;
  int from = 0;
  int to = 2;
  std::string load;
  std::string save;
};

std::map<std::string, at::Tensor> accelerate_gpt(const AcceleratedRun& run) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::map<std::string, at::Tensor> result;
  std::vector<models::Gpt> nets;  // built before the ranks start (the default generator)
  for (int r = 0; r < run.world; ++r) nets.push_back(seeded_gpt());
  const auto loss_of = [](const at::Tensor& logits, const at::Tensor& target) {
    return torch::nn::functional::cross_entropy(logits.flatten(0, -2), target.flatten());
  };
  expect_all_ok(run_ranks(run.world, [&](int rank) {
    auto group =
        comm::init_process_group(lockstep::testing::thread_group_options(rank, run.world, store, "pp-accel"));
    Accelerator accelerator(group, AcceleratorOptions()
                                       .pipeline_parallel(run.stages)
                                       .micro_batches(run.stages > 1 ? 2 : 1)
                                       .gradient_accumulation_steps(2)
                                       .seed(3));
    models::Gpt net = nets[static_cast<size_t>(rank)];
    auto [model, optimizer, loader] = accelerator.prepare(
        net, torch::optim::SGD(net->parameters(), torch::optim::SGDOptions(0.5).momentum(0.9)),
        windows(0, 32, run.batch));
    if (!run.load.empty()) accelerator.load_state(run.load);
    for (int pass = run.from; pass < run.to; ++pass) {
      for (auto& [x, y] : loader) {
        auto scope = accelerator.accumulate(model);
        if (run.stages > 1) {
          accelerator.pipeline_step(model, x, y, loss_of);
        } else {
          accelerator.backward(loss_of(model(x), y));
        }
        accelerator.clip_grad_norm_(0.5);
        optimizer.step();
        optimizer.zero_grad();
      }
    }
    if (!run.save.empty()) accelerator.save_state(run.save);
    {
      const auto whole = accelerator.full_parameters();
      if (rank == 0)
        for (const auto& p : net->named_parameters()) result[p.key()] = p.value().detach().clone();
    }
    accelerator.end_training();
    group.shutdown();
  }));
  return result;
}

// 2 data x 2 stages under the Accelerator end on one process's parameters (the same global batches,
// accumulation and clipping); save_state in one part per stage and load_state resume the second pass
// exactly; model(x) under a pipeline is refused, naming pipeline_step.
TEST(AcceleratorPipelineParallel, ALoopThroughPipelineStepEndsOnOneProcessesParametersAndResumes) {
  const auto one = accelerate_gpt({1, 1, 8, 0, 2, "", ""});
  const auto piped = accelerate_gpt({4, 2, 4, 0, 2, "", ""});
  EXPECT_LT(max_diff(piped, one), 1e-12);
  expect_moved(one);  // the check can fail
  const std::string dir = ::testing::TempDir() + "pp_accelerator_state";
  std::filesystem::remove_all(dir);
  accelerate_gpt({4, 2, 4, 0, 1, "", dir});
  EXPECT_EQ(max_diff(accelerate_gpt({4, 2, 4, 1, 2, dir, ""}), piped), 0.0);

  auto store = c10::make_intrusive<c10d::HashStore>();
  expect_all_ok(run_ranks(2, [&](int rank) {
    auto group =
        comm::init_process_group(lockstep::testing::thread_group_options(rank, 2, store, "pp-misuse"));
    Accelerator accelerator(group, AcceleratorOptions().pipeline_parallel(2));
    models::Gpt net = seeded_gpt();
    auto model = accelerator.prepare(net);
    const std::string error = lockstep::testing::what_of([&] { model(corpus().slice(0, 0, 2)); });
    EXPECT_NE(error.find("call Accelerator::pipeline_step(model, input, target, loss)"), std::string::npos)
        << error;
    accelerator.end_training();
    group.shutdown();
  }));
}

// What a pipeline cannot work with yet is refused before any rank waits, naming the fix.
TEST(TrainerPipelineOptions, WhatItCannotWorkWithIsRefusedNamingTheFix) {
  const auto error = [](const TrainerOptions& options) {
    return lockstep::testing::what_of([&] { options.validate(); });
  };
  const auto pp = TrainerOptions().pipeline_parallel(2);
  EXPECT_NE(error(TrainerOptions(pp).strategy(StrategyKind::kFsdp))
                .find("pipeline_parallel 2 does not work with strategy 'fsdp': the data-parallel dimension "
                      "runs ddp or zero1"),
            std::string::npos);
  EXPECT_NE(error(TrainerOptions(pp).precision(Precision::kBf16Mixed))
                .find("pipeline_parallel 2 does not work with precision 'bf16-mixed'"),
            std::string::npos);
  EXPECT_NE(error(TrainerOptions(pp).tensor_parallel(2))
                .find("pipeline_parallel 2 does not work with tensor_parallel 2"),
            std::string::npos);
  EXPECT_NE(error(TrainerOptions(pp).cuda_graphs(true)).find("does not work with cuda_graphs"),
            std::string::npos);
  EXPECT_NE(error(TrainerOptions().micro_batches(4)).find("micro_batches 4 cuts a batch for a pipeline"),
            std::string::npos);
  EXPECT_NE(error(TrainerOptions().pipeline_parallel(0)).find("pipeline_parallel must be >= 1, got 0"),
            std::string::npos);
  EXPECT_NE(error(TrainerOptions(pp).pipeline_cut({1, 2}))
                .find("pipeline_cut names 2 stage start(s); pipeline_parallel 2 needs 1"),
            std::string::npos);
  EXPECT_NE(error(TrainerOptions(pp).strategy(DdpStrategy().find_unused_parameters(true)))
                .find("does not work with DDP's find_unused_parameters, comm_hook or bucket_cap_mb"),
            std::string::npos);
  EXPECT_NE(error(TrainerOptions().pipeline_cut({3}))
                .find("pipeline_cut cuts a pipeline, and pipeline_parallel is 1"),
            std::string::npos);
  EXPECT_EQ(error(TrainerOptions(pp).micro_batches(8).strategy(StrategyKind::kZero1).pipeline_cut({3})), "");
}

// A module that does not say how to run its parts (pipeline_forward, pipeline_loss) is told what to
// override; the other stages fail at the collective timeout, naming the link they waited on.
class LitGptWithoutPipeline : public LitGpt {
 public:
  at::Tensor pipeline_forward(const at::Tensor& ids) override {
    return TrainModuleBase::pipeline_forward(ids);
  }
};

TEST(TrainerPipelineModule, AModuleWithoutPipelineForwardIsToldWhatToOverride) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  QuietOutput quiet;
  std::vector<std::shared_ptr<LitGptWithoutPipeline>> modules;
  for (int r = 0; r < 2; ++r) modules.push_back(std::make_shared<LitGptWithoutPipeline>());
  expect_all_ok(run_ranks(2, [&](int rank) {
    auto group = comm::init_process_group(lockstep::testing::thread_group_options(rank, 2, store, "pp-module")
                                              .collective_timeout(std::chrono::seconds(2)));
    Corpus data(4);
    Trainer trainer(TrainerOptions().pipeline_parallel(2).process_group(&group).out(quiet.file));
    const std::string error =
        lockstep::testing::what_of([&] { trainer.fit(modules[static_cast<size_t>(rank)], data); });
    // Stage 0 throws at its first forward; stage 1, waiting for its activation, at the timeout.
    if (rank == 0) {
      EXPECT_NE(error.find("override pipeline_forward"), std::string::npos) << error;
    } else {
      EXPECT_NE(error.find("pp-next"), std::string::npos) << error;
    }
    group.shutdown();
  }));
}

}  // namespace
}  // namespace lockstep::train::pipeline_parallel
