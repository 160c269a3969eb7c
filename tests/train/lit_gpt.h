// The GPT that the Trainer's tests of model parallelism fit (test_trainer_tensor_parallel.cpp,
// test_trainer_pipeline_parallel.cpp): a float64 models::Gpt from a fixed seed over a fixed corpus of token
// windows, whole, split over the tensor-parallel group (configure_model), or cut into pipeline stages; and
// the checks on checkpoint parts both make.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "../comm/thread_group.h"
#include "../support/error_of.h"
#include "lockstep/comm/device_mesh.h"
#include "lockstep/models/gpt.h"
#include "lockstep/models/tensor_parallel_gpt.h"
#include "lockstep/models/vocab_parallel.h"
#include "lockstep/train/train_module.h"
#include "lockstep/train/trainer.h"

namespace lockstep::train::gpt_fixture {

using lockstep::testing::lock_default_generator;
using Windows = std::tuple<at::Tensor, at::Tensor>;  // input ids [L], the next ids [L]

constexpr int64_t kVocab = 24;  // divisible by 1, 2 and 4
constexpr int64_t kLength = 8;
constexpr int64_t kWindows = 40;  // 32 train, 8 validation
constexpr uint64_t kSeed = 17;

inline models::GptOptions gpt_options() {
  return models::GptOptions::tiny().vocab_size(kVocab).context(kLength).heads(4).embedding(16).layers(2);
}

// Windows of kLength + 1 ids, drawn once (thread ranks share the default generator).
inline const at::Tensor& corpus() {
  static const at::Tensor tokens = [] {
    auto lock = lock_default_generator(5);
    return at::randint(kVocab, {kWindows, kLength + 1}, at::kLong);
  }();
  return tokens;
}

// Windows [begin, end) of the corpus, `batch` a batch.
inline data::DataSource<Windows> windows(int64_t begin, int64_t end, int64_t batch) {
  const at::Tensor rows = corpus().slice(0, begin, end);
  return {data::make_dataset(rows.size(0),
                             [rows](int64_t i) {
                               return Windows{rows[i].slice(0, 0, kLength), rows[i].slice(0, 1)};
                             }),
          data::LoaderOptions(batch)};
}

class Corpus : public BasicDataModule<Windows> {
 public:
  explicit Corpus(int64_t batch) : batch_(batch) {}
  data::DataSource<Windows> train_data() override { return windows(0, 32, batch_); }
  std::optional<data::DataSource<Windows>> val_data() override {
    return windows(32, kWindows, batch_).shuffle(false);
  }

 private:
  int64_t batch_;
};

// A float64 Gpt from kSeed (under the tests' generator lock).
inline models::Gpt seeded_gpt() {
  auto lock = lock_default_generator(kSeed);
  models::Gpt model(gpt_options());
  model->to(at::kDouble);
  return model;
}

// A float64 Gpt from kSeed; under tensor parallelism, its slices (configure_model).
class LitGpt : public BasicTrainModule<Windows> {
 public:
  /// SGD at lr 0.5 with `momentum` (checkpoints then carry optimizer state).
  explicit LitGpt(double momentum = 0.0)
      : full_(register_module("model", seeded_gpt())), momentum_(momentum) {}

  void configure_model() override {
    if (device_mesh() == nullptr || device_mesh()->tensor_parallel() == 1) return;
    split_ = replace_module("model", models::TensorParallelGpt(*full_, device_mesh()->tp()));
  }

  at::Tensor training_step(const Windows& batch, int64_t) override {
    at::Tensor loss = loss_of(logits(std::get<0>(batch)), std::get<1>(batch));
    log("train_loss", loss, LogOptions().sync_dist(true));
    return loss;
  }

  void validation_step(const Windows& batch, int64_t) override {
    const at::Tensor out = logits(std::get<0>(batch)).flatten(0, -2);
    const at::Tensor target = std::get<1>(batch).flatten();
    log("val_loss", loss_of(out, target), LogOptions().sync_dist(true));
    const at::Tensor predicted =
        split_ ? models::vocab_parallel_argmax(out, device_mesh()->tp()) : out.argmax(-1);
    log("val_acc", predicted.eq(target).to(at::kDouble).mean(), LogOptions().sync_dist(true));
  }

  // Pipeline parallelism (TrainerOptions::pipeline_parallel): the whole Gpt's forward, cut by the Trainer.
  models::Staged* staged_model() override { return full_.get(); }
  std::pair<at::Tensor, at::Tensor> pipeline_input(const Windows& batch) override {
    return {std::get<0>(batch), std::get<1>(batch)};
  }
  at::Tensor pipeline_forward(const at::Tensor& ids) override { return full_->forward(ids); }
  at::Tensor pipeline_loss(const at::Tensor& out, const at::Tensor& target) override {
    return loss_of(out, target);
  }

  OptimizerConfig configure_optimizers() override {
    return {
        std::make_unique<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.5).momentum(momentum_)),
        std::nullopt};
  }

  // The parameters whole, under Gpt's names: a collective of the tensor-parallel group.
  std::map<std::string, at::Tensor> whole() {
    std::map<std::string, at::Tensor> out;
    if (split_) {
      for (auto& [name, value] : split_->full_parameters()) out[name] = value.detach().clone();
    } else {
      for (const auto& p : full_->named_parameters()) out[p.key()] = p.value().detach().clone();
    }
    return out;
  }

 private:
  at::Tensor logits(const at::Tensor& ids) { return split_ ? split_->forward(ids) : full_->forward(ids); }
  at::Tensor loss_of(const at::Tensor& out, const at::Tensor& target) const {
    if (split_) {
      return models::vocab_parallel_cross_entropy(out.flatten(0, -2), target.flatten(), device_mesh()->tp())
          .mean();
    }
    return torch::nn::functional::cross_entropy(out.flatten(0, -2), target.flatten());
  }

  models::Gpt full_{nullptr};
  models::TensorParallelGpt split_{nullptr};
  double momentum_ = 0.0;
};

struct QuietOutput {
  std::FILE* file = std::fopen("/dev/null", "w");
  ~QuietOutput() { std::fclose(file); }
};

// The names beside `path` that start with its name and ".tp" (its tensor-parallel parts, their shards),
// sorted.
inline std::vector<std::string> names_beside(const std::string& path) {
  const std::filesystem::path target(path);
  const std::string prefix = target.filename().string() + ".tp";
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(target.parent_path())) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The path of tensor-parallel rank r's part of the checkpoint `path` (PATH.tp<r>.<save>, not a shard of
// it): there must be exactly one.
inline std::string only_part(const std::string& path, int r) {
  const std::string prefix =
      std::filesystem::path(path).filename().string() + ".tp" + std::to_string(r) + ".";
  std::vector<std::string> parts;
  for (const std::string& name : names_beside(path))
    if (name.rfind(prefix, 0) == 0 && name.find('.', prefix.size()) == std::string::npos)
      parts.push_back(name);
  if (parts.size() != 1) {
    ADD_FAILURE() << "not one part " << r << " of " << path << ": " << ::testing::PrintToString(parts);
    return "";
  }
  return (std::filesystem::path(path).parent_path() / parts[0]).string();
}

// The largest difference between two models' parameters of the same names.
inline double max_diff(const std::map<std::string, at::Tensor>& a,
                       const std::map<std::string, at::Tensor>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0.0;
  for (const auto& [name, value] : a)
    worst = std::max(worst, (b.at(name) - value).abs().max().item<double>());
  return worst;
}

/// A model-parallel run's epochs against one process's: the same sample counts, losses (1e-12) and
/// accuracy, on `world` ranks, and as many optimizer steps.
inline void expect_same_epochs(const TrainerResult& got, const TrainerResult& want, int world) {
  ASSERT_EQ(got.epochs.size(), want.epochs.size());
  for (size_t e = 0; e < got.epochs.size(); ++e) {
    const EpochMetrics& a = got.epochs[e];
    const EpochMetrics& b = want.epochs[e];
    EXPECT_EQ(a.train_samples, b.train_samples) << "epoch " << e;
    EXPECT_EQ(a.val_samples, b.val_samples) << "epoch " << e;
    EXPECT_EQ(a.world_size, world);
    EXPECT_NEAR(a.train_loss, b.train_loss, 1e-12) << "epoch " << e;
    EXPECT_NEAR(a.val_loss, b.val_loss, 1e-12) << "epoch " << e;
    EXPECT_DOUBLE_EQ(a.val_acc, b.val_acc) << "epoch " << e;
  }
  EXPECT_EQ(got.global_step, want.global_step);
}

/// That a comparison with `trained` can fail: training moved its parameters from LitGpt's initial ones.
inline void expect_moved(const std::map<std::string, at::Tensor>& trained) {
  EXPECT_GT((trained.at("wte.weight") - LitGpt().whole().at("wte.weight")).abs().max().item<double>(), 1e-3);
}

/// fit() of LitGpt on 4 thread ranks with `options` (4 windows a batch per data-parallel rank) throws
/// std::invalid_argument on every rank, whose message holds `expected`.
inline void expect_refused_on_four_ranks(const TrainerOptions& options, const std::string& expected) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  QuietOutput quiet;
  std::vector<std::shared_ptr<LitGpt>> modules;
  for (int r = 0; r < 4; ++r) modules.push_back(std::make_shared<LitGpt>());
  lockstep::testing::expect_all_ok(lockstep::testing::run_ranks(4, [&](int rank) {
    auto group = comm::init_process_group(lockstep::testing::thread_group_options(rank, 4, store, "refused"));
    Corpus data(4);
    Trainer trainer(TrainerOptions(options).process_group(&group).out(quiet.file));
    const std::string error = lockstep::testing::invalid_argument_of(
        [&] { trainer.fit(modules[static_cast<size_t>(rank)], data); });
    EXPECT_NE(error.find(expected), std::string::npos) << "rank " << rank << ": " << error;
    group.shutdown();
  }));
}

}  // namespace lockstep::train::gpt_fixture
