// Exactness over real processes (started by `lockstep run`, or mpirun for the mpi backend), on the backend
// named: each rank trains a model with DDP on its contiguous share of a global batch, and also replays the
// single-process run on the whole batch locally; the two sets of parameters must agree to 1e-9 relative
// (float64).
//   ddp_process_worker shm|gloo|mpi sgd|adam [view]
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include <torch/nn.h>
#include <torch/optim.h>

#include "lockstep/comm/process_group.h"
#include "lockstep/ddp/distributed_data_parallel.h"
#include "lockstep/env/environment.h"

namespace {

torch::nn::Sequential model(uint64_t seed) {
  torch::manual_seed(seed);
  torch::nn::Sequential seq(torch::nn::Linear(12, 32), torch::nn::Tanh(), torch::nn::Linear(32, 32),
                            torch::nn::Tanh(), torch::nn::Linear(32, 3));
  seq->to(torch::kDouble);
  return seq;
}

std::unique_ptr<torch::optim::Optimizer> optimizer(torch::nn::Sequential& m, bool adam) {
  if (adam) return std::make_unique<torch::optim::Adam>(m->parameters(), torch::optim::AdamOptions(0.01));
  return std::make_unique<torch::optim::SGD>(m->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: ddp_process_worker shm|gloo|mpi sgd|adam [view]\n");
    return 2;
  }
  const std::string backend = argv[1];
  const bool adam = std::strcmp(argv[2], "adam") == 0;
  const bool view = argc > 3 && std::strcmp(argv[3], "view") == 0;
  try {
    auto pg = lockstep::comm::init_process_group(
        lockstep::comm::ProcessGroupOptions::from_environment(lockstep::env::from_env())
            .backend(lockstep::comm::parse_backend(backend)));
    const int world = pg.size(), rank = pg.rank();
    const int64_t batch = 48, steps = 6;  // 48 divides by 1, 2, 3, 4
    torch::manual_seed(99);
    const auto x = torch::randn({batch, 12}, torch::kDouble);
    const auto y = torch::randn({batch, 3}, torch::kDouble);

    auto reference = model(5);
    auto ref_opt = optimizer(reference, adam);
    for (int s = 0; s < steps; ++s) {
      ref_opt->zero_grad();
      torch::mse_loss(reference->forward(x), y).backward();
      ref_opt->step();
    }

    auto net = model(rank == 0 ? 5 : 1000 + static_cast<uint64_t>(rank));
    lockstep::ddp::DistributedDataParallel<torch::nn::Sequential> ddp(
        net, pg, lockstep::ddp::DdpOptions().gradient_as_bucket_view(view).bucket_cap_mb(0.004));
    auto opt = optimizer(net, adam);
    const int64_t share = batch / world;
    for (int s = 0; s < steps; ++s) {
      opt->zero_grad();
      torch::mse_loss(ddp.forward(x.narrow(0, rank * share, share)), y.narrow(0, rank * share, share))
          .backward();
      opt->step();
    }

    double worst = 0;
    const auto want = reference->parameters();
    const auto got = net->parameters();
    for (size_t i = 0; i < got.size(); ++i) {
      worst = std::max(worst, ((got[i] - want[i]).abs() / (want[i].abs() + 1e-12)).max().item<double>());
    }
    auto all = torch::full({1}, worst, torch::kDouble);
    pg.all_reduce(all, lockstep::comm::ReduceOp::kMax).wait();
    pg.shutdown();
    const bool ok = all.item<double>() <= 1e-9;
    std::printf("rank %d/%d %s %s%s: %s (worst relative difference %.3g over all ranks)\n", rank, world,
                lockstep::comm::to_string(pg.backend()), adam ? "adam" : "sgd", view ? " view" : "",
                ok ? "ddp == single process" : "MISMATCH", all.item<double>());
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
