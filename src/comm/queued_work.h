#pragma once

// What lockstep's own c10d::ProcessGroups (shm, mpi) share: the Work their worker thread completes, and
// the contiguous copy a collective works on. Private to comm/ (header-only: each backend is its own target).

#include <chrono>
#include <exception>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/jit_type.h>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

namespace lockstep::comm::detail {

/// A collective queued on a backend's worker thread: complete() is called once, by the worker, with the
/// collective's error or none. Backends override wait() with their bound on it.
class QueuedWork : public c10d::Work {
 public:
  QueuedWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs)
      : c10d::Work(rank, type),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<at::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

  void complete(std::exception_ptr error) {
    // As ProcessGroupGloo's work does: the future carries the outputs, or the error. Marked first, so
    // its callbacks (they run inside markCompleted) are done by the time wait() returns.
    if (error) {
      future_->setError(error);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
    finish(std::move(error));
  }

  // Comm hooks and tracing (e.g. LOCKSTEP_TIMELINE) chain callbacks on it.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  std::vector<at::Tensor> result() override { return outputs_; }

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

/// A contiguous tensor to work on, and the copy back into the caller's tensor when it was not.
struct Contiguous {
  explicit Contiguous(const at::Tensor& t) : original(t), work(t.contiguous()) {}
  void write_back() {
    if (!work.is_same(original)) original.copy_(work);
  }
  at::Tensor original;
  at::Tensor work;
};

}  // namespace lockstep::comm::detail
