#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/train/trainer_options.h"

namespace lockstep::train {

/// The shape of one image, C x H x W: what synthetic_shape (`--synthetic-shape C,H,W`) asks of the
/// synthetic dataset.
struct ImageShape {
  int64_t channels = 1;
  int64_t height = 28;
  int64_t width = 28;

  /// The largest channel count, and the largest height or width, that validate() accepts (bigger values
  /// are typos, and would not fit in memory at any useful synthetic_size).
  static constexpr int64_t kMaxChannels = 1024;
  static constexpr int64_t kMaxSide = 4096;

  /// Parses "C,H,W" (three whole numbers, e.g. "3,32,32"); throws std::invalid_argument naming `option`
  /// (as the caller calls it), the value, what is wrong and an accepted example. The ranges are checked
  /// here too (see check()).
  static ImageShape parse(const std::string& option, const std::string& text);
  /// Throws std::invalid_argument naming `option` and the bad field unless 1 <= channels <= kMaxChannels
  /// and 1 <= height, width <= kMaxSide.
  void check(const std::string& option) const;
  /// Pixels (bytes, as uint8) of one image: channels * height * width.
  int64_t numel() const { return channels * height * width; }
  /// "3,32,32": the spelling parse() reads, so that messages can be pasted back.
  std::string to_string() const;
  bool operator==(const ImageShape& other) const {
    return channels == other.channels && height == other.height && width == other.width;
  }
};

/// The datasets FitConfig::data names (`lockstep fit --data`).
inline const std::vector<std::string>& fit_data_names() {
  static const std::vector<std::string> names{"fashion-mnist", "mnist", "cifar10", "synthetic", "text"};
  return names;
}
/// The models FitConfig::model names: the image classifiers lockstep::models::make_model builds, and "gpt"
/// (models::Gpt, GptOptions::tiny(), on data "text" only).
inline const std::vector<std::string>& fit_model_names() {
  static const std::vector<std::string> names{"mlp", "cnn", "resnet18", "gpt"};
  return names;
}

/// Everything `lockstep fit` is asked to do: how to train (the Trainer's own options, `trainer`) and what
/// (the model, the data, the optimizer and its schedule, the callbacks). Each field is named after the flag
/// that sets it (`--max-epochs` is `trainer.max_epochs()`, `--lr-gamma` is `lr_gamma`), so that the CLI,
/// the rank program and a YAML config fill the same record; `validate()` checks it once, before any rank
/// starts. Its errors name the options as spelled here; `lockstep fit` shows them as its flags.
///
/// Free of LibTorch: the CLI links it to reject bad flags without loading libtorch.
struct FitConfig {
  /// Ranks, epochs, precision, checkpoints, resume, NaN handling, timeouts: what the Trainer takes as it
  /// is. fit() adds the run's callbacks, output and environment.
  TrainerOptions trainer;

  // What to train.
  std::string model = "mlp";           ///< mlp | cnn | resnet18 (images) | gpt (text)
  std::string data = "fashion-mnist";  ///< fashion-mnist | mnist | cifar10 | synthetic | text
  std::string data_dir;                ///< default: /usr/share/datasets/fashion-mnist for fashion-mnist
  /// data text: a text file, or a directory whose files without an extension are read in name order;
  /// default /usr/share/games/fortunes (Debian's `fortunes` package). Read as bytes (vocabulary 256), cut
  /// into windows of the model's context (64) + 1; the first 90% of them train, the rest validate.
  std::string text_file;
  int64_t synthetic_size = 8192;  ///< training images of data synthetic (test: a quarter)
  /// Image shape of data synthetic (unset: 1,28,28, Fashion-MNIST's; 3,32,32 is CIFAR-10's). Setting it
  /// with any other data is an error: real datasets have their own shape.
  std::optional<ImageShape> synthetic_shape;
  std::optional<bool> augment;  ///< random crop + flip; default on for cifar10 only
  /// Keep the dataset on the training device, normalised once, batched there (DataModule::data_on_device);
  /// not with augmentation.
  bool data_on_device = false;
  std::optional<double> dropout;  ///< the model's dropout probability; unset: the model's own (0.2; gpt 0)
  /// The mlp's hidden widths (`--mlp-hidden 4096,4096,4096`: about 37M parameters on Fashion-MNIST, for
  /// memory work); unset: 256, 128.
  std::optional<std::vector<int64_t>> mlp_hidden;
  /// Parses "W,W,..." (whole numbers) for mlp_hidden; throws std::invalid_argument naming `option` (as the
  /// caller spells it), the value and an accepted example. The range is validate()'s.
  static std::vector<int64_t> parse_widths(const std::string& option, const std::string& text);

  // The optimizer and its schedule.
  int64_t batch_size = 64;         ///< per rank
  std::optional<double> lr;        ///< default: 1e-3 (adam, adamw), 0.05 (sgd)
  std::string optimizer = "adam";  ///< adam | adamw | sgd
  double weight_decay = 0.0;
  double momentum = 0.9;  ///< sgd only
  /// Scales the lr with the global batch (batch_size x ranks x accumulate_grad_batches) against
  /// lr_reference_batch: none | linear (x global/reference) | sqrt (x sqrt(global/reference)).
  std::string lr_scaling = "none";
  std::optional<int64_t> lr_reference_batch;  ///< the batch the lr is meant for; default: batch_size
  std::string lr_schedule = "cosine";         ///< cosine | constant | step
  double warmup_epochs = 0.0;                 ///< linear warmup length, in epochs
  std::optional<int64_t> lr_step_epochs;      ///< step: epochs between decays; default max(1, max_epochs / 3)
  double lr_gamma = 0.1;                      ///< step: the factor of each decay, in (0, 1]

  // Data loading.
  /// Loader threads per rank; -1 = auto: 1 when the host has a core to spare for it (cores >= local
  /// ranks x (threads + 1)), else 0 (a loader thread on a full core only steals the training thread's time).
  int64_t num_workers = -1;
  int64_t prefetch_factor = 2;
  bool persistent_workers = true;

  /// Restart every rank after one fails, up to this many times (torchrun's --max-restarts); a restarted
  /// run resumes from ckpt_dir/last.ckpt when there is one. The launcher's, not the Trainer's.
  int max_restarts = 0;

  // Best checkpoints and early stopping (Lightning's ModelCheckpoint and EarlyStopping callbacks).
  std::string monitor = "val_loss";  ///< the epoch metric that save_top_k and early stopping rank by
  std::string monitor_mode = "min";  ///< min | max: whether a lower or a higher monitor is better
  /// Keep the K best checkpoints by monitor in ckpt_dir besides last.ckpt; 0 = none, -1 = every epoch's.
  int64_t save_top_k = 0;
  /// Names of those files, without ".ckpt" (ModelCheckpoint's pattern: "{epoch}-{val_loss:.4f}" gives
  /// "epoch=3-val_loss=0.2514"); "" = ModelCheckpoint's default, "epoch={epoch}-step={step}".
  std::string checkpoint_filename;
  int64_t early_stopping_patience = 0;    ///< stop after N epochs without improvement of monitor; 0 = off
  double early_stopping_min_delta = 0.0;  ///< the least change of monitor that counts as an improvement

  std::string progress = "auto";  ///< auto (a bar when stdout is a terminal) | on | off

  /// Throws std::invalid_argument naming the option, the bad value and what is accepted (the Trainer's
  /// options through TrainerOptions::validate, then what `lockstep fit` asks more of them: a CPU backend
  /// and precision, at least one epoch).
  void validate() const;
  /// The data directory after defaults (empty for synthetic and text).
  std::string resolved_data_dir() const;
  /// text_file after defaults (/usr/share/games/fortunes for data text, empty for the others).
  std::string resolved_text_file() const;
  /// The learning rate after defaults, before lr_scaling.
  double resolved_lr() const;
  /// Samples per optimizer step over all ranks: batch_size x world_size x accumulate_grad_batches.
  int64_t global_batch_size(int world_size) const;
  /// The batch the lr is meant for, after defaults (batch_size: one rank, no accumulation).
  int64_t resolved_lr_reference_batch() const { return lr_reference_batch.value_or(batch_size); }
  /// The learning rate that training starts from (before warmup and decay): resolved_lr() scaled by
  /// lr_scaling for `world_size` ranks. Throws std::invalid_argument when world_size < 1.
  ///
  /// Example: lr 0.1, batch_size 64, lr_scaling linear on 4 ranks -> 0.4 (reference 64, global 256).
  double scaled_lr(int world_size) const;
  /// The same for a run whose optimizer step takes `global_batch` samples (TrainingPlan::global_batch_size:
  /// keep_global_batch changes the accumulation with the world). Throws when global_batch < 1.
  double lr_for_global_batch(int64_t global_batch) const;
  /// Epochs between two decays of lr_schedule step, after defaults.
  int64_t resolved_lr_step_epochs() const {
    return lr_step_epochs.value_or(std::max<int64_t>(1, trainer.max_epochs() / 3));
  }
  /// The image shape of data synthetic after defaults (1,28,28).
  ImageShape resolved_synthetic_shape() const { return synthetic_shape.value_or(ImageShape{}); }
  /// Random crop + flip after defaults.
  bool resolved_augment() const { return augment.value_or(data == "cifar10"); }
};

}  // namespace lockstep::train
