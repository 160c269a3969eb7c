// `lockstep-fit`: one rank of `lockstep fit` (started by the `lockstep` CLI, directly or through its
// launcher). Reads who it is from the environment and trains; see lockstep/train/fit.h.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <vector>

#include "fault_injection.h"
#include "fit_flags.h"
#include "lockstep/comm/comm_error.h"
#include "lockstep/env/environment.h"
#include "lockstep/train/error_message.h"
#include "lockstep/train/fit.h"
#include "lockstep/train/step_memory.h"
#include "lockstep/train/trainer.h"

int main(int argc, char** argv) {
  // Each step allocates and frees the same large tensors: keep them in the heap (step_memory.h).
  lockstep::train::keep_step_memory_in_heap();
  lockstep::train::FitConfig config;
  if (const int status = lockstep::cli::parse_fit_flags(argc, argv, config); status >= 0) return status;
  int rank = -1;
  try {
    const lockstep::env::Environment environment = lockstep::env::from_env();
    rank = environment.rank;
    lockstep::train::FitOutput output;
    output.progress_bar =
        config.progress == "on" || (config.progress == "auto" && ::isatty(STDOUT_FILENO) == 1);
    std::vector<std::shared_ptr<lockstep::train::Callback>> callbacks;
    if (auto fault = lockstep::cli::fault_injection_from_env(environment)) callbacks.push_back(fault);
    const lockstep::train::FitResult result = lockstep::train::fit(config, environment, output, callbacks);
    return result.preempted ? lockstep::train::kPreemptedExitStatus : 0;
  } catch (const lockstep::comm::CommError& e) {
    // The message names this rank already. Leave at once: the backend may still be inside a collective
    // that will never finish (a peer is gone or called another one), and the destructors would wait for
    // it or touch what its threads still use.
    std::fprintf(stderr, "lockstep fit: %s\n", e.what());
    std::fflush(nullptr);
    std::_Exit(1);
  } catch (const std::exception& e) {
    // The message without LibTorch's C++ stack trace (LOCKSTEP_DEBUG=1 keeps it).
    const std::string message = lockstep::cli::in_flag_words(lockstep::train::error_message(e));
    if (rank >= 0) {
      std::fprintf(stderr, "lockstep fit: rank %d: %s\n", rank, message.c_str());
    } else {
      std::fprintf(stderr, "lockstep fit: %s\n", message.c_str());
    }
    // fit() has unwound (its destructors ran). Skip the exit handlers: with the MPI backend, MPI_Finalize
    // would wait for the other ranks, which wait in a collective for this one until their timeout.
    std::fflush(nullptr);
    std::_Exit(1);
  }
}
