#pragma once

#include <cstdint>
#include <string>

#include "lockstep/train/safetensors.h"

namespace lockstep::train {

/// What export_safetensors() read and wrote.
struct ExportResult {
  std::string input;
  std::string output;
  /// "checkpoint" (written by save_checkpoint: last.ckpt, a ModelCheckpoint file) or "module" (a LibTorch
  /// module archive: final.pt, torch::save(model, path)).
  std::string kind;
  std::size_t tensors = 0;
  int64_t values = 0;            ///< elements of all tensors
  SafetensorsMetadata metadata;  ///< what the file's "__metadata__" holds
};

/// The output path export_safetensors() uses when given none: `input` with its extension replaced by
/// ".safetensors" ("ck/last.ckpt" -> "ck/last.safetensors", "ck/final.pt" -> "ck/final.safetensors").
std::string default_export_path(const std::string& input);

/// Writes the model weights of a lockstep checkpoint or of a LibTorch module archive to `output` in the
/// safetensors format, without knowing the model's class: the archive's tensors are enumerated as stored.
/// The names and their order are those save_module_safetensors() writes for the same model (PyTorch's
/// state_dict(): per submodule, depth first, its parameters then its buffers), so exporting final.pt gives
/// the tensors of final.safetensors. A checkpoint contributes only its model (not the optimizer, RNG or
/// position); its model name, epoch and step go into the metadata, with "producer": "lockstep export"
/// and "source": the input's file name. A sharded checkpoint (zero1, zero2, fsdp: shard_checkpoint.h) is
/// consolidated: each parameter put together from the shard files beside it ("shards" in the metadata). So
/// is a tensor-parallel one (CheckpointState::tensor_parallel > 1; give rank 0's part, `PATH`): each split
/// parameter put together from the parts PATH.tp<r> beside it by the layout it records ("tensor_parallel"
/// in the metadata).
///
/// `output` "" means default_export_path(input); its directory is created if missing. The file is written
/// atomically (nothing half-written, an existing file stays intact on failure).
///
/// Throws std::runtime_error naming the path and the fix when `input` is missing, is not a LibTorch
/// archive (truncated, damaged, a Python pickle), is a checkpoint of another format version, or holds no
/// tensors; when `output` is `input`; and when the output directory cannot be written.
///
/// Example:
///   ExportResult r = export_safetensors("ck/last.ckpt", "");  // writes ck/last.safetensors
///   std::cout << r.tensors << " tensors to " << r.output << "\n";
ExportResult export_safetensors(const std::string& input, const std::string& output);

}  // namespace lockstep::train
