// `lockstep-fit`: one rank of `lockstep fit` (started by the `lockstep` CLI, directly or through its
// launcher). Reads who it is from the environment and trains; see lockstep/train/fit.h.
#include <malloc.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "fit_flags.h"
#include "lockstep/comm/comm_error.h"
#include "lockstep/env/environment.h"
#include "lockstep/train/fit.h"
#include "lockstep/train/trainer.h"

namespace {

// Every step allocates and frees the same large tensors (activations, gradients). Above glibc's mmap
// threshold (128 KiB, rising to at most 32 MiB as blocks are freed) each one is a fresh mmap whose pages
// all fault again: 40% of a ResNet18 step on this machine (docs/benchmarks.md). Keep blocks up to 32 MiB
// (glibc's largest threshold) in the heap, and keep the freed heap instead of trimming it every step.
// A user who set glibc's malloc tunables keeps them.
void keep_step_memory() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr) return;
  mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
  mallopt(M_TRIM_THRESHOLD, 256 * 1024 * 1024);
}

}  // namespace

int main(int argc, char** argv) {
  keep_step_memory();
  lockstep::train::FitConfig config;
  if (const int status = lockstep::cli::parse_fit_flags(argc, argv, config); status >= 0) return status;
  int rank = -1;
  try {
    const lockstep::env::Environment environment = lockstep::env::from_env();
    rank = environment.rank;
    lockstep::train::FitOutput output;
    output.progress_bar = config.progress == "on" || (config.progress == "auto" && ::isatty(STDOUT_FILENO) == 1);
    const lockstep::train::FitResult result = lockstep::train::fit(config, environment, output);
    return result.preempted ? lockstep::train::kPreemptedExitStatus : 0;
  } catch (const lockstep::comm::CommError& e) {
    // The message names this rank already. Leave at once: the backend may still be inside a collective
    // that will never finish (a peer is gone or called another one), and the destructors would wait for
    // it or touch what its threads still use.
    std::fprintf(stderr, "lockstep fit: %s\n", e.what());
    std::fflush(nullptr);
    std::_Exit(1);
  } catch (const std::exception& e) {
    if (rank >= 0) {
      std::fprintf(stderr, "lockstep fit: rank %d: %s\n", rank, e.what());
    } else {
      std::fprintf(stderr, "lockstep fit: %s\n", e.what());
    }
    // fit() has unwound (its destructors ran). Skip the exit handlers: with the MPI backend, MPI_Finalize
    // would wait for the other ranks, which wait in a collective for this one until their timeout.
    std::fflush(nullptr);
    std::_Exit(1);
  }
}
