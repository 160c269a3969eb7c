#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include "lockstep/data/batch.h"
#include "lockstep/data/loader.h"
#include "lockstep/data/shard_loader.h"
#include "lockstep/data/tensor_dataset.h"
#include "lockstep/detail/option.h"
#include "lockstep/models/staged.h"
#include "lockstep/optim/lr_schedule.h"

namespace torch::optim {
class Optimizer;
}
namespace lockstep::comm {
class DeviceMesh;
}

namespace lockstep::train {

/// How TrainModule::log treats a value (Lightning's self.log arguments).
class LogOptions {
 public:
  /// Also show the value on the progress bar and the epoch line.
  LOCKSTEP_OPTION(LogOptions, bool, prog_bar)
  /// Reduce over all ranks at the epoch's end: the epoch value is then the weighted mean over every
  /// rank's batches. Without it the value recorded is rank 0's own.
  LOCKSTEP_OPTION(LogOptions, bool, sync_dist)
  /// The weight of this value in the epoch mean; 0 (the default) takes the current batch's size, so that
  /// the epoch value is a mean per sample, whatever the world size (Lightning's default too).
  LOCKSTEP_OPTION(LogOptions, int64_t, batch_size)

 private:
  bool prog_bar_ = false;
  bool sync_dist_ = false;
  int64_t batch_size_ = 0;
};

/// The values logged during one epoch, each a weighted mean: what TrainModule::log fills and the Trainer
/// reduces, prints and records. Names logged from training_step and from validation_step share one table.
class LoggedMetrics {
 public:
  struct Entry {
    double weighted_sum = 0.0;
    double weight = 0.0;
    double last = 0.0;  ///< the latest value (step records)
    bool sync_dist = false;
    bool prog_bar = false;
    double mean() const { return weight > 0 ? weighted_sum / weight : 0.0; }
  };

  /// Adds `value` with `weight`. Throws std::invalid_argument when `name` is empty, the weight is not
  /// positive, or a name changes its sync_dist between calls.
  void add(const std::string& name, double value, double weight, bool sync_dist, bool prog_bar);
  void clear() {
    entries_.clear();
    order_.clear();
    samples = 0;
  }
  const std::map<std::string, Entry>& entries() const { return entries_; }
  /// Names in the order they were first logged (the epoch line prints them so).
  const std::vector<std::string>& order() const { return order_; }

  /// The table as JSON (checkpoints keep every rank's, to resume an epoch's means exactly) and back.
  std::string to_json() const;
  static LoggedMetrics from_json(const std::string& text);

  /// Training samples this rank has run this epoch (the Trainer counts them; checkpoints keep them).
  int64_t samples = 0;

 private:
  std::map<std::string, Entry> entries_;
  std::vector<std::string> order_;
};

/// What configure_optimizers returns: the optimizer, and optionally the learning rate per optimizer step
/// (the Trainer sets it on every parameter group before each step).
struct OptimizerConfig {
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::optional<optim::LrSchedule> lr_schedule;
};

namespace detail {
/// What TrainModule::log was given while the Trainer captured a CUDA graph (TrainerOptions::cuda_graphs):
/// kept, not read, and added to the epoch's table at each replay of the graph.
struct CapturedLog {
  std::string name;
  at::Tensor value;     // log(name, tensor): what the graph writes at each replay
  double number = 0.0;  // log(name, double): the same at each replay
  double weight = 1.0;
  bool sync_dist = false;
  bool prog_bar = false;
};
}  // namespace detail

/// What the Trainer knows before training starts, for configure_optimizers (Lightning's
/// trainer.estimated_stepping_batches and friends).
struct TrainingPlan {
  /// The data-parallel ranks (the world, or world / (T × P) under tensor and pipeline parallelism) and this
  /// rank among them.
  int world_size = 1;
  int rank = 0;
  /// TrainerOptions::tensor_parallel, and this rank's position in its tensor-parallel group.
  int tensor_parallel = 1;
  int tp_rank = 0;
  /// TrainerOptions::pipeline_parallel, and this rank's stage.
  int pipeline_parallel = 1;
  int pp_rank = 0;
  int64_t max_epochs = 1;
  int64_t batches_per_epoch = 0;  ///< this rank's training batches per epoch (after limit_train_batches)
  int64_t steps_per_epoch = 0;  ///< optimizer steps per epoch (batches / accumulate_grad_batches, rounded up)
  int64_t accumulate_grad_batches = 1;
  int64_t batch_size = 0;  ///< per rank
  /// Samples per optimizer step over all ranks: batch_size x world_size x accumulate_grad_batches.
  int64_t global_batch_size() const { return batch_size * world_size * accumulate_grad_batches; }
  /// Optimizer steps of the whole run: steps_per_epoch x max_epochs (or max_steps when smaller).
  int64_t estimated_stepping_batches = 0;
  /// This rank's device: "cpu", "cuda:0", ... (TrainerOptions::accelerator).
  std::string device = "cpu";
};

namespace detail {
/// Where the Trainer is, as the TrainModule reads it: one per fit, written by the Trainer only, read by
/// the module through a `const` share of it (current_epoch(), global_step(), plan(), log()). A module
/// that has not been fitted reads these defaults; after a fit it reads that fit's last values.
struct StepState {
  int64_t epoch = 0;       ///< the epoch in progress (0-based)
  int64_t step = 0;        ///< optimizer steps so far
  int64_t batch_size = 0;  ///< samples of the batch in progress: log()'s default weight
  TrainingPlan plan;       ///< filled before configure_optimizers
  /// While the Trainer captures a CUDA graph: where log() keeps what it is given (null otherwise).
  std::vector<CapturedLog>* captured_logs = nullptr;
  /// TrainerOptions::tensor_parallel or pipeline_parallel > 1: the run's mesh, from configure_model() to the
  /// fit's end.
  comm::DeviceMesh* mesh = nullptr;
};

/// The Trainer's side of a TrainModuleBase, in one place (src/train/train_module_access.h).
struct TrainModuleAccess;
}  // namespace detail

/// What every TrainModule has, whatever its batch type: logging, the position, the optimizers. The
/// Trainer holds modules by this base; derive from BasicTrainModule<B> (or TrainModule) instead.
class TrainModuleBase : public torch::nn::Module {
 public:
  /// Called once on every rank, before the model is moved to its device and wrapped (Lightning's
  /// configure_model): build here what needs the run's groups, such as tensor-parallel layers over
  /// device_mesh()->tp() (models::TensorParallelGpt). Default: nothing.
  virtual void configure_model() {}
  /// Called once, after the model is wrapped and, when resuming, before the optimizer state is loaded.
  /// plan() is valid here.
  virtual OptimizerConfig configure_optimizers() = 0;
  /// The name checkpoints record and check on resume: a checkpoint of another module is refused.
  virtual std::string checkpoint_name() const { return "TrainModule"; }
  /// strategy fsdp: the Staged model to shard (models/staged.h), when it is not one of this module's
  /// submodules (null: FSDP looks among them). A model not built in stages: a models::SingleStage around
  /// it, through which training_step and validation_step call it (one FSDP unit, the whole model).
  virtual models::Staged* staged_model() { return nullptr; }

  // ---- pipeline parallelism (TrainerOptions::pipeline_parallel > 1): torch.distributed.pipelining's
  // split of a step into the model and a loss function. The Trainer calls these instead of training_step.
  /// The model's forward on a micro-batch of inputs (BasicTrainModule::pipeline_input's, cut along dim 0),
  /// through staged_model()'s stages: every stage runs it, computing its own stages' calls and passing the
  /// others through. Default: throws std::logic_error naming what to override.
  virtual at::Tensor pipeline_forward(const at::Tensor& input);
  /// A micro-batch's loss from pipeline_forward's output and its targets, as the mean over its samples (the
  /// Trainer weights each micro-batch by its share of the batch). Default: throws std::logic_error.
  virtual at::Tensor pipeline_loss(const at::Tensor& output, const at::Tensor& target);

  /// Records a value for this epoch (see LogOptions). From training_step or validation_step.
  void log(const std::string& name, double value, const LogOptions& options = {});
  /// A scalar tensor (e.g. the loss); read with .item(), detached.
  void log(const std::string& name, const at::Tensor& value, const LogOptions& options = {});

  /// The epoch in progress (0-based) and optimizer steps so far.
  int64_t current_epoch() const { return state_->epoch; }
  int64_t global_step() const { return state_->step; }
  /// Valid from configure_optimizers on.
  const TrainingPlan& plan() const { return state_->plan; }
  /// The run's DeviceMesh under TrainerOptions::tensor_parallel or pipeline_parallel > 1, from
  /// configure_model() to the fit's end; null otherwise (Lightning's self.device_mesh).
  comm::DeviceMesh* device_mesh() const { return state_->mesh; }

 private:
  friend struct detail::TrainModuleAccess;
  template <typename B>
  friend class BasicTrainModule;
  // The steps with the batch type erased: BasicTrainModule<B> casts back to B.
  virtual at::Tensor erased_training_step(const void* batch, int64_t batch_idx) = 0;
  virtual void erased_validation_step(const void* batch, int64_t batch_idx) = 0;
  virtual std::pair<at::Tensor, at::Tensor> erased_pipeline_input(const void* batch) = 0;

  LoggedMetrics logged_;  // what log() adds to; the Trainer clears, counts, restores and reduces it
  std::shared_ptr<const detail::StepState> state_ = std::make_shared<const detail::StepState>();
};

/// The user's model and its training logic (Lightning's LightningModule), for batches of type `B`:
/// whatever the DataModule's datasets make (data::Batch of the image datasets, a tuple of tensors,
/// torch::data::Example<>, a struct of the user's with data::BatchTraits). It is a torch::nn::Module:
/// register the layers in it; the Trainer wraps it in DistributedDataParallel, so its parameters are
/// broadcast from rank 0 and their gradients averaged over all ranks.
///
/// Example:
///   struct LitMlp : lockstep::train::TrainModule {   // BasicTrainModule<data::Batch>
///     LitMlp() : fc(register_module("fc", torch::nn::Linear(784, 10))) {}
///     at::Tensor training_step(const lockstep::data::Batch& b, int64_t) override {
///       auto loss = torch::nn::functional::cross_entropy(fc(b.data.flatten(1)), b.target);
///       log("train_loss", loss, LogOptions().sync_dist(true).prog_bar(true));
///       return loss;
///     }
///     OptimizerConfig configure_optimizers() override {
///       return {std::make_unique<torch::optim::Adam>(parameters(), 1e-3)};
///     }
///     torch::nn::Linear fc;
///   };
template <typename B>
class BasicTrainModule : public TrainModuleBase {
 public:
  using BatchType = B;
  /// The loss of one batch (a scalar the Trainer calls backward on). Runs under the precision's autocast.
  virtual at::Tensor training_step(const B& batch, int64_t batch_idx) = 0;
  /// Called under NoGradGuard for each validation batch; log what to measure.
  virtual void validation_step(const B& /*batch*/, int64_t /*batch_idx*/) {}
  /// Under pipeline parallelism: a batch's model input and loss target (pipeline_forward's and
  /// pipeline_loss's), each cut into micro-batches along dim 0. Default: a data::Batch's data and target;
  /// for other batch types it throws std::logic_error naming what to override.
  virtual std::pair<at::Tensor, at::Tensor> pipeline_input(const B& batch) {
    if constexpr (std::is_same_v<B, data::Batch>) {
      return {batch.data, batch.target};
    } else {
      (void)batch;
      throw std::logic_error(
          "pipeline parallelism needs the batch's input and target as tensors: override pipeline_input");
    }
  }

 private:
  at::Tensor erased_training_step(const void* batch, int64_t batch_idx) final {
    return training_step(*static_cast<const B*>(batch), batch_idx);
  }
  void erased_validation_step(const void* batch, int64_t batch_idx) final {
    validation_step(*static_cast<const B*>(batch), batch_idx);
  }
  std::pair<at::Tensor, at::Tensor> erased_pipeline_input(const void* batch) final {
    return pipeline_input(*static_cast<const B*>(batch));
  }
};

/// The TrainModule of the image datasets: batches of data::Batch.
using TrainModule = BasicTrainModule<data::Batch>;

/// What every DataModule has, whatever its batch type; derive from BasicDataModule<B> (or DataModule).
class DataModuleBase {
 public:
  virtual ~DataModuleBase() = default;
  /// Download or unpack once per node: called on each node's local rank 0 only, before setup(); the
  /// other ranks wait for it.
  virtual void prepare_data() {}
  /// Called on every rank after prepare_data(): load the datasets.
  virtual void setup() {}

 protected:
  /// The device the Trainer trains this rank on (cpu, or cuda:LOCAL_RANK), known from prepare_data() on:
  /// for data kept on it (data::DeviceImageDataset).
  const c10::Device& device() const { return device_; }

 private:
  friend class Trainer;
  c10::Device device_{c10::kCPU};
  template <typename B>
  friend class BasicDataModule;
  virtual std::unique_ptr<data::detail::AnyShardLoader> make_train_loader() = 0;
  virtual std::unique_ptr<data::detail::AnyShardLoader> make_val_loader() = 0;  // nullptr: no validation
};

/// Where a run's data comes from (Lightning's LightningDataModule), for batches of type `B`: a
/// data::DataSource per split (a map-style dataset, an iterable one, a torch::data one; its loader
/// options). The Trainer shards them itself (training: the DataSource's shuffle with the run's seed,
/// every rank the same batch count; validation: dataset order, each sample counted once), so a
/// DataModule is the same for 1 rank and for 100.
///
/// Example (ten lines: tabular rows, float features and targets):
///   struct Rows : BasicDataModule<std::tuple<at::Tensor, at::Tensor>> {
///     data::DataSource<std::tuple<at::Tensor, at::Tensor>> train_data() override {
///       return {data::make_dataset(x.size(0), [this](int64_t i) { return std::make_tuple(x[i], y[i]); }),
///               data::LoaderOptions(32)};
///     }
///     at::Tensor x, y;
///   };
template <typename B>
class BasicDataModule : public DataModuleBase {
 public:
  using BatchType = B;
  /// The training data and its loader options (batch size per rank, workers, prefetch).
  virtual data::DataSource<B> train_data() = 0;
  /// The validation data; std::nullopt: no validation.
  virtual std::optional<data::DataSource<B>> val_data() { return std::nullopt; }

 private:
  std::unique_ptr<data::detail::AnyShardLoader> make_train_loader() final {
    return train_data().make_loader();
  }
  std::unique_ptr<data::detail::AnyShardLoader> make_val_loader() final {
    std::optional<data::DataSource<B>> val = val_data();
    if (!val) return nullptr;
    return val->make_loader();
  }
};

/// The DataModule of the image datasets (TensorDataset: IdxDataset, Cifar10Dataset, SyntheticDataset),
/// transformed and augmented through the loader options.
class DataModule : public BasicDataModule<data::Batch> {
 public:
  virtual std::shared_ptr<const data::TensorDataset> train_dataset() = 0;
  /// nullptr: no validation.
  virtual std::shared_ptr<const data::TensorDataset> val_dataset() { return nullptr; }
  /// The batch size (per rank), transform and worker threads of the training loader.
  virtual data::LoaderOptions train_loader_options() = 0;
  /// The validation loader's (default: the training ones without augmentation).
  virtual data::LoaderOptions val_loader_options() { return train_loader_options().augment(false); }
  /// Keep both splits on the training device, normalised once, and batch them there
  /// (data::DeviceImageDataset: for a dataset that fits, such as Fashion-MNIST on a GPU). Default false:
  /// the loader's threads build each batch on the host. Augmentation cannot be kept on the device.
  virtual bool data_on_device() { return false; }

  /// train_dataset() with train_loader_options(), shuffled.
  data::DataSource<data::Batch> train_data() final;
  /// val_dataset() with val_loader_options(), in order; none when it is null or empty.
  std::optional<data::DataSource<data::Batch>> val_data() final;

 private:
  /// `images` with `options`: on the host (ImageDataset), or kept on the device (data_on_device()).
  data::DataSource<data::Batch> source(std::shared_ptr<const data::TensorDataset> images,
                                       data::LoaderOptions options);
};

}  // namespace lockstep::train
