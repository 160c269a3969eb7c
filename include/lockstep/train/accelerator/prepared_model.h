// PreparedModel: a model that Accelerator::prepare wrapped in DDP (or sharded by FSDP), its forward under
// autocast with float32 outputs.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>

#include "lockstep/ddp/distributed_data_parallel.h"
#include "lockstep/ddp/gradient_sync.h"
#include "lockstep/models/staged.h"
#include "lockstep/shard/fully_sharded_data_parallel.h"
#include "lockstep/train/precision.h"

namespace lockstep::train {

class Accelerator;

namespace detail {
/// Accelerate's convert_outputs_to_fp32: a forward run under autocast returns float32, so the loss and
/// metrics computed from it outside the scope are computed in float32. Other outputs pass through.
inline at::Tensor outputs_to_float32(at::Tensor output) {
  if (output.defined() && (output.scalar_type() == at::kBFloat16 || output.scalar_type() == at::kHalf)) {
    return output.to(at::kFloat);
  }
  return output;
}
template <typename T>
T outputs_to_float32(T output) {
  return output;
}
/// A model prepared under fsdp: FSDP over it, and the one stage it runs as when it is not Staged itself.
/// FSDP goes first (its destructor uninstalls itself from the stages).
struct FsdpModel {
  std::shared_ptr<models::SingleStage> single;  // null when the model is Staged
  std::shared_ptr<shard::FullyShardedDataParallel> fsdp;
};
/// Where a prepared model's DDP lives, shared by every copy of the PreparedModel and by the Accelerator,
/// which re-points it at a DDP over the new group when it recovers in place (Accelerator::recover).
template <typename M>
struct DdpSlot {
  std::shared_ptr<ddp::DistributedDataParallel<M>> ddp;
};
}  // namespace detail

/// A model wrapped in DistributedDataParallel (or, under strategy fsdp, sharded by FullyShardedDataParallel)
/// whose forward runs under autocast for the accelerator's precision and returns float32 outputs.
/// `model->...` reaches the user's module (train(), eval(), ...). Must not outlive its Accelerator.
template <typename M>
class PreparedModel {
 public:
  template <typename... Args>
  auto forward(Args&&... args) {
    if (pipeline_sync_ != nullptr) {
      throw std::logic_error(
          "PreparedModel: under pipeline_parallel the model runs in stages on several ranks: call "
          "Accelerator::pipeline_step(model, input, target, loss) instead of model(x) and backward()");
    }
    AutocastScope autocast(precision_, device_type_);
    if (!fsdp_) return detail::outputs_to_float32(ddp_->ddp->forward(std::forward<Args>(args)...));
    if (!fsdp_->single) return detail::outputs_to_float32(model_->forward(std::forward<Args>(args)...));
    return detail::outputs_to_float32(forward_as_one_stage(std::forward<Args>(args)...));
  }
  template <typename... Args>
  auto operator()(Args&&... args) {
    return forward(std::forward<Args>(args)...);
  }
  auto* operator->() const { return model_.get(); }
  /// The user's model (the same one prepare() was given). Under fsdp its parameters hold no memory
  /// between passes: Accelerator::full_parameters() makes them whole.
  M& module() const { return model_; }
  /// The DDP wrapper; std::logic_error under fsdp. Under elastic, Accelerator::recover() replaces it by one
  /// over the new group: do not keep the reference across a recovery.
  ddp::DistributedDataParallel<M>& ddp() const {
    if (!ddp_) {
      throw std::logic_error(std::string("PreparedModel::ddp(): the model is ") +
                             (pipeline_sync_ ? "cut into pipeline stages (pipeline_parallel)"
                                             : "sharded by FSDP (strategy fsdp)"));
    }
    return *ddp_->ddp;
  }
  /// The FSDP wrapper under strategy fsdp, else null.
  shard::FullyShardedDataParallel* fsdp() const { return fsdp_ ? fsdp_->fsdp.get() : nullptr; }
  /// What synchronises the model's gradients (DDP's reducer or FSDP's).
  ddp::GradientSync& gradient_sync() const {
    if (pipeline_sync_ != nullptr) return *pipeline_sync_;
    return fsdp_ ? static_cast<ddp::GradientSync&>(fsdp_->fsdp->reducer()) : ddp_->ddp->gradient_sync();
  }

 private:
  friend class Accelerator;
  PreparedModel(M model, std::shared_ptr<detail::DdpSlot<M>> ddp, std::shared_ptr<detail::FsdpModel> fsdp,
                Precision precision, c10::DeviceType device, ddp::GradientSync* pipeline_sync = nullptr)
      : model_(std::move(model)),
        ddp_(std::move(ddp)),
        fsdp_(std::move(fsdp)),
        precision_(precision),
        device_type_(device),
        pipeline_sync_(pipeline_sync) {}
  // A model not built in stages is one stage: its forward runs through it (FSDP gathers the whole model
  // around it). Its forward must take a tensor first and return a tensor. Declared to return what the
  // model's forward returns, so that forward() has one return type whatever the model returns (a tuple is
  // fine under the other strategies).
  template <typename X, typename... Rest>
  auto forward_as_one_stage(X&& x, Rest&&... rest)
      -> decltype(std::declval<M&>()->forward(std::forward<X>(x), std::forward<Rest>(rest)...)) {
    using Out = decltype(std::declval<M&>()->forward(std::forward<X>(x), std::forward<Rest>(rest)...));
    if constexpr (std::is_convertible_v<X, at::Tensor> && std::is_same_v<std::decay_t<Out>, at::Tensor>) {
      return fsdp_->single->forward(at::Tensor(std::forward<X>(x)), [&](at::Tensor in) -> at::Tensor {
        return model_->forward(std::move(in), std::forward<Rest>(rest)...);
      });
    } else {
      throw std::logic_error(
          "PreparedModel: under strategy fsdp a model not built in stages (models::Staged) runs as one "
          "stage, "
          "which needs forward(tensor, ...) -> tensor: make the model Staged (models/staged.h)");
    }
  }
  mutable M model_;
  std::shared_ptr<detail::DdpSlot<M>> ddp_;  // ddp, zero1, zero2
  std::shared_ptr<detail::FsdpModel> fsdp_;  // fsdp
  Precision precision_;
  c10::DeviceType device_type_;
  ddp::GradientSync* pipeline_sync_;  // pipeline_parallel: the strategy's (the model runs as a pipeline)
};

}  // namespace lockstep::train
