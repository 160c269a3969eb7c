// The data layer's speed, moved out of the tests (a test asserts what a loader builds, never how fast):
//   build/bench/data_bench [EPOCHS]
// 1. Building seed-MLP batches (64 x 1x28x28, normalised) with lockstep's Loader in the training thread,
//    against the bare LibTorch way on the same indices (index_select, to float, normalise), same run.
// 2. Loading Fashion-MNIST's train split from its .gz files (when dataset-fashion-mnist is installed).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "lockstep/data/idx_dataset.h"
#include "lockstep/data/loader.h"
#include "lockstep/data/synthetic_dataset.h"

namespace {

using Clock = std::chrono::steady_clock;
using lockstep::data::Loader;
using lockstep::data::LoaderOptions;
using lockstep::data::Split;
using lockstep::data::SyntheticDataset;
using lockstep::data::SyntheticOptions;
using lockstep::data::TransformOptions;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Milliseconds per batch of the bare LibTorch loop over `indices`, batch 64.
double bare_ms_per_batch(const at::Tensor& images, const std::vector<int64_t>& indices, int epochs) {
  const at::Tensor order = at::tensor(indices, at::kLong);
  int64_t batches = 0;
  const auto start = Clock::now();
  for (int epoch = 0; epoch < epochs; ++epoch) {
    for (int64_t at_index = 0; at_index + 64 <= order.size(0); at_index += 64) {
      const at::Tensor batch = images.index_select(0, order.slice(0, at_index, at_index + 64))
                                   .to(at::kFloat)
                                   .div_(255)
                                   .sub_(0.2860)
                                   .div_(0.3530);
      ++batches;
    }
  }
  return ms_since(start) / static_cast<double>(batches);
}

double loader_ms_per_batch(const std::shared_ptr<const SyntheticDataset>& data,
                           const std::vector<int64_t>& indices, int epochs) {
  Loader loader(data, LoaderOptions(64).transform(TransformOptions().mean({0.2860}).std({0.3530})));
  int64_t batches = 0;
  const auto start = Clock::now();
  for (int epoch = 0; epoch < epochs; ++epoch) {
    loader.start_epoch(indices, epoch);
    while (auto batch = loader.next()) batches += batch->target.size(0) == 64;
  }
  return ms_since(start) / static_cast<double>(batches);
}

}  // namespace

int main(int argc, char** argv) {
  const int epochs = argc > 1 ? std::atoi(argv[1]) : 10;
  at::set_num_threads(1);
  auto data = std::make_shared<const SyntheticDataset>(SyntheticOptions().size(4096), Split::kTrain);
  const at::Tensor order = at::randperm(4096, at::TensorOptions().dtype(at::kLong));
  const std::vector<int64_t> indices(order.data_ptr<int64_t>(), order.data_ptr<int64_t>() + 4096);
  const double bare = bare_ms_per_batch(data->images(), indices, epochs);
  const double loader = loader_ms_per_batch(data, indices, epochs);
  std::printf("seed-MLP batch (64 x 1x28x28, normalised), %d epochs of 4096 images, 1 thread:\n", epochs);
  std::printf("  bare LibTorch (index_select, to float, normalise)  %.4f ms/batch\n", bare);
  std::printf("  lockstep Loader (no workers)                       %.4f ms/batch  (%.2fx the bare loop)\n",
              loader, loader / bare);
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (std::filesystem::exists(dir + "/train-images-idx3-ubyte.gz")) {
    const auto start = Clock::now();
    const lockstep::data::IdxDataset train = lockstep::data::IdxDataset::from_dir(dir, Split::kTrain);
    std::printf("Fashion-MNIST train split (%lld images, .gz) loaded in %.3f s\n",
                static_cast<long long>(train.size()), ms_since(start) / 1000.0);
  } else {
    std::printf("Fashion-MNIST: %s is absent (apt-get install dataset-fashion-mnist)\n", dir.c_str());
  }
  return 0;
}
