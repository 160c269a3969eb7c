// Where ZeroOptimizer's chunk gradients come from: see zero_gradients.h.
#include "zero_gradients.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/nn/utils/clip_grad.h>

#include <stdexcept>
#include <utility>

#include "lockstep/ddp/reducer.h"
#include "lockstep/shard/sharded_reducer.h"

namespace lockstep::shard::detail {

ReplicatedGradients::ReplicatedGradients(std::vector<at::Tensor> params, at::ScalarType dtype)
    : params_(std::move(params)), dtype_(dtype) {}

at::Tensor ReplicatedGradients::whole_gradient(size_t i) const {
  return params_[i].grad().to(dtype_);  // no copy unless cast
}

at::Tensor ReplicatedGradients::chunk_gradient(size_t i, ChunkRange mine) const {
  if (!params_[i].grad().defined()) return {};
  return whole_gradient(i).reshape({-1}).narrow(0, mine.begin, mine.length);
}

double ReplicatedGradients::clip_grad_norm_(double max_norm, const std::vector<at::Tensor>& others) {
  std::vector<at::Tensor> clipped;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].grad().defined()) clipped.push_back(holder(i));
  }
  clipped.insert(clipped.end(), others.begin(), others.end());
  return torch::nn::utils::clip_grad_norm_(clipped, max_norm);
}

BucketAverages::BucketAverages(std::vector<at::Tensor> params, at::ScalarType dtype,
                               const ddp::Reducer& reducer)
    : ReplicatedGradients(std::move(params), dtype), reducer_(reducer) {
  for (const at::Tensor& param : params_) index_.push_back(reducer_.index_of(param));
}

at::Tensor BucketAverages::whole_gradient(size_t i) const {
  if (index_[i] < 0) return ReplicatedGradients::whole_gradient(i);
  return reducer_.bucket_gradient(static_cast<size_t>(index_[i]));
}

at::Tensor BucketAverages::holder(size_t i) const {
  if (index_[i] < 0) return params_[i];
  at::Tensor holder = at::empty({0}, params_[i].options().dtype(dtype_).requires_grad(false));
  holder.mutable_grad() = whole_gradient(i);
  return holder;
}

double BucketAverages::clip_grad_norm_(double max_norm, const std::vector<at::Tensor>& others) {
  const double norm = ReplicatedGradients::clip_grad_norm_(max_norm, others);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {  // the bfloat16 copies in .grad follow
    if (params_[i].grad().defined() && index_[i] >= 0) params_[i].mutable_grad().copy_(whole_gradient(i));
  }
  return norm;
}

ShardedGradients::ShardedGradients(const std::vector<at::Tensor>& params, ShardedReducer& reducer)
    : reducer_(reducer) {
  for (const at::Tensor& param : params) {
    const int64_t index = reducer_.index_of(param);
    if (index < 0) {
      throw std::invalid_argument("ZeroOptimizer: a parameter of shape " + c10::str(param.sizes()) +
                                  " is not one the sharded reducer synchronises: build the optimizer over "
                                  "the trainable parameters of the model DDP or FSDP wraps");
    }
    index_.push_back(static_cast<size_t>(index));
  }
}

at::Tensor ShardedGradients::chunk_gradient(size_t i, ChunkRange /*mine*/) const {
  return reducer_.gradient(index_[i]);  // the chunk's gradient is all there is
}

void ShardedGradients::consumed() {
  reducer_.clear();
}

double ShardedGradients::clip_grad_norm_(double max_norm, const std::vector<at::Tensor>& others) {
  TORCH_CHECK(others.empty(), "ZeroOptimizer::clip_grad_norm_: ZeRO-2 and FSDP clip their own chunks only");
  return reducer_.clip_grad_norm_(max_norm);  // every rank's chunks
}

}  // namespace lockstep::shard::detail
