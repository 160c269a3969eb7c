// A rank of a real multi-process job, started by `lockstep run` in the end-to-end tests: reads its
// identity from the environment (as torchrun's workers do), joins the group over TCPStore + Gloo, checks
// collectives against closed forms, and exits 0 only if every check passed.
#include <cstdio>
#include <exception>

#include <ATen/ATen.h>

#include "lockstep/comm/process_group.h"
#include "lockstep/env/environment.h"

int main() {
  using namespace lockstep;
  try {
    const auto environment = env::from_env();
    auto pg = comm::init_process_group(comm::ProcessGroupOptions::from_environment(environment));
    const int world = pg.size();
    const int rank = pg.rank();
    auto t = at::arange(1000, at::kFloat) + static_cast<float>(rank);
    pg.all_reduce(t).wait();
    auto expected = at::arange(1000, at::kFloat) * world + static_cast<float>(world * (world - 1) / 2);
    if (!at::equal(t, expected)) {
      std::fprintf(stderr, "rank %d: all_reduce gave a wrong sum\n", rank);
      return 1;
    }
    auto b = at::full({3}, static_cast<double>(rank == 0 ? 42 : -1), at::kDouble);
    pg.broadcast(b, 0).wait();
    if (!at::equal(b, at::full({3}, 42.0, at::kDouble))) {
      std::fprintf(stderr, "rank %d: broadcast gave a wrong value\n", rank);
      return 1;
    }
    pg.barrier();
    pg.shutdown();
    std::printf("rank %d/%d ok (run %s)\n", rank, world, environment.run_id.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
