#include "lockstep/ddp/comm_hook.h"

#include <stdexcept>
#include <string>

#include <ATen/ATen.h>

namespace lockstep::ddp {

comm::Work AllReduceHook::run(comm::ProcessGroup& group, at::Tensor& bucket) {
  return group.all_reduce(bucket, comm::ReduceOp::kAvg);
}

CompressionHook::CompressionHook(at::ScalarType dtype) : dtype_(dtype) {
  if (dtype != at::kBFloat16 && dtype != at::kHalf) {
    throw std::invalid_argument(
        std::string("CompressionHook: dtype must be at::kBFloat16 or at::kHalf, got ") +
        c10::toString(dtype));
  }
}

const char* CompressionHook::name() const {
  return dtype_ == at::kBFloat16 ? "bf16_compress" : "fp16_compress";
}

comm::Work CompressionHook::run(comm::ProcessGroup& group, at::Tensor& bucket) {
  TORCH_CHECK(at::isFloatingType(bucket.scalar_type()), name(), " needs a floating-point bucket, got ",
              bucket.scalar_type());
  // The staging tensor for this bucket: kept between steps, re-created only when the bucket changes shape.
  at::Tensor* staging = nullptr;
  for (auto& [ptr, tensor] : staging_) {
    if (ptr == bucket.data_ptr()) staging = &tensor;
  }
  if (staging == nullptr) staging = &staging_.emplace_back(bucket.data_ptr(), at::Tensor()).second;
  if (!staging->defined() || !staging->sizes().equals(bucket.sizes()) ||
      staging->device() != bucket.device()) {
    *staging = at::empty(bucket.sizes(), bucket.options().dtype(dtype_));
  }
  staging->copy_(bucket);

  const std::string shape = " (" + std::string(c10::toString(dtype_)) + "[" + std::to_string(bucket.numel()) +
                            "]) of a " + c10::toString(bucket.scalar_type()) + " bucket";
  if (!group.can_reduce(dtype_)) {
    // E.g. Gloo in LibTorch 1.x has no BFloat16 reduction ("Invalid scalar type"): gather the 16-bit words
    // (carried as Half, which it can move: an all-gather copies bytes and never does arithmetic on them) and
    // sum them locally in the bucket's own precision.
    std::vector<at::Tensor>* received = nullptr;
    for (auto& [ptr, tensors] : gathered_) {
      if (ptr == bucket.data_ptr()) received = &tensors;
    }
    if (received == nullptr)
      received = &gathered_.emplace_back(bucket.data_ptr(), std::vector<at::Tensor>()).second;
    if (received->size() != static_cast<size_t>(group.size()) ||
        (!received->empty() && !received->front().sizes().equals(bucket.sizes()))) {
      received->clear();
      for (int r = 0; r < group.size(); ++r)
        received->push_back(at::empty(bucket.sizes(), bucket.options().dtype(at::kHalf)));
    }
    at::Tensor words = staging->view(at::kHalf);  // a carrier Gloo can move; all-gather copies bytes only
    comm::Work gather = group.all_gather(*received, words);
    std::function<void()> finish = [bucket, parts = *received, world = group.size(),
                                    dtype = dtype_]() mutable {
      bucket.zero_();
      for (auto& part : parts) bucket.add_(part.view(dtype));
      if (world > 1) bucket.div_(world);
    };
    return std::move(gather).then(std::move(finish), std::string(" for ") + name() + shape);
  }
  comm::Work reduce = group.all_reduce(*staging, comm::ReduceOp::kSum);
  // Divide after widening back into the bucket: one rounding fewer than dividing in 16 bits.
  std::function<void()> finish = [bucket, staged = *staging, world = group.size()]() mutable {
    bucket.copy_(staged);
    if (world > 1) bucket.div_(world);
  };
  return std::move(reduce).then(std::move(finish), std::string(" for ") + name() + shape);
}

}  // namespace lockstep::ddp
