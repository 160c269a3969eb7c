#include "lockstep/ddp/comm_hook.h"

#include <stdexcept>
#include <string>

#include <ATen/ATen.h>
#include <torch/version.h>

namespace lockstep::ddp {

comm::Work AllReduceHook::run(comm::ProcessGroup& group, at::Tensor& bucket) {
  return group.all_reduce(bucket, comm::ReduceOp::kAvg);
}

CompressionHook::CompressionHook(at::ScalarType dtype) : dtype_(dtype) {
  if (dtype != at::kBFloat16 && dtype != at::kHalf) {
    throw std::invalid_argument(std::string("CompressionHook: dtype must be at::kBFloat16 or at::kHalf, got ") +
                                c10::toString(dtype));
  }
#if TORCH_VERSION_MAJOR < 2
  // Gloo in LibTorch 1.x has no BFloat16 all-reduce (c10d fails with "Invalid scalar type"), and the
  // bf16 bits cannot be summed as another 16-bit type. Fail here rather than at the first backward.
  if (dtype == at::kBFloat16) {
    throw std::invalid_argument(
        "CompressionHook: dtype BFloat16 is not supported with LibTorch 1.x (its Gloo backend cannot all-reduce BFloat16 tensors); use at::kHalf (fp16_compress) instead");
  }
#endif
}

const char* CompressionHook::name() const { return dtype_ == at::kBFloat16 ? "bf16_compress" : "fp16_compress"; }

comm::Work CompressionHook::run(comm::ProcessGroup& group, at::Tensor& bucket) {
  TORCH_CHECK(at::isFloatingType(bucket.scalar_type()), name(), " needs a floating-point bucket, got ",
              bucket.scalar_type());
  // The staging tensor for this bucket: kept between steps, re-created only when the bucket changes shape.
  at::Tensor* staging = nullptr;
  for (auto& [ptr, tensor] : staging_) {
    if (ptr == bucket.data_ptr()) staging = &tensor;
  }
  if (staging == nullptr) staging = &staging_.emplace_back(bucket.data_ptr(), at::Tensor()).second;
  if (!staging->defined() || !staging->sizes().equals(bucket.sizes()) || staging->device() != bucket.device()) {
    *staging = at::empty(bucket.sizes(), bucket.options().dtype(dtype_));
  }
  staging->copy_(bucket);

  comm::Work reduce = group.all_reduce(*staging, comm::ReduceOp::kSum);
  // Divide after widening back into the bucket: one rounding fewer than dividing in 16 bits.
  std::function<void()> finish = [bucket, staged = *staging, world = group.size()]() mutable {
    bucket.copy_(staged);
    if (world > 1) bucket.div_(world);
  };
  std::string description = std::string(name()) + " allreduce (" + c10::toString(dtype_) + "[" +
                            std::to_string(bucket.numel()) + "]) of a " + c10::toString(bucket.scalar_type()) +
                            " bucket";
  return comm::Work(reduce.native(), std::move(description), group.rank(), group.options().collective_timeout(),
                    std::move(finish));
}

}  // namespace lockstep::ddp
