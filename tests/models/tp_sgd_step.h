#pragma once

// One training step of a TensorParallelGpt on a DeviceMesh, as the tests and tp_gpt_worker take it.

#include <ATen/ATen.h>

#include "lockstep/comm/device_mesh.h"
#include "lockstep/models/tensor_parallel_gpt.h"

namespace lockstep::testing {

/// Plain SGD on this data-parallel rank's `rows` ([rows, length + 1] token ids): the loss of predicting
/// each next token, backward, every gradient averaged over mesh.dp(), p -= lr · grad. Returns the loss
/// averaged over mesh.dp() (one process's loss on all the data-parallel ranks' rows together).
inline double tp_sgd_step(models::TensorParallelGpt& model, comm::DeviceMesh& mesh, const at::Tensor& rows,
                          double lr) {
  const int64_t length = rows.size(1) - 1;
  const at::Tensor loss = model->loss(rows.slice(1, 0, length), rows.slice(1, 1));
  loss.backward();
  at::Tensor mean_loss = loss.detach().clone();
  mesh.dp().all_reduce(mean_loss, comm::ReduceOp::kAvg).wait();
  at::NoGradGuard no_grad;
  for (at::Tensor& p : model->parameters()) {
    at::Tensor grad = p.mutable_grad();
    mesh.dp().all_reduce(grad, comm::ReduceOp::kAvg).wait();
    p.sub_(grad * lr);
    grad.zero_();
  }
  return mean_loss.item<double>();
}

}  // namespace lockstep::testing
