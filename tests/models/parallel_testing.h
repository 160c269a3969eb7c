#pragma once

// What this folder's tensor-parallel tests share: the data × tensor parallel shape of a parameterised
// mesh test, and the comparison of a result with one process's.

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <string>

namespace lockstep::testing {

struct MeshShape {
  int world;
  int tensor_parallel;
};

/// "dp2_tp2": the test name of a shape.
inline std::string mesh_shape_name(const ::testing::TestParamInfo<MeshShape>& info) {
  return "dp" + std::to_string(info.param.world / info.param.tensor_parallel) + "_tp" +
         std::to_string(info.param.tensor_parallel);
}

/// The largest elementwise difference of two tensors of the same sizes (0 for empty ones).
inline double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  return a.numel() == 0 ? 0.0 : (a - b).abs().max().item<double>();
}

}  // namespace lockstep::testing
