// The bare LibTorch training loop that W1 compares `lockstep fit` against: one process, no process group,
// no DDP, no loader threads. Fashion-MNIST is loaded once and normalised once into a float tensor held in
// memory; each epoch shuffles with torch::randperm and gathers batches with index_select.
//
//   build/bench/bare_loop [--data-dir DIR] [--epochs N] [--batch-size B] [--threads T] [--seed S]
//                         [--limit-train-batches N] [--optimizer torch|fused] [--device cpu|cuda]
//
// --optimizer torch (the default, the W1 baseline) is LibTorch's Adam; fused is lockstep's FusedAdam
// (bit-identical updates, one pass per parameter), to show how much of lockstep fit's speed is its
// optimizer rather than its data-parallel engine.
//
// --device cuda keeps the data and the model on cuda:0 and shuffles there (the issue's GPU baseline: "a
// bare LibTorch C++ loop, data on the GPU, randperm, index_select"); the loss is still read each step.
//
// Prints one JSON line per epoch: {"epoch", "train_loss", "epoch_s", "samples_per_s", "steps"}.
// epoch_s is the wall time of the training part only (shuffle + gather + forward/backward/step).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include <ATen/Parallel.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adam.h>
#include <torch/torch.h>

#include "lockstep/data/idx_dataset.h"
#include "lockstep/models/mlp.h"
#include "lockstep/optim/fused_adam.h"

int main(int argc, char** argv) {
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int epochs = 3;
  int64_t batch = 64;
  int threads = 1;
  uint64_t seed = 0;
  int64_t limit = 0;
  std::string optimizer_name = "torch";
  std::string device_name = "cpu";
  for (int i = 1; i < argc; ++i) {
    auto next = [&](const char* flag) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", flag);
        std::exit(2);
      }
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--data-dir"))
      data_dir = next("--data-dir");
    else if (!std::strcmp(argv[i], "--epochs"))
      epochs = std::atoi(next("--epochs"));
    else if (!std::strcmp(argv[i], "--batch-size"))
      batch = std::atoll(next("--batch-size"));
    else if (!std::strcmp(argv[i], "--threads"))
      threads = std::atoi(next("--threads"));
    else if (!std::strcmp(argv[i], "--seed"))
      seed = std::strtoull(next("--seed"), nullptr, 10);
    else if (!std::strcmp(argv[i], "--limit-train-batches"))
      limit = std::atoll(next("--limit-train-batches"));
    else if (!std::strcmp(argv[i], "--optimizer"))
      optimizer_name = next("--optimizer");
    else if (!std::strcmp(argv[i], "--device"))
      device_name = next("--device");
    else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  at::set_num_threads(threads);
  torch::manual_seed(seed);
  if (device_name != "cpu" && device_name != "cuda") {
    std::fprintf(stderr, "--device must be cpu or cuda, got %s\n", device_name.c_str());
    return 2;
  }
  if (device_name == "cuda" && !torch::cuda::is_available()) {
    std::fprintf(stderr, "--device cuda: this LibTorch sees no CUDA device\n");
    return 2;
  }
  const torch::Device device =
      device_name == "cuda" ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);

  auto train = lockstep::data::IdxDataset::from_dir(data_dir, lockstep::data::Split::kTrain);
  // Same normalisation as lockstep fit and the peer: x / 255, then (x - 0.2860) / 0.3530, in float32.
  at::Tensor images = (((train.images().to(at::kFloat) / 255.0f) - 0.2860f) / 0.3530f).to(device);
  at::Tensor labels = train.labels().to(device);
  const int64_t n = train.size();

  lockstep::models::Mlp model;
  model->to(device);
  model->train();
  if (optimizer_name != "torch" && optimizer_name != "fused") {
    std::fprintf(stderr, "--optimizer must be torch or fused, got %s\n", optimizer_name.c_str());
    return 2;
  }
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  if (optimizer_name == "fused") {
    optimizer =
        std::make_unique<lockstep::optim::FusedAdam>(model->parameters(), torch::optim::AdamOptions(1e-3));
  } else {
    optimizer = std::make_unique<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(1e-3));
  }

  int64_t steps_per_epoch = n / batch + (n % batch ? 1 : 0);  // last partial batch kept, like fit
  if (limit > 0 && limit < steps_per_epoch) steps_per_epoch = limit;

  for (int epoch = 0; epoch < epochs; ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    at::Tensor perm = torch::randperm(n, at::TensorOptions().dtype(at::kLong).device(device));
    double loss_sum = 0.0;
    int64_t samples = 0;
    for (int64_t s = 0; s < steps_per_epoch; ++s) {
      const int64_t begin = s * batch;
      const int64_t end = std::min(n, begin + batch);
      at::Tensor idx = perm.slice(0, begin, end);
      at::Tensor x = images.index_select(0, idx);
      at::Tensor y = labels.index_select(0, idx);
      optimizer->zero_grad();
      at::Tensor loss = torch::nn::functional::cross_entropy(model->forward(x), y);
      loss.backward();
      optimizer->step();
      loss_sum += loss.item<double>();
      samples += end - begin;
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf(
        "{\"epoch\": %d, \"train_loss\": %.6f, \"epoch_s\": %.4f, \"samples_per_s\": %.1f, \"steps\": "
        "%lld}\n",
        epoch, loss_sum / static_cast<double>(steps_per_epoch), secs, static_cast<double>(samples) / secs,
        static_cast<long long>(steps_per_epoch));
    std::fflush(stdout);
  }
  return 0;
}
