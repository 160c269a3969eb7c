// Preemption notices: see include/lockstep/train/preemption.h.
#include "lockstep/train/preemption.h"

#include <signal.h>

#include <atomic>

namespace lockstep::train {
namespace {

std::atomic<int> recorded_notice{0};
extern "C" void record_preemption_notice(int signal) {
  recorded_notice.store(signal);
}

}  // namespace

struct PreemptionHandlers::Saved {
  struct sigaction usr1 {};
  struct sigaction term {};
};

PreemptionHandlers::PreemptionHandlers(bool install) : installed_(install) {
  if (!installed_) return;
  recorded_notice.store(0);
  saved_ = std::make_unique<Saved>();
  struct sigaction action {};
  action.sa_handler = record_preemption_notice;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  ::sigaction(SIGUSR1, &action, &saved_->usr1);
  ::sigaction(SIGTERM, &action, &saved_->term);
}

PreemptionHandlers::~PreemptionHandlers() {
  if (!installed_) return;
  ::sigaction(SIGUSR1, &saved_->usr1, nullptr);
  ::sigaction(SIGTERM, &saved_->term, nullptr);
}

int preemption_notice() {
  return recorded_notice.load();
}

}  // namespace lockstep::train
