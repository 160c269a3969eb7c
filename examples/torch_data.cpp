// An existing LibTorch input pipeline (torch::data: a Dataset class of the user's, .map(Normalize<>),
// .map(Stack<>), make_data_loader) made distributed by changing only how it is sharded and wrapped, on
// Fashion-MNIST from Debian's dataset-fashion-mnist package:
//
//   build/examples/torch_data --devices 2                                        # the Trainer
//   build/lockstep run --nproc-per-node 2 --standalone -- build/examples/torch_data --style loop
//
// --style trainer: the same torch::data dataset, wrapped by lockstep::data::from_torch, is what a
//   BasicDataModule<torch::data::Example<>> returns; the Trainer shards it with PyTorch's
//   DistributedSampler indices, builds batches in worker threads, checkpoints and resumes mid-epoch.
// --style loop: the user's own loop stays; its torch::data::samplers::RandomSampler becomes
//   lockstep::data::TorchDistributedSampler (set_epoch each epoch) and the model is wrapped in
//   lockstep::ddp::DistributedDataParallel. Those two lines are the whole change.
// At the end rank 0 prints the validation cross-entropy next to the trivial baseline's (ln 10: the
// uniform guess over the ten balanced classes): the model must beat it.
//
// Options: --style trainer|loop, --devices N (trainer), --max-epochs N (default 1), --max-steps N,
// --batch-size B (per rank, default 64), --limit-train-batches N, --limit-val-batches N, --ckpt-dir DIR,
// --resume PATH, --seed S, --data-dir DIR (default /usr/share/datasets/fashion-mnist).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include <torch/data/dataloader.h>
#include <torch/data/datasets/base.h>
#include <torch/data/transforms/stack.h>
#include <torch/data/transforms/tensor.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/utils.h>

#include "example_flags.h"
#include "lockstep/comm/process_group.h"
#include "lockstep/data/idx_dataset.h"
#include "lockstep/data/torch_data.h"
#include "lockstep/ddp/distributed_data_parallel.h"
#include "lockstep/env/environment.h"
#include "lockstep/train/safetensors.h"
#include "lockstep/train/trainer.h"

namespace {

namespace data = lockstep::data;
namespace train = lockstep::train;
using Example = torch::data::Example<>;

// ---- the user's pipeline, as it was before lockstep

/// Fashion-MNIST as a torch::data dataset: image i as float [1, 28, 28] in [0, 1], its label. (The files
/// are read with lockstep's IDX reader here; any reader of the user's would do.)
class FashionMnist : public torch::data::datasets::Dataset<FashionMnist> {
 public:
  FashionMnist(const std::string& dir, bool train)
      : images_(data::IdxDataset::from_dir(dir, train ? data::Split::kTrain : data::Split::kTest)) {}
  Example get(size_t index) override {
    const auto i = static_cast<int64_t>(index);
    return {images_.images()[i].to(at::kFloat).div(255), images_.labels()[i]};
  }
  torch::optional<size_t> size() const override { return static_cast<size_t>(images_.size()); }

 private:
  data::IdxDataset images_;  // cheap to copy: the tensors are shared
};

/// The pipeline: normalised with Fashion-MNIST's mean and std, stacked into batches.
auto pipeline(const std::string& dir, bool train) {
  return FashionMnist(dir, train)
      .map(torch::data::transforms::Normalize<>(0.2860, 0.3530))
      .map(torch::data::transforms::Stack<>());
}

struct NetImpl : torch::nn::Module {
  NetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(784, 128))),
        fc2(register_module("fc2", torch::nn::Linear(128, 10))) {}
  at::Tensor forward(const at::Tensor& x) { return fc2(torch::relu(fc1(x.flatten(1)))); }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Net);

// ---- the Trainer

class LitNet : public train::BasicTrainModule<Example> {
 public:
  LitNet() : net(register_module("net", Net())) {}
  at::Tensor training_step(const Example& batch, int64_t) override {
    at::Tensor loss = torch::nn::functional::cross_entropy(net(batch.data), batch.target);
    log("train_loss", loss, train::LogOptions().sync_dist(true).prog_bar(true));
    return loss;
  }
  void validation_step(const Example& batch, int64_t) override {
    const at::Tensor logits = net(batch.data);
    log("val_loss", torch::nn::functional::cross_entropy(logits, batch.target),
        train::LogOptions().sync_dist(true).prog_bar(true));
    log("val_acc", logits.argmax(1).eq(batch.target).to(at::kFloat).mean(),
        train::LogOptions().sync_dist(true).prog_bar(true));
  }
  train::OptimizerConfig configure_optimizers() override {
    return {std::make_unique<torch::optim::Adam>(parameters(), torch::optim::AdamOptions(1e-3)),
            std::nullopt};
  }
  std::string checkpoint_name() const override { return "TorchDataNet"; }
  Net net;
};

class FashionData : public train::BasicDataModule<Example> {
 public:
  FashionData(std::string dir, int64_t batch) : dir_(std::move(dir)), batch_(batch) {}
  data::DataSource<Example> train_data() override {
    return {data::from_torch(pipeline(dir_, true), "Fashion-MNIST train"),
            data::LoaderOptions(batch_).num_workers(2).drop_last(true)};
  }
  std::optional<data::DataSource<Example>> val_data() override {
    return data::DataSource<Example>(data::from_torch(pipeline(dir_, false), "Fashion-MNIST test"),
                                     data::LoaderOptions(batch_).num_workers(2));
  }

 private:
  std::string dir_;
  int64_t batch_;
};

void fit_with_trainer(const train::TrainerOptions& options, int64_t batch, const std::string& dir) {
  FashionData data(dir, batch);
  torch::manual_seed(0);  // the same initial weights whatever the world size (DDP broadcasts rank 0's)
  auto model = std::make_shared<LitNet>();
  train::Trainer trainer(options);
  const train::TrainerResult result = trainer.fit(model, data);
  if (trainer.rank() == 0 && !result.epochs.empty()) {
    std::printf(
        "torch_data quality: val_loss %.4f baseline %.4f (cross-entropy; the baseline guesses "
        "uniformly), val_acc %.4f, %lld step(s) on %d rank(s)\n",
        result.epochs.back().val_loss, std::log(10.0), result.epochs.back().val_acc,
        static_cast<long long>(result.global_step), trainer.world_size());
  }
}

// ---- the user's own loop, distributed

void fit_in_own_loop(const train::TrainerOptions& options, int64_t batch, const std::string& dir) {
  auto group = lockstep::comm::init_process_group(
      lockstep::comm::ProcessGroupOptions::from_environment(lockstep::env::from_env()));
  torch::manual_seed(0);
  Net net;
  lockstep::ddp::DistributedDataParallel<Net> model(net, group);  // changed: wrapped
  torch::optim::Adam optimizer(net->parameters(), torch::optim::AdamOptions(1e-3));
  auto train_set = pipeline(dir, true);
  // changed: was torch::data::samplers::RandomSampler(train_set.size().value())
  data::TorchDistributedSampler sampler(
      static_cast<int64_t>(train_set.size().value()),
      data::DistributedSamplerOptions(group.size(), group.rank()).seed(options.seed()));
  const int64_t limit = options.limit_train_batches().is_fraction ? -1 : options.limit_train_batches().count;
  int64_t steps = 0;
  for (int64_t epoch = 0; epoch < options.max_epochs(); ++epoch) {
    sampler.set_epoch(epoch);  // changed: a new shuffle each epoch, the same on every rank
    auto loader = torch::data::make_data_loader(train_set, sampler,
                                                torch::data::DataLoaderOptions(batch).drop_last(true));
    int64_t b = 0;
    for (auto& example : *loader) {
      if (limit >= 0 && b++ == limit) break;
      optimizer.zero_grad();
      torch::nn::functional::cross_entropy(model.forward(example.data), example.target).backward();
      optimizer.step();
      ++steps;
    }
  }
  if (group.rank() == 0) {
    torch::NoGradGuard no_grad;
    net->eval();
    double loss = 0, correct = 0, count = 0;
    auto val = torch::data::make_data_loader(pipeline(dir, false), torch::data::DataLoaderOptions(1000));
    for (auto& example : *val) {
      const at::Tensor logits = net(example.data);
      loss +=
          torch::nn::functional::cross_entropy(
              logits, example.target, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
              .item<double>();
      correct += logits.argmax(1).eq(example.target).sum().item<double>();
      count += static_cast<double>(example.target.size(0));
    }
    if (!options.ckpt_dir().empty()) {
      std::filesystem::create_directories(options.ckpt_dir());
      train::save_module_safetensors(
          (std::filesystem::path(options.ckpt_dir()) / "final.safetensors").string(), *net,
          {{"format", "pt"}});
    }
    std::printf(
        "torch_data quality: val_loss %.4f baseline %.4f (cross-entropy; the baseline guesses uniformly), "
        "val_acc %.4f, %lld step(s) on %d rank(s)\n",
        loss / count, std::log(10.0), correct / count, static_cast<long long>(steps), group.size());
  }
  group.barrier();
  group.shutdown();
}

}  // namespace

int main(int argc, char** argv) {
  return examples::run_example("torch_data", [&] {
    auto options = train::TrainerOptions().max_epochs(1).seed(1);
    int64_t batch = 64;
    const auto extra = examples::parse_flags(
        argc, argv, options, batch, {{"data-dir", "/usr/share/datasets/fashion-mnist"}, {"style", "trainer"}},
        "torch_data");
    if (extra.at("style") == "trainer") {
      fit_with_trainer(options, batch, extra.at("data-dir"));
    } else if (extra.at("style") == "loop") {
      fit_in_own_loop(options, batch, extra.at("data-dir"));
    } else {
      throw std::invalid_argument("--style '" + extra.at("style") +
                                  "' is not known (expected trainer or loop)");
    }
  });
}
