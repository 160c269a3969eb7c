#include "lockstep/data/idx_dataset.h"

#include "file_bytes.h"
#include "lockstep/data/data_error.h"

#include <ATen/ATen.h>

#include <cstdio>
#include <cstring>
#include <filesystem>

namespace lockstep::data {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;  // uint8, 3 dimensions
constexpr uint32_t kLabelsMagic = 0x00000801;  // uint8, 1 dimension
constexpr uint32_t kMaxSide = 1u << 16;        // larger images are taken as a corrupt header
constexpr const char* kHowToGetFashionMnist =
    "install dataset-fashion-mnist (apt-get install dataset-fashion-mnist; it puts Fashion-MNIST in "
    "/usr/share/datasets/fashion-mnist) or give data_dir a directory holding the IDX files";

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08X", v);
  return buf;
}

uint32_t big_endian_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) << 24 | static_cast<uint32_t>(p[1]) << 16 |
         static_cast<uint32_t>(p[2]) << 8 | static_cast<uint32_t>(p[3]);
}

// Checks an IDX header (magic + `dims` big-endian sizes) and the payload length; returns the sizes.
std::vector<uint32_t> parse_header(const at::Tensor& file, const std::string& path, const char* who,
                                   uint32_t magic, int dims) {
  const uint8_t* bytes = file.data_ptr<uint8_t>();
  const auto size = static_cast<size_t>(file.numel());
  const size_t header = 4 + 4 * static_cast<size_t>(dims);
  auto too_short = [&] {
    throw DataError(std::string(who) + " '" + path + "' is too short for an IDX header: expected at least " +
                    std::to_string(header) + " bytes, got " + std::to_string(size) +
                    " (truncated or not an IDX file)");
  };
  if (size < 4) too_short();
  const uint32_t got = big_endian_u32(bytes);
  if (got != magic) {
    throw DataError(std::string(who) + " '" + path + "' has the wrong IDX magic number: expected " +
                    hex(magic) + ", got " + hex(got) +
                    (got == kImagesMagic || got == kLabelsMagic ? " (images and labels files swapped?)"
                                                                : " (not an MNIST-style IDX file)"));
  }
  if (size < header) too_short();
  std::vector<uint32_t> sizes(static_cast<size_t>(dims));
  uint64_t payload = 1;
  for (int d = 0; d < dims; ++d) {
    sizes[static_cast<size_t>(d)] = big_endian_u32(bytes + 4 + 4 * d);
    const uint32_t s = sizes[static_cast<size_t>(d)];
    if (s == 0 || (d > 0 && s > kMaxSide)) {
      throw DataError(std::string(who) + " '" + path + "' has an implausible dimension " + std::to_string(d) +
                      " of " + std::to_string(s) + " in its IDX header (expected 1.." +
                      (d == 0 ? std::string("2^32-1") : std::to_string(kMaxSide)) + "): corrupt file");
    }
    payload *= s;
  }
  const uint64_t have = size - header;
  if (have != payload) {
    throw DataError(
        std::string(who) + " '" + path + "': expected " + std::to_string(payload) +
        " bytes of data after the " + std::to_string(header) + "-byte IDX header (as its sizes say), got " +
        std::to_string(have) +
        (have < payload ? " (the file is truncated; download it again)" : " (trailing bytes: corrupt file)"));
  }
  return sizes;
}

TensorDataset load(const std::string& images_file, const std::string& labels_file) {
  const at::Tensor image_bytes = detail::read_file_bytes(images_file, "IdxDataset: images file");
  const std::vector<uint32_t> isz =
      parse_header(image_bytes, images_file, "IdxDataset: images file", kImagesMagic, 3);
  const at::Tensor label_bytes = detail::read_file_bytes(labels_file, "IdxDataset: labels file");
  const std::vector<uint32_t> lsz =
      parse_header(label_bytes, labels_file, "IdxDataset: labels file", kLabelsMagic, 1);
  if (isz[0] != lsz[0]) {
    throw DataError("IdxDataset: images file '" + images_file + "' holds " + std::to_string(isz[0]) +
                    " images but labels file '" + labels_file + "' holds " + std::to_string(lsz[0]) +
                    " labels; pass files of the same split (train-* with train-*, t10k-* with t10k-*)");
  }
  const int64_t n = isz[0], h = isz[1], w = isz[2];
  // The images are the file's bytes after the header: a view, no copy.
  at::Tensor images = image_bytes.narrow(0, 16, n * h * w).view({n, 1, h, w});
  at::Tensor labels = at::empty({n}, at::kLong);
  int64_t* l = labels.data_ptr<int64_t>();
  const uint8_t* src = label_bytes.data_ptr<uint8_t>() + 8;
  for (int64_t i = 0; i < n; ++i) l[i] = src[i];
  return TensorDataset(std::move(images), std::move(labels),
                       "IDX (" + std::to_string(n) + " images 1x" + std::to_string(h) + "x" +
                           std::to_string(w) + ") from " + images_file);
}

// dir/name when it exists, else dir/name.gz when that exists, else "".
std::string find_file(const std::filesystem::path& dir, const std::string& name) {
  std::error_code ec;
  for (const std::string& candidate : {name, name + ".gz"}) {
    if (std::filesystem::is_regular_file(dir / candidate, ec)) return (dir / candidate).string();
  }
  return "";
}

}  // namespace

IdxDataset::IdxDataset(const std::string& images_file, const std::string& labels_file)
    : TensorDataset(load(images_file, labels_file)) {}

IdxDataset IdxDataset::from_dir(const std::string& dir, Split split) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    throw DataError("IdxDataset: data directory '" + dir + "' " +
                    (std::filesystem::exists(dir, ec) ? "is not a directory" : "does not exist") + "; " +
                    kHowToGetFashionMnist);
  }
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  const std::string images_name = prefix + "-images-idx3-ubyte";
  const std::string labels_name = prefix + "-labels-idx1-ubyte";
  const std::string images_file = find_file(dir, images_name);
  const std::string labels_file = find_file(dir, labels_name);
  for (const auto& [file, name] :
       {std::pair{images_file, images_name}, std::pair{labels_file, labels_name}}) {
    if (file.empty()) {
      throw DataError("IdxDataset: no " + name + " or " + name + ".gz in '" + dir + "' (needed for the " +
                      to_string(split) + " split); " + kHowToGetFashionMnist);
    }
  }
  TensorDataset loaded = load(images_file, labels_file);
  const std::string description = std::string("IDX ") + to_string(split) + " split (" +
                                  std::to_string(loaded.size()) + " images " +
                                  std::to_string(loaded.channels()) + "x" + std::to_string(loaded.height()) +
                                  "x" + std::to_string(loaded.width()) + ") from " + dir;
  return IdxDataset(TensorDataset(loaded.images(), loaded.labels(), description));
}

}  // namespace lockstep::data
