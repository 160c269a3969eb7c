// Checkpoints of `lockstep fit`: see include/lockstep/train/checkpoint.h.
#include "lockstep/train/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>
#include <unordered_set>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <torch/utils.h>

#include "lockstep/shard/zero_optimizer.h"
#include "lockstep/train/atomic_file.h"
#include "lockstep/train/file_checksum.h"

namespace lockstep::train {
namespace {

c10::IValue read_value(torch::serialize::InputArchive& archive, const std::string& path,
                       const std::string& key) {
  c10::IValue value;
  if (!archive.try_read(key, value)) {
    throw std::runtime_error("checkpoint '" + path + "' has no '" + key +
                             "': it was not written by this version of lockstep fit (or is damaged)");
  }
  return value;
}

at::Tensor read_tensor(torch::serialize::InputArchive& archive, const std::string& path,
                       const std::string& key) {
  at::Tensor tensor;
  if (!archive.try_read(key, tensor, /*is_buffer=*/true)) {
    throw std::runtime_error("checkpoint '" + path + "' has no tensor '" + key +
                             "' (damaged, or not lockstep's)");
  }
  return tensor;
}

}  // namespace

void load_module_in_place(torch::serialize::InputArchive& archive, torch::nn::Module& module,
                          const std::string& what, const std::string& prefix, bool parameters) {
  // Module::load would do, but copies into the existing tensors instead of replacing their storage:
  // LibTorch's InputArchive::read swaps each parameter's data, which also replaces its gradient accumulator,
  // and a DistributedDataParallel wrapped around the model would lose its gradient hooks (no more
  // all-reduce).
  torch::NoGradGuard no_grad;
  auto copy_one = [&](const std::string& name, at::Tensor& target, bool is_buffer) {
    at::Tensor loaded;
    if (!archive.try_read(name, loaded, is_buffer)) {
      throw std::runtime_error(what + " has no '" + prefix + name +
                               "': it holds another model (or another layout of it)");
    }
    if (!loaded.sizes().equals(target.sizes()) || loaded.scalar_type() != target.scalar_type()) {
      throw std::runtime_error(what + " holds '" + prefix + name + "' as " +
                               c10::str(loaded.scalar_type(), loaded.sizes()) + ", this model has " +
                               c10::str(target.scalar_type(), target.sizes()) +
                               " (another dataset or image shape?)");
    }
    target.copy_(loaded);
  };
  if (parameters) {
    for (auto& parameter : module.named_parameters(/*recurse=*/false))
      copy_one(parameter.key(), parameter.value(), false);
  }
  for (auto& buffer : module.named_buffers(/*recurse=*/false)) copy_one(buffer.key(), buffer.value(), true);
  for (const auto& child : module.named_children()) {
    torch::serialize::InputArchive child_archive;
    if (!archive.try_read(child.key(), child_archive)) {
      throw std::runtime_error(what + " has no submodule '" + prefix + child.key() +
                               "': it holds another model");
    }
    load_module_in_place(child_archive, *child.value(), what, prefix + child.key() + ".", parameters);
  }
}

namespace {

// Everything of a checkpoint but the model and the optimizer.
void write_state(torch::serialize::OutputArchive& archive, const CheckpointState& state) {
  archive.write("lockstep_checkpoint_version", c10::IValue(kCheckpointVersion));
  archive.write("epoch", c10::IValue(state.position.epoch));
  archive.write("batch", c10::IValue(state.position.batch));
  archive.write("step", c10::IValue(state.position.step));
  archive.write("world_size", c10::IValue(static_cast<int64_t>(state.world_size)));
  archive.write("model_name", c10::IValue(state.model));
  archive.write("config", c10::IValue(state.config));
  archive.write("rng_states", state.rng_states, /*is_buffer=*/true);
  c10::List<std::string> logged(state.logged_states);
  archive.write("logged_states", c10::IValue(logged));
  c10::Dict<std::string, std::string> callbacks;
  for (const auto& [key, value] : state.callback_states) callbacks.insert(key, value);
  archive.write("callback_states", c10::IValue(callbacks));
  if (state.scaler_state.defined()) archive.write("scaler_state", state.scaler_state, /*is_buffer=*/true);
  // Each earlier part of the epoch as (world, batches); their planned counts follow from the run's options
  // (Trainer::Run::restore). A file of version 2 from before the list held one part as reshard_world and
  // reshard_batch (read below).
  c10::List<int64_t> parts;
  for (const data::EpochPart& part : state.reshard_parts) {
    parts.push_back(part.world);
    parts.push_back(part.batches);
  }
  archive.write("reshard_parts", c10::IValue(parts));
  if (state.batches_per_step > 0) archive.write("batches_per_step", c10::IValue(state.batches_per_step));
  if (state.pipeline_parallel > 1)
    archive.write("pipeline_parallel", c10::IValue(static_cast<int64_t>(state.pipeline_parallel)));
  if (state.tensor_parallel > 1 || state.pipeline_parallel > 1) {
    archive.write("tensor_parallel", c10::IValue(static_cast<int64_t>(state.tensor_parallel)));
    archive.write("tensor_parallel_layout", c10::IValue(state.tensor_parallel_layout));
    archive.write("tensor_parallel_rank", c10::IValue(static_cast<int64_t>(state.tensor_parallel_rank)));
    archive.write("tensor_parallel_save", c10::IValue(state.tensor_parallel_save));
  }
}

// Module::save's layout with each parameter in `sharded` an empty tensor of its dtype (its values are in
// the shards): the names and order of state_dict(), and the buffers. A parameter the shards do not hold (a
// frozen one, another pipeline stage's) is written whole, so that `lockstep export` finds it; resuming
// reads the buffers only.
void save_skeleton(const torch::nn::Module& module, const std::unordered_set<const void*>& sharded,
                   torch::serialize::OutputArchive& archive) {
  for (const auto& parameter : module.named_parameters(/*recurse=*/false)) {
    const at::Tensor& value = parameter.value();
    const bool in_shards = sharded.count(value.unsafeGetTensorImpl()) != 0;
    archive.write(parameter.key(), in_shards ? at::empty({0}, value.options().device(at::kCPU)) : value);
  }
  for (const auto& buffer : module.named_buffers(/*recurse=*/false))
    archive.write(buffer.key(), buffer.value(), /*is_buffer=*/true);
  for (const auto& child : module.named_children()) {
    torch::serialize::OutputArchive child_archive(archive.compilation_unit());
    save_skeleton(*child.value(), sharded, child_archive);
    archive.write(child.key(), child_archive);
  }
}

}  // namespace

void remove_checkpoint_shards(const std::string& path, const std::vector<std::string>& keep) {
  const std::filesystem::path target(path);
  const std::string prefix = target.filename().string() + ".step-";
  std::error_code error;
  const auto dir = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0 || name.find(".shard-") == std::string::npos) continue;
    if (std::find(keep.begin(), keep.end(), name) == keep.end()) std::filesystem::remove(entry.path(), error);
  }
}

std::vector<std::string> save_checkpoint_shard(const std::string& path, const shard::ZeroOptimizer& optimizer,
                                               int rank, int world, int64_t step) {
  torch::serialize::OutputArchive shard;
  optimizer.save_shard(shard);
  save_checksummed_archive(shard, checkpoint_shard_path(path, rank, world, step));
  std::vector<std::string> names;
  for (int r = 0; r < world; ++r)
    names.push_back(std::filesystem::path(checkpoint_shard_path(path, r, world, step)).filename().string());
  return names;
}

namespace {

// "ck/state/" names the directory "ck/state": its parts lie beside it, not in it.
std::string without_trailing_slashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

}  // namespace

std::string tensor_parallel_path(const std::string& path, int tp_rank, const std::string& save) {
  if (tp_rank == 0) return path;
  return without_trailing_slashes(path) + ".tp" + std::to_string(tp_rank) + "." + save;
}

std::string tensor_parallel_save_name(int64_t step) {
  // Never throws (one rank draws it while the others wait in a broadcast): without an entropy source, the
  // clock, the process and a counter.
  static std::atomic<uint64_t> drawn{0};
  uint64_t token = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
                   (static_cast<uint64_t>(::getpid()) << 40) ^ (drawn++ * 0x9e3779b97f4a7c15ULL);
  try {
    std::random_device device;
    token ^= (static_cast<uint64_t>(device()) << 32) ^ device();
  } catch (const std::exception&) {
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(token));
  return "step-" + std::to_string(step) + "-" + hex;
}

void remove_tensor_parallel_parts(const std::string& path, int tensor_parallel, const std::string& keep) {
  const std::filesystem::path target(without_trailing_slashes(path));
  const std::string prefix = target.filename().string() + ".tp";
  const auto dir = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  std::error_code error;
  std::vector<std::filesystem::path> doomed;  // removed after the scan, which removing would disturb
  for (std::filesystem::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    size_t at = prefix.size();
    while (at < name.size() && name[at] >= '0' && name[at] <= '9') ++at;
    const size_t digits = at - prefix.size();
    if (digits == 0 || digits > 9 || at + 1 >= name.size() || name[at] != '.') continue;  // not PATH.tp<r>.
    const int64_t rank = std::stoll(name.substr(prefix.size(), digits));
    const size_t save_end = name.find('.', at + 1);
    const std::string save =
        name.substr(at + 1, save_end == std::string::npos ? std::string::npos : save_end - at - 1);
    if (save.rfind("step-", 0) != 0) continue;  // not a save's name
    if (!keep.empty() && save == keep && rank >= 1 && rank < tensor_parallel) continue;
    doomed.push_back(it->path());
  }
  for (const auto& part : doomed) std::filesystem::remove_all(part, error);
}

std::string checkpoint_shard_path(const std::string& path, int rank, int world, int64_t step) {
  return path + ".step-" + std::to_string(step) + ".shard-" + std::to_string(rank) + "-of-" +
         std::to_string(world);
}

void save_sharded_checkpoint(const std::string& path, const torch::nn::Module& model,
                             const std::vector<at::Tensor>& parameters, const CheckpointState& state) {
  std::map<const void*, std::string> names;
  for (const auto& named : model.named_parameters()) names[named.value().unsafeGetTensorImpl()] = named.key();
  c10::List<std::string> parameter_names;
  c10::List<c10::List<int64_t>> shapes;
  for (const at::Tensor& param : parameters) {
    const auto it = names.find(param.unsafeGetTensorImpl());
    if (it == names.end()) {
      throw std::logic_error("save_sharded_checkpoint: a parameter of shape " + c10::str(param.sizes()) +
                             " that the optimizer steps is not the model's");
    }
    parameter_names.push_back(it->second);
    shapes.push_back(c10::List<int64_t>(param.sizes().vec()));
  }
  torch::serialize::OutputArchive archive;
  write_state(archive, state);
  archive.write("shards", c10::IValue(c10::List<std::string>(state.shards)));
  archive.write("parameter_names", c10::IValue(parameter_names));
  archive.write("parameter_shapes", c10::IValue(shapes));
  torch::serialize::OutputArchive model_archive(archive.compilation_unit());
  std::unordered_set<const void*> sharded;
  for (const at::Tensor& param : parameters) sharded.insert(param.unsafeGetTensorImpl());
  save_skeleton(model, sharded, model_archive);
  archive.write("model", model_archive);
  save_checksummed_archive(archive, path, detail::checkpoint_written_hook());
  remove_checkpoint_shards(path, state.shards);
}

void save_checkpoint(const std::string& path, const torch::nn::Module& model,
                     const torch::optim::Optimizer& optimizer, const CheckpointState& state) {
  torch::serialize::OutputArchive archive;
  write_state(archive, state);
  torch::serialize::OutputArchive model_archive(archive.compilation_unit());
  model.save(model_archive);
  archive.write("model", model_archive);
  torch::serialize::OutputArchive optimizer_archive(archive.compilation_unit());
  optimizer.save(optimizer_archive);
  archive.write("optimizer", optimizer_archive);
  save_checksummed_archive(archive, path, detail::checkpoint_written_hook());
}

void save_checksummed_archive(torch::serialize::OutputArchive& archive, const std::string& path,
                              const std::function<void(const std::string& tmp_path)>& written) {
  write_atomically(path, [&](const std::string& tmp) {
    ChecksummedWriter out(tmp);
    archive.save_to([&](const void* data, size_t size) {
      out.write(data, size);
      return size;
    });
    out.finish();
    if (written) written(tmp);
  });
}

void load_checksummed_archive(torch::serialize::InputArchive& archive, const std::string& path,
                              const std::string& what, const std::string& fix,
                              std::optional<c10::Device> device) {
  const std::string payload = read_checksummed_file(path, what, fix);
  // The checksum is right, so these bytes are the ones lockstep wrote; a failure here means the writer
  // itself was wrong (or the file was built to look like ours).
  try {
    // c10::optional: LibTorch 1.13's own (std::optional since 2.x).
    archive.load_from(payload.data(), payload.size(),
                      device ? c10::optional<c10::Device>(*device) : c10::optional<c10::Device>());
  } catch (const c10::Error& e) {
    throw std::runtime_error(what + " '" + path + "' has a correct checksum but is not a LibTorch archive (" +
                             e.what_without_backtrace() + "): " + fix);
  } catch (const std::exception& e) {  // the TorchScript importer's own errors
    throw std::runtime_error(what + " '" + path + "' has a correct checksum but is not a LibTorch archive (" +
                             e.what() + "): " + fix);
  }
}

CheckpointState load_checkpoint(const std::string& path, const std::string& model_name,
                                torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                                int tensor_parallel, int pipeline_parallel) {
  if (!std::filesystem::is_regular_file(path)) {
    throw std::runtime_error("checkpoint '" + path +
                             "' does not exist: check resume (or leave it empty to start from scratch)");
  }
  torch::serialize::InputArchive archive;
  const auto parameters = model.parameters();
  load_checksummed_archive(
      archive, path, "checkpoint",
      "resume from an older checkpoint (resume 'PATH'), copy the file again if it was copied, "
      "or start from scratch",
      parameters.empty() ? c10::Device(c10::kCPU) : parameters.front().device());
  c10::IValue version;
  if (!archive.try_read("lockstep_checkpoint_version", version)) {
    throw std::runtime_error("'" + path + "' is not a lockstep checkpoint (no lockstep_checkpoint_version)");
  }
  if (!version.isInt() || version.toInt() != kCheckpointVersion) {
    throw std::runtime_error(
        "checkpoint '" + path + "' has format version " +
        (version.isInt() ? std::to_string(version.toInt()) : std::string("(not a number)")) +
        "; this lockstep reads version " + std::to_string(kCheckpointVersion));
  }
  CheckpointState state;
  state.position.epoch = read_value(archive, path, "epoch").toInt();
  state.position.batch = read_value(archive, path, "batch").toInt();
  state.position.step = read_value(archive, path, "step").toInt();
  state.world_size = static_cast<int>(read_value(archive, path, "world_size").toInt());
  state.model = read_value(archive, path, "model_name").toStringRef();
  state.config = read_value(archive, path, "config").toStringRef();
  state.rng_states = read_tensor(archive, path, "rng_states").cpu();
  for (const auto& item : read_value(archive, path, "logged_states").toListRef()) {
    state.logged_states.push_back(item.toStringRef());
  }
  for (const auto& item : read_value(archive, path, "callback_states").toGenericDict()) {
    state.callback_states.emplace(item.key().toStringRef(), item.value().toStringRef());
  }
  at::Tensor scaler;
  if (archive.try_read("scaler_state", scaler, /*is_buffer=*/true)) state.scaler_state = scaler.cpu();
  c10::IValue parts;
  if (archive.try_read("reshard_parts", parts)) {
    const auto list = parts.toIntList();
    for (std::size_t i = 0; i + 1 < list.size(); i += 2) {
      state.reshard_parts.push_back(data::EpochPart{static_cast<int>(list.get(i)), list.get(i + 1)});
    }
  } else if (const int64_t world = read_value(archive, path, "reshard_world").toInt(); world != 0) {
    state.reshard_parts.push_back(
        data::EpochPart{static_cast<int>(world), read_value(archive, path, "reshard_batch").toInt()});
  }
  c10::IValue batches_per_step;
  if (archive.try_read("batches_per_step", batches_per_step))
    state.batches_per_step = batches_per_step.toInt();
  c10::IValue written_tensor_parallel;
  if (archive.try_read("tensor_parallel", written_tensor_parallel))
    state.tensor_parallel = static_cast<int>(written_tensor_parallel.toInt());
  c10::IValue layout;
  if (archive.try_read("tensor_parallel_layout", layout)) state.tensor_parallel_layout = layout.toStringRef();
  c10::IValue part;
  if (archive.try_read("tensor_parallel_rank", part))
    state.tensor_parallel_rank = static_cast<int>(part.toInt());
  c10::IValue save;
  if (archive.try_read("tensor_parallel_save", save)) state.tensor_parallel_save = save.toStringRef();
  c10::IValue written_pipeline_parallel;
  if (archive.try_read("pipeline_parallel", written_pipeline_parallel))
    state.pipeline_parallel = static_cast<int>(written_pipeline_parallel.toInt());
  if (state.pipeline_parallel != pipeline_parallel) {
    throw std::invalid_argument("checkpoint '" + path + "': written with pipeline_parallel " +
                                std::to_string(state.pipeline_parallel) + ", resumed with " +
                                std::to_string(pipeline_parallel) +
                                ": resume it with the pipeline_parallel it was written with");
  }
  if (state.tensor_parallel != tensor_parallel) {
    throw std::invalid_argument("checkpoint '" + path + "': written with tensor_parallel " +
                                std::to_string(state.tensor_parallel) + ", resumed with " +
                                std::to_string(tensor_parallel) +
                                ": resume it with the tensor_parallel it was written with");
  }
  if (state.model != model_name) {
    throw std::runtime_error("checkpoint '" + path + "' holds a '" + state.model + "' model, not '" +
                             model_name + "': resume with model '" + state.model +
                             "' (the module that wrote it), or start from scratch");
  }

  c10::IValue shards;
  if (archive.try_read("shards", shards)) {  // sharded: the buffers here, the rest in the shards
    const auto dir = std::filesystem::path(path).parent_path();
    for (const auto& name : shards.toListRef()) {
      state.shards.push_back((dir / name.toStringRef()).string());
      if (!std::filesystem::is_regular_file(state.shards.back())) {
        throw std::runtime_error("checkpoint '" + path + "' is sharded over " +
                                 std::to_string(shards.toListRef().size()) + " files, and '" +
                                 state.shards.back() +
                                 "' is missing: copy the checkpoint with all its shards beside it, or resume "
                                 "from another checkpoint");
      }
    }
    torch::serialize::InputArchive skeleton;
    if (!archive.try_read("model", skeleton))
      throw std::runtime_error("checkpoint '" + path + "' lacks the model's buffers (damaged?)");
    load_module_in_place(skeleton, model, "checkpoint '" + path + "'", "", /*parameters=*/false);
    return state;
  }
  torch::serialize::InputArchive model_archive;
  torch::serialize::InputArchive optimizer_archive;
  if (!archive.try_read("model", model_archive) || !archive.try_read("optimizer", optimizer_archive)) {
    throw std::runtime_error("checkpoint '" + path + "' lacks the model or the optimizer state (damaged?)");
  }
  load_module_in_place(model_archive, model, "checkpoint '" + path + "'");
  try {
    optimizer.load(optimizer_archive);
  } catch (const c10::Error& e) {
    throw std::runtime_error("checkpoint '" + path +
                             "' holds another optimizer's state (resume with the optimizer it was "
                             "written with): " +
                             e.what_without_backtrace());
  }
  return state;
}

namespace detail {
std::function<void(const std::string&)>& checkpoint_written_hook() {
  static std::function<void(const std::string&)> hook;
  return hook;
}
}  // namespace detail

at::Tensor cpu_rng_state() {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void set_cpu_rng_state(const at::Tensor& state) {
  // A copy with storage of its own: LibTorch 2.x's set_state misreads a view with a storage offset (a row
  // of the all-gathered [world, N] states crashed every rank but 0 on resume); 1.13's read it right.
  const at::Tensor own = state.clone(at::MemoryFormat::Contiguous);
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(own);
}

}  // namespace lockstep::train
