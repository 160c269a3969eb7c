#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lockstep::train {

/// How many batches of an epoch to run (Lightning's limit_train_batches / limit_val_batches):
/// a count ("50") or a fraction of the epoch ("0.25"; "1.0" = all).
struct BatchLimit {
  bool is_fraction = true;
  double fraction = 1.0;  ///< in (0, 1] when is_fraction
  int64_t count = 0;      ///< >= 1 otherwise

  /// Parses "N" (a count >= 1) or "F" with a decimal point (a fraction in (0, 1]); throws
  /// std::invalid_argument naming `flag`, the value, and what is accepted.
  static BatchLimit parse(const std::string& flag, const std::string& text);
  /// The number of batches to run out of `available` (at least 1 when available > 0).
  int64_t apply(int64_t available) const;
  std::string to_string() const;
};

/// The shape of one image, C x H x W: what `--synthetic-shape C,H,W` asks of `--data synthetic`.
struct ImageShape {
  int64_t channels = 1;
  int64_t height = 28;
  int64_t width = 28;

  /// The largest channel count, and the largest height or width, that validate() accepts (bigger values
  /// are typos, and would not fit in memory at any useful --synthetic-size).
  static constexpr int64_t kMaxChannels = 1024;
  static constexpr int64_t kMaxSide = 4096;

  /// Parses "C,H,W" (three whole numbers, e.g. "3,32,32"); throws std::invalid_argument naming `flag`, the
  /// value, what is wrong and an accepted example. The ranges are checked here too (see check()).
  static ImageShape parse(const std::string& flag, const std::string& text);
  /// Throws std::invalid_argument naming `flag` and the bad field unless 1 <= channels <= kMaxChannels and
  /// 1 <= height, width <= kMaxSide.
  void check(const std::string& flag) const;
  /// Pixels (bytes, as uint8) of one image: channels * height * width.
  int64_t numel() const { return channels * height * width; }
  /// "3,32,32": the flag's own spelling, so that messages can be pasted back.
  std::string to_string() const;
  bool operator==(const ImageShape& other) const {
    return channels == other.channels && height == other.height && width == other.width;
  }
};

/// The datasets `lockstep fit --data` knows.
inline const std::vector<std::string>& fit_data_names() {
  static const std::vector<std::string> names{"fashion-mnist", "mnist", "cifar10", "synthetic"};
  return names;
}
/// The models `lockstep fit --model` knows (lockstep::models::make_model builds them).
inline const std::vector<std::string>& fit_model_names() {
  static const std::vector<std::string> names{"mlp", "cnn", "resnet18"};
  return names;
}

/// Everything `lockstep fit` is asked to do: one field per flag, named after it (`--max-epochs` is
/// `max_epochs`). Plain data so that the CLI, the worker and (later) a YAML config fill the same
/// record; `validate()` checks it once, before any rank starts.
///
/// Free of LibTorch: the CLI links it to reject bad flags without loading libtorch.
struct FitConfig {
  // What to train.
  std::string model = "mlp";           ///< mlp | cnn | resnet18
  std::string data = "fashion-mnist";  ///< fashion-mnist | mnist | cifar10 | synthetic
  std::string data_dir;                ///< default: /usr/share/datasets/fashion-mnist for fashion-mnist
  int64_t synthetic_size = 8192;       ///< training images of --data synthetic (test: a quarter)
  /// Image shape of --data synthetic (unset: 1,28,28, Fashion-MNIST's; 3,32,32 is CIFAR-10's). Setting it
  /// with any other --data is an error: real datasets have their own shape.
  std::optional<ImageShape> synthetic_shape;

  // Where (ranks).
  std::optional<int> devices;    ///< local ranks; unset: 1, or what the surrounding launcher started
  std::optional<int> num_nodes;  ///< nodes; must match the launcher's when set
  std::string backend =
      "auto";       ///< auto (shm on one host, hier across nodes) | shm | hier | gloo | mpi (under mpirun)
  int threads = 0;  ///< intra-op threads per rank; 0 = cores / local ranks

  // How.
  int64_t max_epochs = 10;
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
  uint64_t seed = 0;
  std::string precision = "32";  ///< 32 (bf16-mixed, 16-mixed: trainer issue)
  int64_t accumulate_grad_batches = 1;
  double gradient_clip_val = 0.0;       ///< max global L2 norm of the gradients; 0 = off
  std::optional<double> bucket_cap_mb;  ///< DDP's bucket size cap, MiB (> 0); unset: auto (DdpOptions)
  BatchLimit limit_train_batches;
  BatchLimit limit_val_batches;
  std::optional<bool> augment;    ///< random crop + flip; default on for cifar10 only
  std::optional<double> dropout;  ///< the model's dropout probability; unset: the model's own (0.2)

  // Data loading.
  /// Loader threads per rank; -1 = auto: 1 when the host has a core to spare for it (cores >= local
  /// ranks x (threads + 1)), else 0 (a loader thread on a full core only steals the training thread's time).
  int64_t num_workers = -1;
  int64_t prefetch_factor = 2;
  bool persistent_workers = true;

  // Checkpoints and stopping.
  /// last.ckpt at every epoch end (and every ckpt_every_n_steps), final weights; rank 0, atomically.
  std::string ckpt_dir;
  int64_t ckpt_every_n_steps = 0;  ///< also write last.ckpt every N optimizer steps; 0 = epoch ends only
  /// "" | last (= ckpt_dir/last.ckpt) | auto (last when ckpt_dir/last.ckpt exists, else a fresh start: for
  /// jobs that are requeued, such as `lockstep slurm`'s) | a checkpoint path
  std::string resume;
  int64_t max_steps = -1;  ///< stop after this many optimizer steps in all (Lightning's); -1 = no limit
  int64_t log_every_n_steps = 0;  ///< a {"step": ...} record in metrics_file every N steps; 0 = off
  /// Restart every rank after one fails, up to this many times (torchrun's --max-restarts); a restarted
  /// run resumes from ckpt_dir/last.ckpt when there is one.
  int max_restarts = 0;
  /// A non-finite training loss: stop (the error names the step, the rank and the value) | skip (every
  /// rank skips that optimizer step, agreed by one extra all-reduce per step).
  std::string on_nan = "stop";
  /// Seconds one collective may take before the ranks stop with an error naming the ranks that had not
  /// arrived; also how long the launcher lets a rank go without progress. 0 = LOCKSTEP_TIMEOUT, else 1800.
  double collective_timeout = 0.0;
  /// collective_timeout as a duration; unset when it is 0 (the default applies).
  std::optional<std::chrono::milliseconds> collective_timeout_duration() const {
    if (collective_timeout <= 0.0) return std::nullopt;
    return std::chrono::milliseconds(static_cast<long long>(collective_timeout * 1000.0));
  }

  // Best checkpoints and early stopping (Lightning's ModelCheckpoint and EarlyStopping callbacks).
  std::string monitor = "val_loss";  ///< the epoch metric that --save-top-k and early stopping rank by
  std::string monitor_mode = "min";  ///< min | max: whether a lower or a higher --monitor is better
  /// Keep the K best checkpoints by --monitor in ckpt_dir besides last.ckpt; 0 = none, -1 = every epoch's.
  int64_t save_top_k = 0;
  /// Names of those files, without ".ckpt" (ModelCheckpoint's pattern: "{epoch}-{val_loss:.4f}" gives
  /// "epoch=3-val_loss=0.2514"); "" = ModelCheckpoint's default, "epoch={epoch}-step={step}".
  std::string checkpoint_filename;
  int64_t early_stopping_patience = 0;    ///< stop after N epochs without improvement of --monitor; 0 = off
  double early_stopping_min_delta = 0.0;  ///< the least change of --monitor that counts as an improvement

  // Output.
  std::string metrics_file;       ///< JSONL, one object per epoch (rank 0)
  std::string progress = "auto";  ///< auto (a bar when stdout is a terminal) | on | off

  /// Throws std::invalid_argument naming the flag, the bad value and what is accepted.
  void validate() const;
  /// The data directory after defaults (empty for synthetic).
  std::string resolved_data_dir() const;
  /// The learning rate after defaults, before --lr-scaling.
  double resolved_lr() const;
  /// Samples per optimizer step over all ranks: batch_size x world_size x accumulate_grad_batches.
  int64_t global_batch_size(int world_size) const;
  /// The batch the lr is meant for, after defaults (batch_size: one rank, no accumulation).
  int64_t resolved_lr_reference_batch() const { return lr_reference_batch.value_or(batch_size); }
  /// The learning rate that training starts from (before warmup and decay): resolved_lr() scaled by
  /// --lr-scaling for `world_size` ranks. Throws std::invalid_argument when world_size < 1.
  ///
  /// Example: --lr 0.1 --batch-size 64 --lr-scaling linear on 4 ranks -> 0.4 (reference 64, global 256).
  double scaled_lr(int world_size) const;
  /// Epochs between two decays of --lr-schedule step, after defaults.
  int64_t resolved_lr_step_epochs() const {
    return lr_step_epochs.value_or(std::max<int64_t>(1, max_epochs / 3));
  }
  /// The image shape of --data synthetic after defaults (1,28,28).
  ImageShape resolved_synthetic_shape() const { return synthetic_shape.value_or(ImageShape{}); }
  /// The checkpoint --resume names ("" when not resuming, and for auto when ckpt_dir/last.ckpt does not
  /// exist).
  std::string resolved_resume_path() const;
  /// --resume as the Trainer takes it: auto becomes last when ckpt_dir/last.ckpt exists, else "" (start
  /// fresh); every other value as given. Looks at the file system each call (every rank resolves it before
  /// training starts, so before rank 0 can write a checkpoint).
  std::string resolved_resume() const;
  /// Random crop + flip after defaults.
  bool resolved_augment() const { return augment.value_or(data == "cifar10"); }
};

}  // namespace lockstep::train
