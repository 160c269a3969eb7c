// A job whose rank 0 issues an all-reduce that rank 1 never joins (tests/comm: test_process_group_mpi_stuck,
// under `mpirun -np 2`). Rank 0's wait must fail at its timeout, naming the collective, and the process must
// then exit without hanging in MPI_Finalize (which would wait for the collective forever): it prints
// "rank 0: wait failed: ..." on stderr. A second all-reduce then queues behind the stuck one, and its wait
// fails naming that one ("rank 0: queued wait failed: ..."); rank 0 returns 3. Rank 1 sleeps past both
// (6 s), then exits 0; mpirun reports rank 0 as not finalised and exits non-zero. Exit status 2 means a
// wait did not fail as it should.
//
// With the argument `create` (test_process_group_mpi_stuck_create), rank 1 starts MPI but never creates its
// group: rank 0's group creation (MPI_Comm_dup, a collective) must fail at the timeout ("rank 0: creation
// failed: ..."). With `init` (test_process_group_mpi_stuck_init), rank 1 does not even start MPI: rank 0's
// MPI_Init_thread, which waits for every rank of the job, must fail at the timeout in the same way.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <ATen/ATen.h>

#include "lockstep/comm/process_group_mpi.h"

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const char* rank_raw = std::getenv("OMPI_COMM_WORLD_RANK");
  const char* size_raw = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (rank_raw == nullptr || size_raw == nullptr || std::atoi(size_raw) != 2) {
    std::fprintf(stderr, "mpi_stuck_worker: run me under mpirun -np 2\n");
    return 2;
  }
  const int rank = std::atoi(rank_raw);
  const auto options = lockstep::comm::MpiOptions().timeout(std::chrono::seconds(2));
  if (mode == "create" || mode == "init") {
    if (rank == 1) {
      if (mode == "create") lockstep::comm::ProcessGroupMpi::library_version();  // starts MPI
      std::this_thread::sleep_for(std::chrono::seconds(4));
      return 0;
    }
    try {
      c10::make_intrusive<lockstep::comm::ProcessGroupMpi>(rank, 2, options);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank 0: creation failed: %s\n", e.what());
      return 3;
    }
    std::fprintf(stderr, "rank 0: the group was created without rank 1\n");
    return 2;
  }
  auto pg = c10::make_intrusive<lockstep::comm::ProcessGroupMpi>(rank, 2, options);
  pg->barrier()->wait();
  if (rank == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(6));
    return 0;
  }
  std::vector<at::Tensor> t{at::ones({16})};
  auto work = pg->allreduce(t);
  try {
    work->wait();  // no timeout given: the group's, 2 s
  } catch (const std::exception& e) {
    // On stderr, like the exit handler's line after it, so the lines arrive in order.
    std::fprintf(stderr, "rank 0: wait failed: %s\n", e.what());
    // A later collective queues behind the stuck one, and its timeout names that one.
    auto queued = pg->allreduce(t);
    try {
      queued->wait();
    } catch (const std::exception& later) {
      std::fprintf(stderr, "rank 0: queued wait failed: %s\n", later.what());
      return 3;
    }
    std::fprintf(stderr, "rank 0: the queued all-reduce completed without rank 1\n");
    return 2;
  }
  std::fprintf(stderr, "rank 0: the all-reduce completed without rank 1\n");
  return 2;
}
