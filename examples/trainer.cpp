// Lightning's Trainer in the seeds' style (000, part 1: "PyTorch Lightning"), in C++ with lockstep: the
// model and its steps in a TrainModule, the data in a DataModule, and a Trainer whose options alone decide
// how many ranks train. Started plainly, the Trainer starts the ranks itself:
//
//   build/examples/trainer --devices 2 --max-epochs 3
//
// and under a launcher (lockstep run, srun, mpirun) it joins the ranks that launcher started:
//
//   build/lockstep run --nproc-per-node 2 --standalone -- build/examples/trainer --max-epochs 3
//
// Options: --devices N, --max-epochs N, --limit-train-batches N|F, --precision 32|bf16-mixed,
// --ckpt-dir DIR (top-3 checkpoints by val_loss, early stopping on it), --data-dir DIR.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <stdexcept>
#include <string>

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>

#include "lockstep/data/idx_dataset.h"
#include "lockstep/train/early_stopping.h"
#include "lockstep/train/error_message.h"
#include "lockstep/train/lr_monitor.h"
#include "lockstep/train/model_checkpoint.h"
#include "lockstep/train/trainer.h"

namespace {

using lockstep::train::LogOptions;

// The seeds' SimpleNet (784-256-128-10) with its training and validation steps.
class LitSimpleNet : public lockstep::train::TrainModule {
 public:
  LitSimpleNet()
      : fc1(register_module("fc1", torch::nn::Linear(28 * 28, 256))),
        fc2(register_module("fc2", torch::nn::Linear(256, 128))),
        fc3(register_module("fc3", torch::nn::Linear(128, 10))) {}

  at::Tensor forward(const at::Tensor& x) { return fc3(torch::relu(fc2(torch::relu(fc1(x.flatten(1)))))); }

  at::Tensor training_step(const lockstep::data::Batch& batch, int64_t /*batch_idx*/) override {
    at::Tensor loss = torch::nn::functional::cross_entropy(forward(batch.data), batch.target);
    log("train_loss", loss, LogOptions().prog_bar(true).sync_dist(true));
    return loss;
  }

  void validation_step(const lockstep::data::Batch& batch, int64_t /*batch_idx*/) override {
    const at::Tensor logits = forward(batch.data);
    log("val_loss", torch::nn::functional::cross_entropy(logits, batch.target),
        LogOptions().prog_bar(true).sync_dist(true));
    log("val_acc", logits.argmax(1).eq(batch.target).to(torch::kFloat).mean(),
        LogOptions().prog_bar(true).sync_dist(true));
  }

  lockstep::train::OptimizerConfig configure_optimizers() override {
    return {std::make_unique<torch::optim::Adam>(parameters(), torch::optim::AdamOptions(1e-3)),
            std::nullopt};
  }

  std::string checkpoint_name() const override { return "LitSimpleNet"; }

  torch::nn::Linear fc1, fc2, fc3;
};

// Fashion-MNIST from Debian's dataset-fashion-mnist, normalised as torchvision users do.
class FashionMnist : public lockstep::train::DataModule {
 public:
  explicit FashionMnist(std::string dir) : dir_(std::move(dir)) {}

  // Runs once per node before setup(): here only a check, where a Python script would download.
  void prepare_data() override {
    if (!std::filesystem::exists(std::filesystem::path(dir_) / "train-images-idx3-ubyte.gz")) {
      throw std::runtime_error("no Fashion-MNIST in '" + dir_ +
                               "': apt-get install dataset-fashion-mnist, or pass --data-dir");
    }
  }
  void setup() override {
    using lockstep::data::IdxDataset;
    train_ = std::make_shared<IdxDataset>(IdxDataset::from_dir(dir_, lockstep::data::Split::kTrain));
    val_ = std::make_shared<IdxDataset>(IdxDataset::from_dir(dir_, lockstep::data::Split::kTest));
  }
  std::shared_ptr<const lockstep::data::TensorDataset> train_dataset() override { return train_; }
  std::shared_ptr<const lockstep::data::TensorDataset> val_dataset() override { return val_; }
  lockstep::data::LoaderOptions train_loader_options() override {
    return lockstep::data::LoaderOptions(/*batch_size=*/64)
        .transform(lockstep::data::TransformOptions().mean({0.2860}).std({0.3530}));
  }

 private:
  std::string dir_;
  std::shared_ptr<const lockstep::data::TensorDataset> train_, val_;
};

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string dir = "/usr/share/datasets/fashion-mnist";
    std::string ckpt_dir;
    auto options = lockstep::train::TrainerOptions().max_epochs(3);
    for (int i = 1; i + 1 < argc; i += 2) {
      const std::string flag = argv[i], value = argv[i + 1];
      if (flag == "--devices") {
        options.devices(std::stoi(value));
      } else if (flag == "--max-epochs") {
        options.max_epochs(std::stoll(value));
      } else if (flag == "--limit-train-batches") {
        options.limit_train_batches(lockstep::train::BatchLimit::parse(flag, value));
      } else if (flag == "--limit-val-batches") {
        options.limit_val_batches(lockstep::train::BatchLimit::parse(flag, value));
      } else if (flag == "--precision") {
        options.precision(lockstep::train::parse_precision(value));
      } else if (flag == "--ckpt-dir") {
        ckpt_dir = value;
      } else if (flag == "--data-dir") {
        dir = value;
      } else {
        throw std::invalid_argument("unknown option '" + flag +
                                    "' (see the comment at the top of examples/trainer.cpp)");
      }
    }
    if (!ckpt_dir.empty()) {
      // Lightning's habit: keep the 3 best epochs by val_loss, stop when it has not improved for 2.
      options.ckpt_dir(ckpt_dir)
          .callback(
              std::make_shared<lockstep::train::ModelCheckpoint>(lockstep::train::ModelCheckpointOptions()
                                                                     .monitor("val_loss")
                                                                     .filename("{epoch:02d}-{val_loss:.3f}")
                                                                     .save_top_k(3)))
          .callback(std::make_shared<lockstep::train::EarlyStopping>(
              lockstep::train::EarlyStoppingOptions("val_loss").patience(2)))
          .callback(std::make_shared<lockstep::train::LearningRateMonitor>());
    }

    FashionMnist data(dir);
    lockstep::train::Trainer trainer(options);
    const auto result = trainer.fit(std::make_shared<LitSimpleNet>(), data);
    if (trainer.rank() == 0 && !result.epochs.empty()) {
      std::printf("trainer example: %zu epoch(s), val_acc %.4f\n", result.epochs.size(),
                  result.epochs.back().val_acc);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainer example: %s\n", lockstep::train::error_message(e).c_str());
    return 1;
  }
}
