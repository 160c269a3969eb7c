// A job whose rank 0 issues an all-reduce that rank 1 never joins (tests/comm: test_process_group_mpi_stuck,
// under `mpirun -np 2`). Rank 0's wait must fail at its timeout, naming the collective, and the process must
// then exit without hanging in MPI_Finalize (which would wait for the collective forever): it prints
// "rank 0: wait failed: ..." on stderr and returns 3. Rank 1 sleeps past that, then exits 0; mpirun reports
// rank 0 as not finalised and exits non-zero. Exit status 2 means the wait did not fail as it should.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <ATen/ATen.h>

#include "lockstep/comm/process_group_mpi.h"

int main() {
  const char* rank_raw = std::getenv("OMPI_COMM_WORLD_RANK");
  const char* size_raw = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (rank_raw == nullptr || size_raw == nullptr || std::atoi(size_raw) != 2) {
    std::fprintf(stderr, "mpi_stuck_worker: run me under mpirun -np 2\n");
    return 2;
  }
  const int rank = std::atoi(rank_raw);
  auto pg = c10::make_intrusive<lockstep::comm::ProcessGroupMpi>(
      rank, 2, lockstep::comm::MpiOptions().timeout(std::chrono::seconds(2)));
  pg->barrier()->wait();
  if (rank == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(4));
    return 0;
  }
  std::vector<at::Tensor> t{at::ones({16})};
  auto work = pg->allreduce(t);
  try {
    work->wait();  // no timeout given: the group's, 2 s
  } catch (const std::exception& e) {
    // On stderr, like the exit handler's line after it, so the two arrive in order.
    std::fprintf(stderr, "rank 0: wait failed: %s\n", e.what());
    return 3;
  }
  std::fprintf(stderr, "rank 0: the all-reduce completed without rank 1\n");
  return 2;
}
