#pragma once

// A data × tensor parallel shape for the parameterised mesh tests of this folder.

#include <gtest/gtest.h>

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

}  // namespace lockstep::testing
