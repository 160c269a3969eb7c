// Accelerator::save_state and load_state: the accelerator state file and the optimizer shards beside it
// (include/lockstep/train/accelerator.h, docs/accelerator.md).
#include "lockstep/train/accelerator.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ops/full.h>
#include <ATen/ops/tensor.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include "../every_rank.h"
#include "gradient_state.h"
#include "lockstep/shard/shard_checkpoint.h"
#include "lockstep/shard/zero_optimizer.h"
#include "lockstep/train/atomic_file.h"
#include "lockstep/train/checkpoint.h"
#include "prepared_loader_state.h"

namespace lockstep::train {
namespace {

constexpr int64_t kAcceleratorStateVersion = 1;
constexpr const char* kStateFile = "accelerator_state.pt";

c10::IValue read_value(torch::serialize::InputArchive& archive, const std::string& path,
                       const std::string& key) {
  c10::IValue value;
  if (!archive.try_read(key, value)) {
    throw std::runtime_error("accelerator state '" + path + "' has no '" + key +
                             "' (damaged, or not written by " + "Accelerator::save_state)");
  }
  return value;
}

at::Tensor read_tensor(torch::serialize::InputArchive& archive, const std::string& path,
                       const std::string& key) {
  at::Tensor tensor;
  if (!archive.try_read(key, tensor, /*is_buffer=*/true)) {
    throw std::runtime_error("accelerator state '" + path + "' has no tensor '" + key + "' (damaged?)");
  }
  return tensor;
}

}  // namespace

void Accelerator::save_state(const std::string& whole_dir) {
  // Under tensor and pipeline parallelism each part's data-parallel group (DeviceMesh::model_parallel_rank:
  // a tensor-parallel rank's slices, a stage's optimizer and the whole model) saves that part, in
  // tensor_parallel_path(whole_dir, r, save): whole_dir itself for part 0, written once the others are, and
  // naming their save (world rank 0 draws its name); then the parts of the states it replaced go.
  const int part = mesh_ ? mesh_->model_parallel_rank() : 0;
  const std::string save =
      mesh_ ? group_->broadcast_string(
                  group_->rank() == 0 ? tensor_parallel_save_name(gradient_state_->sync_steps) : "")
            : "";
  const std::string dir = tensor_parallel_path(whole_dir, part, save);
  comm::ProcessGroup& group = data_group();
  // Every rank's generator, so that each continues its own dropout stream.
  const at::Tensor rng_states = group.all_gather_stacked(cpu_rng_state());
  const std::string path = (std::filesystem::path(dir) / kStateFile).string();
  const std::vector<std::vector<std::string>> shards = save_optimizer_shards(dir);
  // fsdp, bf16 zero1/zero2, a pipeline: the model is saved whole, in float32 (optimizer: shards above).
  const FullParameters whole = strategy_->whole_parameters();
  if (mesh_) {
    on_every_rank(dir, "a rank could not write its part", [&] {
      if (part > 0 && group.rank() == 0) write_state(dir, path, rng_states, shards, save);
    });
  }
  on_every_rank(dir, "rank 0 could not write " + path, [&] {
    if (part != 0 || group.rank() != 0) return;
    write_state(dir, path, rng_states, shards, save);
    if (mesh_) remove_tensor_parallel_parts(whole_dir, mesh_->model_parallel(), save);
  });
}

// save_state's file, by rank 0 of the data-parallel group whose state it is.
void Accelerator::write_state(const std::string& dir, const std::string& path, const at::Tensor& rng_states,
                              const std::vector<std::vector<std::string>>& shards, const std::string& save) {
  ensure_writable_dir(dir);
  torch::serialize::OutputArchive archive;
  archive.write("lockstep_accelerator_state_version", c10::IValue(kAcceleratorStateVersion));
  archive.write("world_size", c10::IValue(static_cast<int64_t>(data_group().size())));
  archive.write("mixed_precision", c10::IValue(std::string(to_string(precision_))));
  archive.write("tensor_parallel", c10::IValue(static_cast<int64_t>(mesh_ ? mesh_->tensor_parallel() : 1)));
  archive.write("pipeline_parallel",
                c10::IValue(static_cast<int64_t>(mesh_ ? mesh_->pipeline_parallel() : 1)));
  archive.write("tensor_parallel_rank",  // the part: DeviceMesh::model_parallel_rank
                c10::IValue(static_cast<int64_t>(mesh_ ? mesh_->model_parallel_rank() : 0)));
  archive.write("tensor_parallel_save", c10::IValue(save));
  archive.write("step", c10::IValue(gradient_state_->sync_steps));
  archive.write("micro_steps", c10::IValue(gradient_state_->micro_steps));
  archive.write("group_size", c10::IValue(gradient_state_->group_size));
  archive.write("model_count", c10::IValue(static_cast<int64_t>(strategy_->model_count())));
  for (size_t i = 0; i < strategy_->model_count(); ++i) {
    torch::serialize::OutputArchive model_archive(archive.compilation_unit());
    strategy_->model(i).save(model_archive);
    archive.write("model_" + std::to_string(i), model_archive);
  }
  archive.write("optimizer_count", c10::IValue(static_cast<int64_t>(strategy_->optimizer_count())));
  for (size_t i = 0; i < strategy_->optimizer_count(); ++i) {
    if (!shards[i].empty()) {  // sharded: the files every rank wrote
      archive.write("optimizer_" + std::to_string(i) + "_shards",
                    c10::IValue(c10::List<std::string>(shards[i])));
      continue;
    }
    torch::serialize::OutputArchive optimizer_archive(archive.compilation_unit());
    strategy_->optimizer(i).save(optimizer_archive);
    archive.write("optimizer_" + std::to_string(i), optimizer_archive);
  }
  std::vector<int64_t> epochs;
  for (const auto& weak : loaders_) {
    auto loader = weak.lock();
    epochs.push_back(loader ? loader->epoch : -1);
  }
  archive.write("loader_epochs", at::tensor(epochs, at::kLong), /*is_buffer=*/true);
  archive.write("scaler", scaler_.state(), /*is_buffer=*/true);
  archive.write("rng_states", rng_states, /*is_buffer=*/true);
  save_checksummed_archive(archive, path);
  for (size_t i = 0; i < strategy_->optimizer_count(); ++i)  // the shards of the states this one replaced
    if (!shards[i].empty()) remove_checkpoint_shards(optimizer_base(dir, i), shards[i]);
}

std::string Accelerator::optimizer_base(const std::string& dir, size_t i) {
  return (std::filesystem::path(dir) / ("optimizer_" + std::to_string(i))).string();
}

// Instead of a plain barrier: every rank runs `write` and learns whether all succeeded
// (detail::on_every_rank), so none carries on believing the state was saved, and none waits for a rank
// that has thrown.
void Accelerator::on_every_rank(const std::string& dir, const std::string& failure,
                                const std::function<void()>& write) {
  const std::string what = "Accelerator::save_state('" + dir + "')";
  detail::on_every_rank(*group_, what + ": " + failure, [&] {
    try {
      write();
    } catch (const std::exception& e) {
      throw std::runtime_error(what + ": " + e.what());
    }
    return std::string();
  });
}

// A sharded optimizer (zero1, zero2): every rank writes its own shard (shard_checkpoint.h), nothing is
// gathered; the step in the names keeps the files the state on disk names until the new one replaces it.
// Returns, per optimizer, its shards' file names (empty: not sharded). Collective.
std::vector<std::vector<std::string>> Accelerator::save_optimizer_shards(const std::string& dir) {
  std::vector<std::vector<std::string>> names(strategy_->optimizer_count());
  std::vector<const shard::ZeroOptimizer*> sharded(names.size());
  for (size_t i = 0; i < names.size(); ++i) sharded[i] = strategy_->sharded_optimizer(i);
  if (std::none_of(sharded.begin(), sharded.end(), [](const auto* zero) { return zero != nullptr; }))
    return names;
  on_every_rank(dir, "rank 0 could not create the directory", [&] {
    if (data_group().rank() == 0) ensure_writable_dir(dir);
  });
  // Every shard is on disk (or every rank knows one is not) before rank 0 writes the state naming them.
  on_every_rank(dir, "a rank could not write its optimizer shard", [&] {
    const int64_t step = gradient_state_->sync_steps;
    for (size_t i = 0; i < names.size(); ++i) {
      if (sharded[i] == nullptr) continue;
      names[i] = save_checkpoint_shard(optimizer_base(dir, i), *sharded[i], data_group().rank(),
                                       data_group().size(), step);
    }
  });
  return names;
}

void Accelerator::load_optimizer_shards(const std::string& dir, size_t i,
                                        const std::vector<std::string>& names) {
  std::vector<std::string> paths;
  for (const std::string& name : names) paths.push_back((std::filesystem::path(dir) / name).string());
  const shard::ShardReader read = [&](int k, torch::serialize::InputArchive& archive) {
    load_checksummed_archive(
        archive, paths.at(static_cast<size_t>(k)), "Accelerator::load_state: optimizer shard",
        "copy the saved directory again with all its files, or load an older state", device_);
  };
  strategy_->load_optimizer_shards(i, static_cast<int>(paths.size()), read);
}

// The state file of `dir`, checked to be one save_state wrote, loaded into `archive`; returns its path.
std::string Accelerator::open_state(const std::string& dir, torch::serialize::InputArchive& archive) const {
  const std::string path = (std::filesystem::path(dir) / kStateFile).string();
  if (!std::filesystem::is_directory(dir)) {
    throw std::runtime_error("Accelerator::load_state: directory '" + dir +
                             "' does not exist: pass the directory given to save_state");
  }
  if (!std::filesystem::is_regular_file(path)) {
    throw std::runtime_error("Accelerator::load_state: '" + dir + "' has no " + kStateFile +
                             ": it was not written by Accelerator::save_state (or the save did not finish)");
  }
  load_checksummed_archive(archive, path, "Accelerator::load_state: accelerator state",
                           "load an older state saved by Accelerator::save_state, or start from scratch",
                           device_);
  const c10::IValue version = read_value(archive, path, "lockstep_accelerator_state_version");
  if (!version.isInt() || version.toInt() != kAcceleratorStateVersion) {
    throw std::runtime_error("Accelerator::load_state: '" + path + "' has format version " +
                             (version.isInt() ? std::to_string(version.toInt()) : std::string("?")) +
                             "; this lockstep reads version " + std::to_string(kAcceleratorStateVersion));
  }
  const int tensor_parallel = mesh_ ? mesh_->tensor_parallel() : 1;
  c10::IValue saved;  // absent: a state from before tensor parallelism, of one part
  const int64_t written = archive.try_read("tensor_parallel", saved) ? saved.toInt() : 1;
  if (written != tensor_parallel) {
    throw std::runtime_error("Accelerator::load_state '" + dir + "': written with tensor_parallel " +
                             std::to_string(written) + ", loaded with " + std::to_string(tensor_parallel) +
                             ": load it with the tensor_parallel it was written with");
  }
  const int pipeline_parallel = mesh_ ? mesh_->pipeline_parallel() : 1;
  const int64_t stages = archive.try_read("pipeline_parallel", saved) ? saved.toInt() : 1;
  if (stages != pipeline_parallel) {
    throw std::runtime_error("Accelerator::load_state '" + dir + "': written with pipeline_parallel " +
                             std::to_string(stages) + ", loaded with " + std::to_string(pipeline_parallel) +
                             ": load it with the pipeline_parallel it was written with");
  }
  return path;
}

void Accelerator::load_state(const std::string& whole_dir) {
  // Under tensor parallelism rank 0's part, whole_dir itself, names the save the others are of
  // (save_state); world rank 0 reads it (a second time, for tensor-parallel rank 0's ranks load it below).
  // Every rank learns whether every part opened.
  torch::serialize::InputArchive archive;
  std::string dir = whole_dir;
  std::string path;
  if (!mesh_) {
    path = open_state(dir, archive);
  } else {
    const std::string what = "Accelerator::load_state('" + whole_dir + "')";
    const std::vector<std::string> saves = detail::on_every_rank(*group_, what, [&] {
      if (group_->rank() != 0) return std::string();
      torch::serialize::InputArchive first;
      return read_value(first, open_state(whole_dir, first), "tensor_parallel_save").toStringRef();
    });
    const std::string& save = saves.at(0);
    dir = tensor_parallel_path(whole_dir, mesh_->model_parallel_rank(), save);
    detail::on_every_rank(*group_, what, [&] {
      path = open_state(dir, archive);
      const std::string part_save = read_value(archive, path, "tensor_parallel_save").toStringRef();
      const int64_t part = read_value(archive, path, "tensor_parallel_rank").toInt();
      if (part_save != save || part != mesh_->model_parallel_rank()) {
        throw std::runtime_error("Accelerator::load_state: '" + dir + "' is part " + std::to_string(part) +
                                 " of save '" + part_save + "', not part " +
                                 std::to_string(mesh_->model_parallel_rank()) + " of '" + save +
                                 "': the parts are of different saves");
      }
      return std::string();
    });
  }
  const int64_t model_count = read_value(archive, path, "model_count").toInt();
  const int64_t optimizer_count = read_value(archive, path, "optimizer_count").toInt();
  const auto models = static_cast<int64_t>(strategy_->model_count());
  const auto optimizers = static_cast<int64_t>(strategy_->optimizer_count());
  if (model_count != models || optimizer_count != optimizers) {
    throw std::runtime_error("Accelerator::load_state: '" + path + "' holds " + std::to_string(model_count) +
                             " model(s) and " + std::to_string(optimizer_count) + " optimizer(s), but " +
                             std::to_string(models) + " and " + std::to_string(optimizers) +
                             " are prepared: prepare the same objects, in the same order, before load_state");
  }
  {
    const FullParameters whole = strategy_->whole_parameters();  // loaded whole, then each keeps its chunks
    for (size_t i = 0; i < strategy_->model_count(); ++i) {
      torch::serialize::InputArchive model_archive;
      if (!archive.try_read("model_" + std::to_string(i), model_archive)) {
        throw std::runtime_error("Accelerator::load_state: '" + path + "' lacks model " + std::to_string(i) +
                                 " (damaged?)");
      }
      load_module_in_place(model_archive, strategy_->model(i), "accelerator state '" + path + "'");
    }
  }
  for (size_t i = 0; i < strategy_->optimizer_count(); ++i) {
    c10::IValue shards;
    if (archive.try_read("optimizer_" + std::to_string(i) + "_shards", shards)) {
      std::vector<std::string> names;
      for (const auto& name : shards.toListRef()) names.push_back(name.toStringRef());
      load_optimizer_shards(dir, i, names);
      continue;
    }
    torch::serialize::InputArchive optimizer_archive;
    if (!archive.try_read("optimizer_" + std::to_string(i), optimizer_archive)) {
      throw std::runtime_error("Accelerator::load_state: '" + path + "' lacks optimizer " +
                               std::to_string(i) + " (damaged?)");
    }
    try {
      strategy_->optimizer(i).load(optimizer_archive);
    } catch (const c10::Error& e) {
      throw std::runtime_error("Accelerator::load_state: '" + path + "' holds another kind of optimizer " +
                               std::to_string(i) + ": " + e.what_without_backtrace());
    }
  }
  scaler_.load_state(read_tensor(archive, path, "scaler").cpu());
  gradient_state_->sync_steps = read_value(archive, path, "step").toInt();
  gradient_state_->committed_steps = gradient_state_->sync_steps;
  gradient_state_->micro_steps = read_value(archive, path, "micro_steps").toInt();
  gradient_state_->group_size = read_value(archive, path, "group_size").toInt();
  gradient_state_->sync_gradients = true;
  const at::Tensor epochs = read_tensor(archive, path, "loader_epochs").cpu();
  for (size_t i = 0; i < loaders_.size() && static_cast<int64_t>(i) < epochs.numel(); ++i) {
    auto loader = loaders_[i].lock();
    const int64_t epoch = epochs[static_cast<int64_t>(i)].item<int64_t>();
    if (loader && epoch >= 0) loader->epoch = epoch;
  }
  const at::Tensor rng_states = read_tensor(archive, path, "rng_states").cpu();
  if (rng_states.dim() == 2 && rng_states.size(0) == data_group().size()) {
    set_cpu_rng_state(rng_states[data_group().rank()]);
  }
}

}  // namespace lockstep::train
