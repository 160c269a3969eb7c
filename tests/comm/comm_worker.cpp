// A rank of a real multi-process job, started by `lockstep run` (or by hand) in the end-to-end tests:
// reads its identity from the environment (as torchrun's workers do), joins the group over TCPStore,
// checks collectives against closed forms, and exits 0 only if every check passed.
//
// Environment knobs for the tests:
//   COMM_WORKER_BACKEND=auto|gloo|shm     backend (default auto)
//   COMM_WORKER_ROUNDS=N                  repeat the all-reduce check N times (default 1)
//   COMM_WORKER_KILL_RANK=R and COMM_WORKER_KILL_AFTER_MS=T
//                                         rank R sends itself SIGKILL T ms after start (fault injection)
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>

#include <ATen/ATen.h>

#include "lockstep/comm/process_group.h"
#include "lockstep/env/environment.h"

namespace {

int env_int(const char* name, int fallback) {
  const char* raw = std::getenv(name);
  return raw != nullptr && *raw != '\0' ? std::atoi(raw) : fallback;
}

}  // namespace

int main() {
  using namespace lockstep;
  try {
    const auto environment = env::from_env();
    const int after_ms = env_int("COMM_WORKER_KILL_AFTER_MS", -1);  // -1: not by time
    if (environment.rank == env_int("COMM_WORKER_KILL_RANK", -1) && after_ms >= 0) {
      std::thread([after_ms] {
        std::this_thread::sleep_for(std::chrono::milliseconds(after_ms));
        ::kill(::getpid(), SIGKILL);
      }).detach();
    }
    const char* backend = std::getenv("COMM_WORKER_BACKEND");
    auto pg = comm::init_process_group(comm::ProcessGroupOptions::from_environment(environment)
                                           .backend(comm::parse_backend(backend ? backend : "auto")));
    const int world = pg.size();
    const int rank = pg.rank();
    const int rounds = env_int("COMM_WORKER_ROUNDS", 1);
    // COMM_WORKER_KILL_AFTER_ROUNDS=N: rank COMM_WORKER_KILL_RANK kills itself after N all-reduces, an event
    // (the group is up and the ranks are inside their loop), where COMM_WORKER_KILL_AFTER_MS is a time.
    const int kill_after_rounds =
        rank == env_int("COMM_WORKER_KILL_RANK", -1) ? env_int("COMM_WORKER_KILL_AFTER_ROUNDS", -1) : -1;
    for (int round = 0; round < rounds; ++round) {
      if (round == kill_after_rounds) ::kill(::getpid(), SIGKILL);
      auto t = at::arange(1000, at::kFloat) + static_cast<float>(rank);
      pg.all_reduce(t).wait();
      auto expected = at::arange(1000, at::kFloat) * world + static_cast<float>(world * (world - 1) / 2);
      if (!at::equal(t, expected)) {
        std::fprintf(stderr, "rank %d: all_reduce gave a wrong sum\n", rank);
        return 1;
      }
    }
    auto b = at::full({3}, static_cast<double>(rank == 0 ? 42 : -1), at::kDouble);
    pg.broadcast(b, 0).wait();
    if (!at::equal(b, at::full({3}, 42.0, at::kDouble))) {
      std::fprintf(stderr, "rank %d: broadcast gave a wrong value\n", rank);
      return 1;
    }
    pg.barrier();
    const std::string used = comm::to_string(pg.backend());
    pg.shutdown();
    std::printf("rank %d/%d ok (run %s, backend %s)\n", rank, world, environment.run_id.c_str(),
                used.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
