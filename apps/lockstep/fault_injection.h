#pragma once

#include <memory>

#include "lockstep/env/environment.h"
#include "lockstep/train/callback.h"

namespace lockstep::cli {

/*
 * Fault injection for the recovery tests (docs/reliability.md), as a callback that `lockstep-fit`
 * installs when LOCKSTEP_FAULT is set; the Trainer's loop knows nothing of it.
 *
 * LOCKSTEP_FAULT="RANK:STEP" kills rank RANK with SIGKILL right after optimizer step STEP;
 * "RANK:STEP:ckpt" kills it inside the first checkpoint write at or after that step (the bytes written,
 * not yet renamed into place); "RANK:STEP:usr1" / ":term" makes it send SIGUSR1 / SIGTERM to its parent,
 * the launcher, once (a preemption notice, as Slurm or a scheduler sends it); "RANK:STEP:nan" makes that
 * rank's loss NaN for the batches of optimizer step STEP + 1; "RANK:STEP:stop" makes it SIGSTOP itself,
 * "RANK:STEP:hang" makes it block forever outside collectives (a data loader that never returns), and
 * "RANK:STEP:extra" makes it issue one all-reduce the other ranks do not (a branch taken on one rank
 * only), each once after optimizer step STEP; "RANK:STEP:slow" (or "slowMS") makes that rank sleep 2 ms (MS)
 * in the forward of every batch from step STEP on (a straggler, for the step breakdown); "RANK:STEP:lag"
 * (or "lagMS") makes it no slower but adds 2 ms (MS) to what its step timer measures there
 * (train::detail::step_clock_lag: a straggler whose size no load changes, for tests); "RANK:STEP:joinsN"
 * (elastic) makes that rank wait after optimizer step STEP until N ranks have asked to join (2 without N,
 * at most 120 s), so that they are admitted at the next step's vote. Only in the first
 * run of a job (TORCHELASTIC_RESTART_COUNT 0), so that the restarted ranks can finish.
 */

/// The callback LOCKSTEP_FAULT asks for this rank of `environment`; nullptr when unset or in a restarted
/// run. Throws std::invalid_argument naming the value when it is not one of the forms above.
std::shared_ptr<train::Callback> fault_injection_from_env(const env::Environment& environment);

}  // namespace lockstep::cli
