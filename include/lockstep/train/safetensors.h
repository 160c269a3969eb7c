#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace lockstep::train {

/// A tensor and the name it is stored under ("fc1.weight").
using NamedTensor = std::pair<std::string, at::Tensor>;

/// Free-form string pairs stored in the header's "__metadata__" object (values must be strings, as the
/// format requires).
using SafetensorsMetadata = std::map<std::string, std::string>;

/// What load_safetensors() read: the tensors in the order of their data in the file (which is the order
/// save_safetensors() was given), and the metadata.
struct SafetensorsFile {
  std::vector<NamedTensor> tensors;
  SafetensorsMetadata metadata;
};

/// Writes `tensors` to `path` in the safetensors format (https://github.com/huggingface/safetensors):
/// an 8-byte little-endian header length N, N bytes of JSON
///   {"fc1.weight": {"dtype": "F32", "shape": [128, 784], "data_offsets": [0, 401408]}, ...,
///    "__metadata__": {"format": "pt"}}
/// padded with spaces to a multiple of 8 (so the data starts 8-byte aligned), then the tensors' raw
/// little-endian bytes, back to back, in the given order (the header lists them in that order too).
/// Tensors may live on any device and have any strides: each is copied to a contiguous CPU tensor first.
/// Supported dtypes: F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL.
///
/// The file is written atomically (write_atomically: temporary file, fsync, rename), so a reader sees the
/// old file or the complete new one. Throws std::invalid_argument for an empty, duplicate or reserved
/// ("__metadata__") name, an undefined tensor or an unsupported dtype (naming the tensor and the dtype),
/// and std::runtime_error when writing fails. Not thread-safe for the same `path`.
///
/// Example:
///   save_safetensors("ckpt/final.safetensors", {{"w", torch::ones({2, 3})}}, {{"format", "pt"}});
void save_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const SafetensorsMetadata& metadata = {});

/// Reads a safetensors file into CPU tensors (copies; the file is not kept open). Everything is
/// validated: the header length lies within the file, the header is a well-formed JSON object, each
/// entry has a known dtype, a shape of non-negative integers and data_offsets [begin, end] whose
/// length is numel × element size, the data ranges are in range, contiguous and non-overlapping and
/// cover the data section exactly, and BOOL bytes are 0 or 1. Anything else throws std::runtime_error
/// "safetensors file 'PATH': WHAT IS WRONG".
///
/// Example:
///   SafetensorsFile file = load_safetensors("ckpt/final.safetensors");
///   for (const auto& [name, tensor] : file.tensors) std::cout << name << " " << tensor.sizes() << "\n";
SafetensorsFile load_safetensors(const std::string& path);

/// The tensors of `module` as PyTorch's state_dict() orders and names them: for each submodule in
/// depth-first order, its parameters, then its buffers, named by their path ("layer1.0.bn1.running_mean").
/// Undefined tensors (e.g. an absent bias) are skipped. The tensors are the module's own (not copies).
std::vector<NamedTensor> module_tensors(const torch::nn::Module& module);

/// save_safetensors(path, module_tensors(module), metadata): a module's parameters and buffers in a
/// file that Python reads with `safetensors.torch.load_file`, or with json + numpy alone.
///
/// Example:
///   save_module_safetensors("ckpt/final.safetensors", *model, {{"format", "pt"}});
void save_module_safetensors(const std::string& path, const torch::nn::Module& module,
                             const SafetensorsMetadata& metadata = {});

}  // namespace lockstep::train
