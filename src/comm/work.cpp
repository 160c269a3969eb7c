#include "lockstep/comm/work.h"

#include <exception>

#include "lockstep/comm/comm_error.h"

namespace lockstep::comm {

Work::Work(c10::intrusive_ptr<c10d::Work> work, std::string description, int rank,
           std::chrono::milliseconds timeout, std::function<void()> on_success)
    : work_(std::move(work)),
      description_(std::move(description)),
      rank_(rank),
      timeout_(timeout),
      on_success_(std::move(on_success)) {}

void Work::wait() {
  if (done_) return;
  TORCH_CHECK(work_, "wait() on an empty lockstep::comm::Work");
  try {
    work_->wait(timeout_);
  } catch (const std::exception& e) {
    done_ = true;
    throw CommError(rank_, description_,
                    std::string("failed: ") + e.what() +
                        " — a peer may have exited or be stuck, or the ranks called different collectives "
                        "(every rank must call the same ones in the same order). Collective timeout: " +
                        std::to_string(timeout_.count() / 1000.0).substr(0, 6) + " s (LOCKSTEP_TIMEOUT).");
  }
  done_ = true;
  if (on_success_) on_success_();
}

bool Work::is_completed() const { return done_ || (work_ && work_->isCompleted()); }

}  // namespace lockstep::comm
