#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "lockstep/data/epoch_part.h"

namespace torch::nn {
class Module;
}
namespace lockstep::shard {
class ZeroOptimizer;
}
namespace torch::optim {
class Optimizer;
}
namespace torch::serialize {
class InputArchive;
class OutputArchive;
}  // namespace torch::serialize

namespace lockstep::train {

/// Where a run stands between two optimizer steps.
struct TrainPosition {
  int64_t epoch = 0;  ///< the epoch in progress (0-based)
  int64_t batch = 0;  ///< batches of `epoch` every rank has trained (0: the epoch has not begun)
  int64_t step = 0;   ///< optimizer steps taken since the start of the run
};

/// What a checkpoint holds besides the model and the optimizer.
struct CheckpointState {
  TrainPosition position;
  int world_size = 1;
  std::string model;      ///< the model's name (`--model`), checked on resume
  std::string config;     ///< the run's configuration, for people reading the file
  at::Tensor rng_states;  ///< [world_size, n] uint8: every rank's CPU generator state (dropout)
  /// Each rank's values logged so far this epoch (LoggedMetrics::to_json), by rank; empty at an epoch end.
  std::vector<std::string> logged_states;
  /// Each callback's state_dict(), by state_key().
  std::map<std::string, std::string> callback_states;
  at::Tensor scaler_state;  ///< GradScaler::state() (undefined when the run has no scaler)
  /// When `position` lies in an epoch that was re-sharded on resume (another world size, mid-epoch): the
  /// epoch's parts on earlier world sizes, in order (data::ShardPlan::before; their `planned` is not stored:
  /// it follows from the run's options); `position.batch` then counts batches of the re-sharded rest. Empty
  /// when the epoch follows the sampler's own order.
  std::vector<data::EpochPart> reshard_parts;
  /// The rank-batches per optimizer step a run that keeps its global batch keeps (TrainerOptions::
  /// keep_global_batch: its first world x accumulate_grad_batches); 0 when it does not.
  int64_t batches_per_step = 0;
  /// A sharded checkpoint's shard files, by rank of the run that wrote it (shard_checkpoint.h): as written,
  /// their names beside the checkpoint; as loaded, their paths. Empty for a whole checkpoint.
  std::vector<std::string> shards;
  /// The tensor-parallel size of the run that wrote it (TrainerOptions::tensor_parallel): one file per
  /// tensor-parallel rank (tensor_parallel_path), each with that rank's slices; `world_size` then counts
  /// the data-parallel ranks. 1: the model whole.
  int tensor_parallel = 1;
  /// With tensor_parallel > 1: how each split parameter lies over the parts, as JSON {"name": [dim,
  /// chunks]} (models::ParameterSplit; the others are whole in every part). What `lockstep export` puts the
  /// parts together by.
  std::string tensor_parallel_layout;
  /// The pipeline-parallel size of the run that wrote it (TrainerOptions::pipeline_parallel): one file per
  /// stage (and tensor-parallel rank), each with the whole model and its stage's optimizer state.
  int pipeline_parallel = 1;
  /// With tensor_parallel or pipeline_parallel > 1: which part this file is (stage × tensor_parallel +
  /// tensor-parallel rank; 0: the one that names the others; the field keeps its name from when parts were
  /// tensor-parallel only), and the name of the save that wrote the set (tensor_parallel_save_name).
  int tensor_parallel_rank = 0;
  std::string tensor_parallel_save;
};

/// Where tensor-parallel rank `tp_rank`'s part of the checkpoint `path`, written by the save named `save`
/// (tensor_parallel_save_name), lives: `path` itself for rank 0, `path` + ".tp<r>." + save for rank r.
/// Rank 0's part is written last, once the others are complete, and records T and the save's name: its
/// presence names one whole set, and a new save (at the same step too) never overwrites the parts the
/// checkpoint on disk names, so a crash between two parts leaves the old set whole. The same names serve
/// Accelerator::save_state's directories.
std::string tensor_parallel_path(const std::string& path, int tp_rank, const std::string& save);
/// A new save's name: "step-<step>-<16 hex digits drawn at random>" (one rank draws it for all).
std::string tensor_parallel_save_name(int64_t step);
/// Removes what lies beside `path` under a part's name (tensor_parallel_path's files or directories and
/// what is named after them: a part's optimizer shards) but the parts of ranks 1 .. `tensor_parallel`-1
/// of the save `keep`: the sets older saves left (a crashed one's too, or a larger T's). An empty `keep`
/// removes every part. Errors are ignored: what stays behind is named by no checkpoint.
void remove_tensor_parallel_parts(const std::string& path, int tensor_parallel, const std::string& keep);

/// The file format's version, written into every checkpoint and checked on load.
inline constexpr int64_t kCheckpointVersion = 2;

/// Writes `model`, `optimizer` (its whole state: moments, step counts) and `state` to `path` as a
/// LibTorch archive followed by lockstep's checksum trailer (file_checksum.h), atomically (temporary file,
/// fsync, rename): a reader sees the old checkpoint or the complete new one. Throws std::runtime_error
/// naming the path when it cannot.
void save_checkpoint(const std::string& path, const torch::nn::Module& model,
                     const torch::optim::Optimizer& optimizer, const CheckpointState& state);

/// The shard file of rank `rank` of `world` for the sharded checkpoint `path` at optimizer step `step`:
/// "PATH.step-S.shard-R-of-W". A new step's shards never overwrite the ones the checkpoint on disk names.
std::string checkpoint_shard_path(const std::string& path, int rank, int world, int64_t step);

/// Writes this rank's shard of `optimizer` (ZeroOptimizer::save_shard) to checkpoint_shard_path(path,
/// rank, world, step), atomically and checksummed, and returns the file names of all `world` shards (what
/// the checkpoint that names them lists).
std::vector<std::string> save_checkpoint_shard(const std::string& path, const shard::ZeroOptimizer& optimizer,
                                               int rank, int world, int64_t step);

/// Removes the shard files of `path` (checkpoint_shard_path's, any step and world) but those named in
/// `keep` (file names). Errors are ignored: what stays behind is named by no checkpoint.
void remove_checkpoint_shards(const std::string& path, const std::vector<std::string>& keep = {});

/// Writes a sharded checkpoint (zero1, zero2, fsdp), atomically, once every rank has written its shard to
/// checkpoint_shard_path(path, rank, world, step) (ZeroOptimizer::save_shard): `state` (its `shards` the
/// shard files' names), `model`'s buffers, and the names and shapes of `parameters` (the optimizer's, in
/// its order) — not their values, which are in the shards. Then removes the shards of the checkpoints it
/// replaced. One rank calls it.
void save_sharded_checkpoint(const std::string& path, const torch::nn::Module& model,
                             const std::vector<at::Tensor>& parameters, const CheckpointState& state);

/// Loads a checkpoint written by save_checkpoint into `model` and `optimizer` and returns the rest.
/// For a sharded checkpoint it loads `model`'s buffers only and returns the shards' paths in
/// `CheckpointState::shards`: the caller reads them (ZeroOptimizer::load_shards, load_whole_from_shards).
/// Throws std::runtime_error naming the path and the fix when the file is missing, unreadable, truncated,
/// changed after it was written (its crc32 differs from the one stored: both are named), not a lockstep
/// checkpoint, of another format version, or holds a model named other than `model_name` or
/// whose parameters do not have this model's names and shapes; throws std::invalid_argument naming both
/// when it was written with another tensor_parallel than `tensor_parallel` (each part holds slices of
/// another shape) or another pipeline_parallel than `pipeline_parallel` (each part holds another stage's
/// optimizer state). Tensors are restored onto the device of
/// `model`'s first parameter (a checkpoint of a GPU run resumes on the CPU too).
CheckpointState load_checkpoint(const std::string& path, const std::string& model_name,
                                torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                                int tensor_parallel = 1, int pipeline_parallel = 1);

/// Copies the parameters and buffers an archive holds (Module::save's layout) into `module`'s existing
/// tensors, checking names, dtypes and shapes. Unlike Module::load it keeps every tensor object, so the
/// gradient hooks DistributedDataParallel put on them (and an optimizer's references) stay valid.
/// Throws std::runtime_error starting with `what` ("checkpoint 'x.ckpt'") and naming the dotted name.
/// With `parameters` false only the buffers are read (a sharded checkpoint's parameters are in its shards).
void load_module_in_place(torch::serialize::InputArchive& archive, torch::nn::Module& module,
                          const std::string& what, const std::string& prefix = "", bool parameters = true);

/// Saves `archive` to `path` atomically (write_atomically) with lockstep's checksum trailer after its
/// bytes; `written(tmp)`, if given, runs after the trailer is written and before the rename. The one
/// writer of every archive lockstep reads back (checkpoints, Accelerator::save_state). Throws
/// std::runtime_error naming the path when it cannot write.
///
/// Example:
///   torch::serialize::OutputArchive archive;
///   archive.write("step", c10::IValue(step));
///   save_checksummed_archive(archive, "ck/state.pt");
void save_checksummed_archive(torch::serialize::OutputArchive& archive, const std::string& path,
                              const std::function<void(const std::string& tmp_path)>& written = nullptr);

/// Verifies `path`'s checksum trailer (read_checksummed_file) and loads the archive before it into
/// `archive`. Throws std::runtime_error starting with `what` and the path ("checkpoint 'ck/last.ckpt'")
/// and ending with `fix` when the file is truncated, changed since lockstep wrote it, not written by
/// lockstep, or (checksum right) not a LibTorch archive. With `device`, every tensor is restored onto it
/// whatever device wrote it (a checkpoint written on a GPU resumes on the CPU, and the other way round).
void load_checksummed_archive(torch::serialize::InputArchive& archive, const std::string& path,
                              const std::string& what, const std::string& fix,
                              std::optional<c10::Device> device = std::nullopt);

namespace detail {
/// Called with the temporary file's path after a checkpoint's bytes are written and before it is renamed
/// into place (fault-injection tests kill the process there). Empty by default.
std::function<void(const std::string& tmp_path)>& checkpoint_written_hook();
}  // namespace detail

/// This process's CPU generator state (what dropout draws from), and setting it back.
at::Tensor cpu_rng_state();
void set_cpu_rng_state(const at::Tensor& state);

}  // namespace lockstep::train
