#include "lockstep/comm/process_group_hier.h"

#include <exception>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/jit_type.h>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "average.h"

namespace lockstep::comm {
namespace {

// A Work that is complete when it is made: success, or the failure wait() rethrows.
class DoneWork final : public c10d::Work {
 public:
  DoneWork(int rank, std::vector<at::Tensor> outputs, std::exception_ptr error)
      : c10d::Work(rank, c10d::OpType::ALLREDUCE), outputs_(std::move(outputs)) {
    finish(error);
    future_ = c10::make_intrusive<at::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
    if (error) {
      future_->setError(std::move(error));
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
  }
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<at::ivalue::Future> future_;
};

}  // namespace

ProcessGroupHier::ProcessGroupHier(int rank, int size, c10::intrusive_ptr<NativeBackend> local,
                                   c10::intrusive_ptr<NativeBackend> leaders,
                                   c10::intrusive_ptr<NativeBackend> flat, std::chrono::milliseconds timeout)
    : NativeBackend(rank, size),
      local_(std::move(local)),
      leaders_(std::move(leaders)),
      flat_(std::move(flat)),
      timeout_(timeout) {
  TORCH_CHECK(local_ && flat_, "ProcessGroupHier needs a local and a flat group");
  TORCH_CHECK((local_->getRank() == 0) == static_cast<bool>(leaders_),
              "ProcessGroupHier: exactly the local rank 0 of each node must have the leaders group");
  init();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::allreduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::AllreduceOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "hier allreduce takes one tensor per rank, got ", tensors.size());
  const bool average = opts.reduceOp == c10d::ReduceOp::AVG;
  const auto timeout = opts.timeout.count() > 0 ? opts.timeout : timeout_;
  c10d::AllreduceOptions step = opts;
  step.timeout = timeout;
  if (average) step.reduceOp = c10d::ReduceOp::SUM;
  std::exception_ptr error;
  try {
    local_->allreduce(tensors, step)->wait(timeout);
    if (leaders_ && leaders_->getSize() > 1) leaders_->allreduce(tensors, step)->wait(timeout);
    c10d::BroadcastOptions from_leader;
    from_leader.rootRank = 0;
    from_leader.timeout = timeout;
    local_->broadcast(tensors, from_leader)->wait(timeout);
    if (average) detail::divide_for_average(tensors[0], getSize());
  } catch (...) {
    error = std::current_exception();
  }
  return c10::make_intrusive<DoneWork>(getRank(), tensors, error);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::broadcast(std::vector<at::Tensor>& tensors,
                                                           const c10d::BroadcastOptions& opts) {
  return flat_->broadcast(tensors, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllgatherOptions& opts) {
  return flat_->allgather(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                                const c10d::ReduceScatterOptions& opts) {
  return flat_->reduce_scatter(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::barrier(const c10d::BarrierOptions& opts) {
  return flat_->barrier(opts);
}

}  // namespace lockstep::comm
