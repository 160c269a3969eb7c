// The fuzz targets whose parsers read through LibTorch (fuzz_target.h): safetensors files, the checksum
// trailer of checkpoints, whole checkpoints, IDX and CIFAR-10 files, and the progress records ranks read
// from the store.
#include <torch/torch.h>

#include <string>

#include "../src/comm/progress.h"
#include "fuzz_target.h"
#include "lockstep/data/cifar10_dataset.h"
#include "lockstep/data/idx_dataset.h"
#include "lockstep/train/checkpoint.h"
#include "lockstep/train/file_checksum.h"
#include "lockstep/train/safetensors.h"

namespace lockstep::fuzz {
namespace {

void safetensors(const uint8_t* data, size_t size) {
  const std::string path = write_input_file("model.safetensors", data, size);
  expect_named_error({path}, [&] { (void)train::load_safetensors(path); });
}

void checksum(const uint8_t* data, size_t size) {
  const std::string path = write_input_file("file.ckpt", data, size);
  expect_named_error({path}, [&] { (void)train::read_checksummed_file(path, "fuzzed file", "fix it"); });
}

// A checkpoint for a Linear(4, 2) and SGD: the checksum, the archive (LibTorch's zip reader) and
// lockstep's checks of the model's names and shapes.
void checkpoint(const uint8_t* data, size_t size) {
  torch::nn::Linear model(4, 2);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  const std::string path = write_input_file("last.ckpt", data, size);
  expect_named_error({path}, [&] { (void)train::load_checkpoint(path, "fuzz-linear", *model, optimizer); });
}

// The first two bytes say where the images file ends and the labels file begins.
void idx(const uint8_t* data, size_t size) {
  if (size < 2) return;
  const size_t split = std::min<size_t>(size - 2, size_t{data[0]} | (size_t{data[1]} << 8));
  const std::string images = write_input_file("images-idx3-ubyte", data + 2, split);
  const std::string labels = write_input_file("labels-idx1-ubyte", data + 2 + split, size - 2 - split);
  expect_named_error({images, labels}, [&] { (void)data::IdxDataset(images, labels); });
}

void cifar10(const uint8_t* data, size_t size) {
  const std::string file = write_input_file("test_batch.bin", data, size);
  const std::string dir = file.substr(0, file.rfind('/'));
  expect_named_error({dir}, [&] { (void)data::Cifar10Dataset::from_dir(dir, data::Split::kTest); });
}

void progress(const uint8_t* data, size_t size) {
  const std::string record(reinterpret_cast<const char*>(data), size);
  expect_named_error({"progress record"}, [&] { (void)comm::detail::ProgressRecord::parse(record); });
}

}  // namespace

const Target kTargets[] = {
    {"safetensors", safetensors}, {"checksum", checksum}, {"checkpoint", checkpoint}, {"idx", idx},
    {"cifar10", cifar10},         {"progress", progress},
};
const size_t kTargetCount = sizeof(kTargets) / sizeof(kTargets[0]);

}  // namespace lockstep::fuzz
