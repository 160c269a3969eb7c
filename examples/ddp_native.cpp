// Native DDP in the seeds' style (000, part 2: "Native PyTorch DDP"), in C++ with lockstep:
// init the process group from the launcher's environment, wrap the model, shard the data with a
// DistributedSampler, and keep the ordinary training loop.
//
//   build/lockstep run --nproc-per-node 2 --standalone -- build/examples/ddp_native [epochs]
//
// Data: a synthetic, learnable 10-class problem shaped like MNIST (784 features), generated identically
// on every rank, so the example needs no files (trainer.cpp and accelerate.cpp read Fashion-MNIST).
#include <cstdio>
#include <cstdlib>
#include <exception>

#include <torch/nn.h>
#include <torch/optim.h>

#include "lockstep/comm/process_group.h"
#include "lockstep/data/distributed_sampler.h"
#include "lockstep/ddp/distributed_data_parallel.h"
#include "lockstep/env/environment.h"

namespace {

// The seeds' MLP: 784-256-128-10 with dropout 0.2.
struct MlpImpl : torch::nn::Module {
  MlpImpl()
      : fc1(register_module("fc1", torch::nn::Linear(784, 256))),
        fc2(register_module("fc2", torch::nn::Linear(256, 128))),
        fc3(register_module("fc3", torch::nn::Linear(128, 10))),
        dropout(register_module("dropout", torch::nn::Dropout(0.2))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = dropout(torch::relu(fc1(x.flatten(1))));
    x = dropout(torch::relu(fc2(x)));
    return fc3(x);
  }
  torch::nn::Linear fc1, fc2, fc3;
  torch::nn::Dropout dropout;
};
TORCH_MODULE(Mlp);

}  // namespace

int main(int argc, char** argv) {
  try {
    const int epochs = argc > 1 ? std::atoi(argv[1]) : 3;
    const auto env = lockstep::env::from_env();
    auto pg = lockstep::comm::init_process_group(lockstep::comm::ProcessGroupOptions::from_environment(env));
    const bool is_main = pg.rank() == 0;

    // Same data on every rank (seeded); labels from a fixed random "teacher" so the task is learnable.
    torch::manual_seed(0);
    const int64_t n = 8192;
    auto images = torch::randn({n, 784});
    auto labels = images.matmul(torch::randn({784, 10})).argmax(1);

    torch::manual_seed(static_cast<uint64_t>(1 + pg.rank()));  // differs per rank: DDP broadcasts rank 0's
    Mlp model;
    lockstep::ddp::DistributedDataParallel<Mlp> ddp(model, pg);
    torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-3));
    lockstep::data::DistributedSampler sampler(
        n, lockstep::data::DistributedSamplerOptions(pg.size(), pg.rank()).seed(42));
    const int64_t batch = 64;  // per rank, as in the seed

    for (int epoch = 0; epoch < epochs; ++epoch) {
      sampler.set_epoch(epoch);  // a different shuffle each epoch, the same on every rank
      const auto indices = torch::tensor(sampler.indices(), torch::kLong);
      model->train();
      auto totals = torch::zeros({3}, torch::kDouble);  // loss sum, correct, samples
      for (int64_t start = 0; start < indices.numel(); start += batch) {
        const auto idx = indices.narrow(0, start, std::min(batch, indices.numel() - start));
        const auto x = images.index_select(0, idx);
        const auto y = labels.index_select(0, idx);
        optimizer.zero_grad();
        const auto logits = ddp.forward(x);
        const auto loss = torch::nn::functional::cross_entropy(logits, y);
        loss.backward();  // gradients are averaged across ranks here
        optimizer.step();
        totals[0] += loss.item<double>() * static_cast<double>(idx.numel());
        totals[1] += logits.argmax(1).eq(y).sum().item<double>();
        totals[2] += static_cast<double>(idx.numel());
      }
      pg.all_reduce(totals).wait();  // metrics over all ranks
      if (is_main) {
        std::printf("epoch %d: train_loss %.4f train_acc %.4f (%d ranks, %.0f samples)\n", epoch,
                    totals[0].item<double>() / totals[2].item<double>(),
                    totals[1].item<double>() / totals[2].item<double>(), pg.size(), totals[2].item<double>());
      }
    }
    pg.shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp_native: %s\n", e.what());
    return 1;
  }
}
