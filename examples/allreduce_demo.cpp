// The smallest lockstep program: every rank learns who it is from the environment that `lockstep run`
// (or torchrun, srun, mpirun) gave it, joins the process group, and all-reduces a tensor.
//
//   build/lockstep run --nproc-per-node 2 --standalone -- build/examples/allreduce_demo
#include <chrono>
#include <cstdio>
#include <exception>

#include <ATen/ATen.h>

#include "lockstep/comm/process_group.h"
#include "lockstep/env/environment.h"

int main() {
  try {
    const auto environment = lockstep::env::from_env();
    auto pg = lockstep::comm::init_process_group(
        lockstep::comm::ProcessGroupOptions::from_environment(environment));

    // Every rank contributes rank + 1, so the sum is world * (world + 1) / 2.
    auto value = at::full({1}, static_cast<double>(pg.rank() + 1), at::kDouble);
    pg.all_reduce(value).wait();

    // A quick feel for the interconnect: 1 MiB all-reduces.
    auto buffer = at::ones({1 << 18}, at::kFloat);
    constexpr int kRounds = 20;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kRounds; ++i) pg.all_reduce(buffer).wait();
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / kRounds;

    std::printf(
        "rank %d of %d (local rank %d, from %s): sum of (rank + 1) = %.0f; 1 MiB all-reduce %.2f ms\n",
        pg.rank(), pg.size(), environment.local_rank, lockstep::env::to_string(environment.source),
        value.item<double>(), ms);
    pg.shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
