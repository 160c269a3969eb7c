#pragma once

// Internal to the data layer: reading a dataset file whole, gunzipping it when it is gzipped.

#include <ATen/core/Tensor.h>

#include <string>

namespace lockstep::data::detail {

/// The bytes of the file at `path` as a 1-D uint8 CPU tensor (contiguous; written once, never
/// zero-filled first, so a view of it can be a dataset's images without another copy), decompressed when the
/// file starts with the gzip magic bytes 1f 8b (whatever its name; concatenated gzip members are joined).
/// Throws DataError whose message starts with `who` (e.g. "IdxDataset: images file") and names the path, when
/// the file is missing, unreadable or a corrupt/truncated gzip stream. `missing_hint` is appended when the
/// file does not exist.
at::Tensor read_file_bytes(const std::string& path, const std::string& who,
                           const std::string& missing_hint = "");

}  // namespace lockstep::data::detail
