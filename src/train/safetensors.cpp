// The safetensors format, written and read. See include/lockstep/train/safetensors.h.
//
// Layout (https://github.com/huggingface/safetensors, "Format"):
//   [8 bytes: N, unsigned little-endian] [N bytes: JSON header, UTF-8, space-padded] [data section]
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}, offsets relative
// to the start of the data section; the optional "__metadata__" entry maps strings to strings. The
// reference implementation requires the tensors' byte ranges to tile the data section exactly (no
// holes, no overlap, nothing after the last one); the reader here enforces the same, so that anything
// it accepts, every other reader accepts too.
#include "lockstep/train/safetensors.h"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>
#include <string_view>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <nlohmann/json.hpp>

#include "lockstep/detail/join.h"
#include "lockstep/train/atomic_file.h"

namespace lockstep::train {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors stores little-endian data; a big-endian host would need byte swapping");

constexpr std::string_view kMetadataKey = "__metadata__";
// The reference implementation refuses headers above 100 MB; so does this reader (a corrupt length must
// not make it allocate gigabytes).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DtypeName {
  at::ScalarType type;
  const char* name;
};

constexpr DtypeName kDtypes[] = {
    {at::kDouble, "F64"}, {at::kFloat, "F32"}, {at::kHalf, "F16"},  {at::kBFloat16, "BF16"},
    {at::kLong, "I64"},   {at::kInt, "I32"},   {at::kShort, "I16"}, {at::kChar, "I8"},
    {at::kByte, "U8"},    {at::kBool, "BOOL"},
};

const char* dtype_name(at::ScalarType type) {
  for (const auto& d : kDtypes) {
    if (d.type == type) return d.name;
  }
  return nullptr;
}

bool dtype_of(const std::string& name, at::ScalarType* type) {
  for (const auto& d : kDtypes) {
    if (name == d.name) {
      *type = d.type;
      return true;
    }
  }
  return false;
}

std::string known_dtypes() {
  return lockstep::detail::join(kDtypes, ", ", [](const auto& d) { return d.name; });
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error("safetensors file '" + path + "': " + what);
}

std::string join_name(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// One entry of the header, as read and checked.
struct Entry {
  std::string name;
  at::ScalarType type;
  std::vector<int64_t> shape;
  uint64_t begin;
  uint64_t end;
};

Entry parse_entry(const std::string& path, const std::string& name, const nlohmann::ordered_json& value) {
  const std::string where = "tensor '" + name + "'";
  if (!value.is_object()) fail(path, where + ": expected an object, got " + value.dump());
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!value.contains(key)) fail(path, where + ": missing \"" + key + "\"");
  }
  Entry entry{name, at::kFloat, {}, 0, 0};
  const auto& dtype = value["dtype"];
  if (!dtype.is_string() || !dtype_of(dtype.get<std::string>(), &entry.type)) {
    fail(path, where + ": unknown dtype " + dtype.dump() + " (known: " + known_dtypes() + ")");
  }
  const auto& shape = value["shape"];
  if (!shape.is_array()) fail(path, where + ": shape must be an array, got " + shape.dump());
  uint64_t numel = 1;
  for (const auto& dim : shape) {
    if (!dim.is_number_unsigned() || dim.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      fail(path, where + ": shape " + shape.dump() + " holds " + dim.dump() + ", not a size");
    }
    const uint64_t size = dim.get<uint64_t>();
    if (__builtin_mul_overflow(numel, size, &numel))
      fail(path, where + ": shape " + shape.dump() + " overflows");
    entry.shape.push_back(static_cast<int64_t>(size));
  }
  const auto& offsets = value["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned()) {
    fail(path,
         where + ": data_offsets must be [begin, end] with non-negative integers, got " + offsets.dump());
  }
  entry.begin = offsets[0].get<uint64_t>();
  entry.end = offsets[1].get<uint64_t>();
  if (entry.end < entry.begin)
    fail(path, where + ": data_offsets " + offsets.dump() + " end before they begin");
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(c10::elementSize(entry.type)), &bytes) ||
      bytes != entry.end - entry.begin) {
    fail(path, where + ": data_offsets " + offsets.dump() + " span " +
                   std::to_string(entry.end - entry.begin) + " bytes, but dtype " + dtype.get<std::string>() +
                   " and shape " + shape.dump() + " need " + std::to_string(bytes));
  }
  return entry;
}

}  // namespace

void save_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const SafetensorsMetadata& metadata) {
  // Validate and gather contiguous CPU copies before touching the file system.
  std::vector<at::Tensor> data;
  data.reserve(tensors.size());
  std::set<std::string> names;
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (name.empty()) throw std::invalid_argument("save_safetensors('" + path + "'): a tensor name is empty");
    if (name == kMetadataKey) {
      throw std::invalid_argument("save_safetensors('" + path +
                                  "'): the tensor name '__metadata__' is reserved");
    }
    if (!names.insert(name).second) {
      throw std::invalid_argument("save_safetensors('" + path + "'): tensor name '" + name +
                                  "' appears twice");
    }
    if (!tensor.defined()) {
      throw std::invalid_argument("save_safetensors('" + path + "'): tensor '" + name + "' is undefined");
    }
    const char* dtype = dtype_name(tensor.scalar_type());
    if (dtype == nullptr) {
      throw std::invalid_argument("save_safetensors('" + path + "'): tensor '" + name + "' has dtype " +
                                  std::string(c10::toString(tensor.scalar_type())) +
                                  ", which safetensors cannot hold here (supported: " + known_dtypes() + ")");
    }
    at::Tensor cpu = tensor.detach().to(at::kCPU).contiguous();
    const uint64_t bytes = static_cast<uint64_t>(cpu.numel()) * cpu.element_size();
    header[name] = {
        {"dtype", dtype}, {"shape", cpu.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(std::move(cpu));
  }
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header[std::string(kMetadataKey)] = std::move(meta);
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {  // e.g. a name that is not valid UTF-8
    throw std::invalid_argument("save_safetensors('" + path + "'): cannot encode the header: " + e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  unsigned char length[8];
  for (int i = 0; i < 8; ++i)
    length[i] = static_cast<unsigned char>(static_cast<uint64_t>(text.size()) >> (8 * i));

  write_atomically(path, [&](const std::string& tmp) {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error("cannot create '" + tmp + "' for '" + path + "'");
    out.write(reinterpret_cast<const char*>(length), sizeof(length));
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& t : data) {
      out.write(static_cast<const char*>(t.data_ptr()),
                static_cast<std::streamsize>(t.numel() * t.element_size()));
    }
    out.close();
    if (!out) throw std::runtime_error("cannot write '" + tmp + "' for '" + path + "'");
  });
}

SafetensorsFile load_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open it");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail(path, "cannot read it");

  if (bytes.size() < 8) {
    fail(path,
         "truncated: " + std::to_string(bytes.size()) + " bytes, shorter than the 8-byte header length");
  }
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | static_cast<unsigned char>(bytes[i]);
  const uint64_t available = bytes.size() - 8;
  if (header_bytes > available) {
    fail(path, "header length " + std::to_string(header_bytes) + " goes beyond the end of the file (" +
                   std::to_string(available) + " bytes follow the length; truncated or not safetensors)");
  }
  if (header_bytes > kMaxHeaderBytes) {
    fail(path, "header length " + std::to_string(header_bytes) + " exceeds the limit of " +
                   std::to_string(kMaxHeaderBytes) + " bytes");
  }
  const std::string_view text(bytes.data() + 8, header_bytes);
  if (text.empty() || text.front() != '{')
    fail(path, "the header does not start with '{' (not safetensors JSON)");

  // ordered_json keeps the file's order (ties between empty tensors keep it too); the callback catches
  // a name given twice, which a JSON parser would otherwise resolve silently by keeping the last.
  nlohmann::ordered_json header;
  std::set<std::string> top_level_keys;
  std::string duplicate;
  try {
    header = nlohmann::ordered_json::parse(
        text, [&](int depth, nlohmann::ordered_json::parse_event_t event, nlohmann::ordered_json& parsed) {
          if (depth == 1 && event == nlohmann::ordered_json::parse_event_t::key && parsed.is_string() &&
              !top_level_keys.insert(parsed.get<std::string>()).second && duplicate.empty()) {
            duplicate = parsed.get<std::string>();
          }
          return true;
        });
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    fail(path, std::string("the header is not valid JSON: ") + e.what());
  }
  if (!duplicate.empty()) fail(path, "the header names tensor '" + duplicate + "' twice");
  if (!header.is_object()) fail(path, "the header is not a JSON object");

  SafetensorsFile file;
  std::vector<Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey) {
      if (!value.is_object()) fail(path, "__metadata__ must be an object of strings, got " + value.dump());
      for (const auto& [meta_key, meta_value] : value.items()) {
        if (!meta_value.is_string()) {
          fail(path, "__metadata__ value of '" + meta_key + "' must be a string, got " + meta_value.dump());
        }
        file.metadata[meta_key] = meta_value.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(path, key, value));
  }

  // The byte ranges must tile the data section: sorted by begin, each starts where the previous ended.
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const uint64_t data_bytes = available - header_bytes;
  uint64_t expected = 0;
  const Entry* previous = nullptr;
  for (const auto& entry : entries) {
    const std::string range = "[" + std::to_string(entry.begin) + ", " + std::to_string(entry.end) + "]";
    if (entry.end > data_bytes) {
      fail(path, "tensor '" + entry.name + "': data_offsets " + range +
                     " out of range (the data section has " + std::to_string(data_bytes) +
                     " bytes; truncated?)");
    }
    if (entry.begin < expected) {
      fail(path, "tensor '" + entry.name + "': data_offsets " + range + " overlap tensor '" + previous->name +
                     "' (which ends at " + std::to_string(expected) + ")");
    }
    if (entry.begin > expected) {
      fail(path, "tensor '" + entry.name + "': data_offsets " + range + " leave a gap: bytes " +
                     std::to_string(expected) + ".." + std::to_string(entry.begin) + " belong to no tensor");
    }
    expected = entry.end;
    previous = &entry;
  }
  if (expected != data_bytes) {
    fail(path, "the data section has " + std::to_string(data_bytes) + " bytes but the tensors cover " +
                   std::to_string(expected) + " (trailing bytes)");
  }

  const char* data = bytes.data() + 8 + header_bytes;
  file.tensors.reserve(entries.size());
  for (const auto& entry : entries) {
    at::Tensor tensor = at::empty(entry.shape, at::TensorOptions().dtype(entry.type));
    const size_t size = entry.end - entry.begin;
    if (entry.type == at::kBool) {
      for (size_t i = 0; i < size; ++i) {
        const auto byte = static_cast<unsigned char>(data[entry.begin + i]);
        if (byte > 1) {
          fail(path, "tensor '" + entry.name + "': BOOL element " + std::to_string(i) + " is " +
                         std::to_string(byte) + ", not 0 or 1");
        }
      }
    }
    if (size > 0) std::memcpy(tensor.data_ptr(), data + entry.begin, size);
    file.tensors.emplace_back(entry.name, std::move(tensor));
  }
  return file;
}

std::vector<NamedTensor> module_tensors(const torch::nn::Module& module) {
  std::vector<NamedTensor> tensors;
  module.apply([&](const std::string& prefix, const torch::nn::Module& m) {
    for (const auto& p : m.named_parameters(/*recurse=*/false)) {
      if (p.value().defined()) tensors.emplace_back(join_name(prefix, p.key()), p.value());
    }
    for (const auto& b : m.named_buffers(/*recurse=*/false)) {
      if (b.value().defined()) tensors.emplace_back(join_name(prefix, b.key()), b.value());
    }
  });
  return tensors;
}

void save_module_safetensors(const std::string& path, const torch::nn::Module& module,
                             const SafetensorsMetadata& metadata) {
  save_safetensors(path, module_tensors(module), metadata);
}

}  // namespace lockstep::train
