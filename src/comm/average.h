#pragma once

// The division that turns a summed all-reduce into an average (private to comm/): floating and complex
// tensors divide exactly, integer tensors truncate (Gloo and the shm/hier backends sum; only NCCL averages).

#include <ATen/ATen.h>

namespace lockstep::comm::detail {

inline void divide_for_average(at::Tensor& tensor, int world_size) {
  if (at::isFloatingType(tensor.scalar_type()) || at::isComplexType(tensor.scalar_type())) {
    tensor.div_(world_size);
  } else {
    tensor.div_(world_size, /*rounding_mode=*/"trunc");
  }
}

}  // namespace lockstep::comm::detail
