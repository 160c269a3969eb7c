#pragma once

#include <memory>

namespace lockstep::train {

/*
 * Preemption notices. A scheduler warns a job before it ends it: Slurm's `--signal=USR1@90`, or SIGTERM
 * with a grace period (Kubernetes, `scancel`, a spot instance). While a Trainer with a ckpt_dir is in
 * fit(), SIGUSR1 and SIGTERM are caught: the handler only records the signal, and the training loop acts
 * at the next optimizer step, where the ranks agree on it (an all-reduce of the recorded signal), write
 * last.ckpt and leave with kPreemptedExitStatus.
 */
class PreemptionHandlers {
 public:
  /// Installs the handlers when `install`; the previous ones come back at destruction.
  explicit PreemptionHandlers(bool install);
  ~PreemptionHandlers();
  PreemptionHandlers(const PreemptionHandlers&) = delete;
  PreemptionHandlers& operator=(const PreemptionHandlers&) = delete;
  bool installed() const { return installed_; }

 private:
  bool installed_;
  struct Saved;
  std::unique_ptr<Saved> saved_;  // the handlers to restore
};

/// The notice recorded since the handlers were installed: SIGUSR1, SIGTERM, or 0 for none.
int preemption_notice();

}  // namespace lockstep::train
