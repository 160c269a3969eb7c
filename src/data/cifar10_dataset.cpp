#include "lockstep/data/cifar10_dataset.h"

#include "file_bytes.h"
#include "lockstep/data/data_error.h"

#include <ATen/ATen.h>

#include <cstring>
#include <filesystem>
#include <vector>

namespace lockstep::data {
namespace {

constexpr int64_t kImageBytes = 3 * 32 * 32;
constexpr int64_t kRecordBytes = 1 + kImageBytes;
constexpr int64_t kClasses = 10;
constexpr const char* kSubdir = "cifar-10-batches-bin";
constexpr const char* kHowToGetCifar10 =
    "download the CIFAR-10 binary version (cifar-10-binary.tar.gz from "
    "https://www.cs.toronto.edu/~kriz/cifar.html), "
    "extract it, and give data_dir the directory that holds cifar-10-batches-bin";

std::vector<std::string> file_names(Split split) {
  if (split == Split::kTest) return {"test_batch.bin"};
  std::vector<std::string> names;
  for (int i = 1; i <= 5; ++i) names.push_back("data_batch_" + std::to_string(i) + ".bin");
  return names;
}

}  // namespace

Cifar10Dataset Cifar10Dataset::from_dir(const std::string& dir, Split split) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw DataError("Cifar10Dataset: data directory '" + dir + "' " +
                    (fs::exists(dir, ec) ? "is not a directory" : "does not exist") + "; " +
                    kHowToGetCifar10);
  }
  const std::vector<std::string> names = file_names(split);
  // The files directly in dir, or in the archive's own folder inside it.
  fs::path base = dir;
  if (!fs::exists(base / names.front(), ec) && fs::is_directory(base / kSubdir, ec)) base /= kSubdir;
  std::vector<at::Tensor> contents;
  int64_t total = 0;
  for (const std::string& name : names) {
    const std::string path = (base / name).string();
    contents.push_back(
        detail::read_file_bytes(path, "Cifar10Dataset: " + std::string(to_string(split)) + " file",
                                std::string("looked in '") + dir + "' and '" +
                                    (fs::path(dir) / kSubdir).string() + "'; " + kHowToGetCifar10));
    const int64_t size = contents.back().numel();
    if (size == 0 || size % kRecordBytes != 0) {
      throw DataError("Cifar10Dataset: file '" + path + "' has " + std::to_string(size) +
                      " bytes, expected a non-zero multiple of " + std::to_string(kRecordBytes) +
                      " (1 label byte + 3x32x32 pixel bytes per record; 10000 records = 30730000 bytes): "
                      "truncated or not the CIFAR-10 binary version; download it again");
    }
    total += size / kRecordBytes;
  }
  at::Tensor images = at::empty({total, 3, 32, 32}, at::kByte);
  at::Tensor labels = at::empty({total}, at::kLong);
  uint8_t* img = images.data_ptr<uint8_t>();
  int64_t* lab = labels.data_ptr<int64_t>();
  int64_t row = 0;
  for (size_t f = 0; f < contents.size(); ++f) {
    const uint8_t* bytes = contents[f].data_ptr<uint8_t>();
    const int64_t records = contents[f].numel() / kRecordBytes;
    for (int64_t r = 0; r < records; ++r, ++row) {
      const uint8_t* rec = bytes + r * kRecordBytes;
      if (rec[0] >= kClasses) {
        throw DataError("Cifar10Dataset: file '" + (base / names[f]).string() + "' record " +
                        std::to_string(r) + " (byte offset " + std::to_string(r * kRecordBytes) +
                        ") has label " + std::to_string(rec[0]) +
                        ", expected 0..9: corrupt file or not CIFAR-10 (CIFAR-100's "
                        "binary format has 2 label bytes)");
      }
      lab[row] = rec[0];
      std::memcpy(img + row * kImageBytes, rec + 1, kImageBytes);
    }
  }
  return Cifar10Dataset(TensorDataset(std::move(images), std::move(labels),
                                      std::string("CIFAR-10 ") + to_string(split) + " split (" +
                                          std::to_string(total) + " images 3x32x32) from " + base.string()));
}

}  // namespace lockstep::data
