// `lockstep export`: see include/lockstep/train/checkpoint_export.h.
#include "lockstep/train/checkpoint_export.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <system_error>
#include <vector>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/serialize/input-archive.h>

#include <nlohmann/json.hpp>

#include "lockstep/models/tensor_parallel_layout.h"
#include "lockstep/train/checkpoint.h"
#include "lockstep/train/file_checksum.h"

namespace lockstep::train {
namespace {

namespace fs = std::filesystem;

// The archive's tensors in the order they were written, named by their dotted path. Module::save writes
// a module's parameters, then its buffers, then each child as a sub-archive, so the attribute order of
// the archive is PyTorch's state_dict() order, the one module_tensors() gives. Other attributes (the
// archive's own "training" flag) are neither tensors nor modules and are skipped.
void collect_tensors(torch::serialize::InputArchive& archive, const std::string& prefix,
                     std::vector<NamedTensor>& tensors) {
  for (const std::string& key : archive.keys()) {
    torch::serialize::InputArchive child;
    if (archive.try_read(key, child)) {
      collect_tensors(child, prefix + key + ".", tensors);
      continue;
    }
    at::Tensor tensor;
    if (archive.try_read(key, tensor) && tensor.defined()) tensors.emplace_back(prefix + key, tensor);
  }
}

// Like ensure_writable_dir, with the export's own fix in the messages.
void check_output_dir(const std::string& output) {
  const fs::path target(output);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code error;
  fs::create_directories(dir, error);
  if (error) {
    throw std::runtime_error("cannot create the output directory '" + dir.string() + "': " + error.message() +
                             " (choose another output with -o PATH)");
  }
  const std::string probe = (dir / (".lockstep-probe." + std::to_string(::getpid()))).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    throw std::runtime_error("cannot write into the output directory '" + dir.string() +
                             "': " + std::strerror(errno) + " (choose another output with -o PATH)");
  }
  ::close(fd);
  std::remove(probe.c_str());
}

// A sharded checkpoint's parameters (its model archive holds empty stand-ins in their places): each whole
// parameter put together from its chunks, shard by shard in rank order (shard_checkpoint.h).
void fill_sharded_parameters(torch::serialize::InputArchive& archive, const std::string& input,
                             const c10::IValue& shard_names, std::vector<NamedTensor>& tensors) {
  c10::IValue names, shapes;
  if (!archive.try_read("parameter_names", names) || !archive.try_read("parameter_shapes", shapes)) {
    throw std::runtime_error("sharded checkpoint '" + input + "' lacks its parameters' names (damaged?)");
  }
  const auto& name_list = names.toListRef();
  std::vector<std::vector<at::Tensor>> parts(name_list.size());
  const fs::path dir = fs::path(input).parent_path();
  for (const auto& shard : shard_names.toListRef()) {
    const std::string path = (dir / shard.toStringRef()).string();
    torch::serialize::InputArchive chunks;
    load_checksummed_archive(
        chunks, path, "checkpoint shard",
        "copy the checkpoint with all its shards (" + input + ".step-S.shard-R-of-W) again");
    for (size_t i = 0; i < parts.size(); ++i) {
      at::Tensor chunk;
      if (!chunks.try_read("chunk." + std::to_string(i), chunk, /*is_buffer=*/true))
        throw std::runtime_error("checkpoint shard '" + path + "' has no chunk of parameter " +
                                 std::to_string(i));
      parts[i].push_back(chunk);
    }
  }
  std::map<std::string, at::Tensor> whole;
  const auto& shape_list = shapes.toListRef();
  for (size_t i = 0; i < parts.size(); ++i)
    whole[name_list[i].toStringRef()] = at::cat(parts[i]).view(shape_list.at(i).toIntVector());
  for (auto& [name, tensor] : tensors) {
    if (const auto it = whole.find(name); it != whole.end()) tensor = it->second;
  }
}

// A checkpoint's model tensors, a sharded checkpoint's parameters put together from its shards.
std::vector<NamedTensor> model_tensors(torch::serialize::InputArchive& archive, const std::string& input) {
  torch::serialize::InputArchive model;
  if (!archive.try_read("model", model)) {
    throw std::runtime_error("checkpoint '" + input + "' has no model (damaged?)");
  }
  std::vector<NamedTensor> tensors;
  collect_tensors(model, "", tensors);
  c10::IValue shards;
  if (archive.try_read("shards", shards)) fill_sharded_parameters(archive, input, shards, tensors);
  return tensors;
}

// A tensor-parallel checkpoint (CheckpointState::tensor_parallel): `tensors` are rank 0's part, `input`;
// each split parameter is put together with the other parts' slices (tensor_parallel_path(input, r, save),
// of the save rank 0's part names) by the layout rank 0's part records.
void join_tensor_parallel_parts(torch::serialize::InputArchive& archive, const std::string& input, int parts,
                                std::vector<NamedTensor>& tensors) {
  c10::IValue layout_text;
  c10::IValue save_value;
  if (!archive.try_read("tensor_parallel_layout", layout_text) ||
      !archive.try_read("tensor_parallel_save", save_value)) {
    throw std::runtime_error("checkpoint '" + input +
                             "' is a tensor-parallel part without the layout of its parameters (damaged?)");
  }
  const std::string save = save_value.toStringRef();
  const nlohmann::json layout = nlohmann::json::parse(layout_text.toStringRef());
  std::vector<std::map<std::string, at::Tensor>> others;
  std::vector<std::string> paths;
  for (int r = 1; r < parts; ++r) {
    paths.push_back(tensor_parallel_path(input, r, save));
    const std::string& path = paths.back();
    torch::serialize::InputArchive part;
    load_checksummed_archive(part, path, "checkpoint part",
                             "copy the checkpoint with all its parts (" + input + ".tp<r>." + save +
                                 " for r = 1 to " + std::to_string(parts - 1) + ") again");
    c10::IValue part_save;
    if (!part.try_read("tensor_parallel_save", part_save) || part_save.toStringRef() != save) {
      throw std::runtime_error("checkpoint part '" + path + "' is not of the save '" + save + "' that '" +
                               input + "' names: the parts are of different saves");
    }
    std::map<std::string, at::Tensor> named;
    for (auto& [name, tensor] : model_tensors(part, path)) named[name] = tensor;
    others.push_back(std::move(named));
  }
  for (auto& [name, tensor] : tensors) {
    const auto split = layout.find(name);
    if (split == layout.end()) continue;  // whole in every part
    std::vector<at::Tensor> slices{tensor};
    for (size_t r = 0; r < others.size(); ++r) {
      const auto found = others[r].find(name);
      if (found == others[r].end()) {
        throw std::runtime_error("checkpoint part '" + paths[r] + "' has no " + name +
                                 ": the parts are of different runs");
      }
      slices.push_back(found->second);
    }
    tensor = models::whole_tensor({(*split)[0].get<int64_t>(), (*split)[1].get<int64_t>()}, slices);
  }
}

const char* kWhatIsAccepted =
    "give a checkpoint of `lockstep fit` (DIR/last.ckpt, a ModelCheckpoint file) or its final weights "
    "(DIR/final.pt)";

std::runtime_error not_an_archive(const std::string& input, const std::string& why) {
  return std::runtime_error("'" + input + "' is not a lockstep checkpoint or a LibTorch module archive (" +
                            why +
                            "; truncated, damaged, or written by Python's torch.save?): " + kWhatIsAccepted);
}

}  // namespace

std::string default_export_path(const std::string& input) {
  return fs::path(input).replace_extension(".safetensors").string();
}

ExportResult export_safetensors(const std::string& input, const std::string& output_arg) {
  ExportResult result;
  result.input = input;
  result.output = output_arg.empty() ? default_export_path(input) : output_arg;
  std::error_code error;
  if (!fs::exists(input, error)) {
    throw std::runtime_error("'" + input + "' does not exist: " + kWhatIsAccepted);
  }
  if (!fs::is_regular_file(input, error)) {
    throw std::runtime_error("'" + input + "' is not a file: " + kWhatIsAccepted);
  }
  if (fs::equivalent(input, result.output, error)) {
    throw std::runtime_error("the output '" + result.output +
                             "' is the input itself: choose another with -o PATH");
  }
  check_output_dir(result.output);  // before the (slow) load: a bad -o fails at once

  // Checkpoints end with lockstep's checksum trailer, verified here like on resume; final.pt (and other
  // LibTorch module archives) have none and are read as they are.
  const std::string fix = "export an older checkpoint, or copy the file again if it was copied";
  std::string bytes = read_whole_file(input, "checkpoint");
  const bool checksummed = ends_with_checksum_trailer(bytes);
  if (checksummed) strip_checksum_trailer(bytes, "checkpoint '" + input + "'", fix);
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(bytes.data(), bytes.size());
  } catch (const c10::Error& e) {
    throw not_an_archive(input, e.what_without_backtrace());
  } catch (const std::exception& e) {  // the TorchScript importer's own errors
    throw not_an_archive(input, e.what());
  }

  SafetensorsMetadata metadata{
      {"format", "pt"}, {"producer", "lockstep export"}, {"source", fs::path(input).filename().string()}};
  std::vector<NamedTensor> tensors;
  c10::IValue version;
  if (archive.try_read("lockstep_checkpoint_version", version)) {
    if (!version.isInt() || version.toInt() != kCheckpointVersion) {
      throw std::runtime_error(
          "checkpoint '" + input + "' has format version " +
          (version.isInt() ? std::to_string(version.toInt()) : std::string("(not a number)")) +
          "; this lockstep exports version " + std::to_string(kCheckpointVersion) +
          " (export it with the lockstep that wrote it)");
    }
    if (!checksummed) {
      throw std::runtime_error(
          "checkpoint '" + input +
          "' does not end with lockstep's checksum trailer: it is "
          "truncated (a copy or a write that did not finish), or it was not written by this "
          "lockstep: " +
          fix);
    }
    result.kind = "checkpoint";
    tensors = model_tensors(archive, input);
    c10::IValue shards;
    if (archive.try_read("shards", shards)) metadata["shards"] = std::to_string(shards.toListRef().size());
    c10::IValue tensor_parallel;
    c10::IValue part;
    c10::IValue pipeline_parallel;
    if (archive.try_read("pipeline_parallel", pipeline_parallel))
      metadata["pipeline_parallel"] = std::to_string(pipeline_parallel.toInt());
    const bool split = archive.try_read("tensor_parallel", tensor_parallel) && tensor_parallel.toInt() > 1;
    // A pipeline stage's part holds the whole model (its stage's parameters in its shards, the others'
    // whole beside them); a tensor-parallel rank's, slices.
    if (split && archive.try_read("tensor_parallel_rank", part) && part.toInt() != 0) {
      throw std::runtime_error("'" + input + "' is tensor-parallel rank " + std::to_string(part.toInt()) +
                               "'s part of a checkpoint, which holds slices only: export the checkpoint "
                               "itself (the file without the '.tp" +
                               std::to_string(part.toInt()) + ".step-S-...' ending), which names its parts");
    }
    if (split) {
      join_tensor_parallel_parts(archive, input, static_cast<int>(tensor_parallel.toInt()), tensors);
      metadata["tensor_parallel"] = std::to_string(tensor_parallel.toInt());
    }
    for (const char* key : {"model_name", "epoch", "step"}) {
      c10::IValue value;
      if (!archive.try_read(key, value)) continue;
      const std::string name = std::string(key) == "model_name" ? "model" : key;
      if (value.isString()) metadata[name] = value.toStringRef();
      if (value.isInt()) metadata[name] = std::to_string(value.toInt());
    }
  } else {
    result.kind = "module";
    collect_tensors(archive, "", tensors);
  }
  if (tensors.empty()) {
    throw std::runtime_error("'" + input + "' is a LibTorch archive without tensors: " + kWhatIsAccepted);
  }
  save_safetensors(result.output, tensors, metadata);
  result.tensors = tensors.size();
  for (const auto& named : tensors) result.values += named.second.numel();
  result.metadata = std::move(metadata);
  return result;
}

}  // namespace lockstep::train
