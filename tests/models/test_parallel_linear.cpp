// Megatron's tensor-parallel linear layers over T ranks as threads (c10d::HashStore + Gloo), against one
// process's torch::nn::Linear: the region functions' collectives, a Column → GELU → Row MLP in float64
// (outputs and every gradient slice within 1e-12), gathered and scattered single layers, initialisation
// independent of T, data × tensor parallel steps on a DeviceMesh, and the divisibility errors. Worlds 1, 2,
// 3, 4, 8: every split size here (24) is divisible by each of them.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "../comm/thread_group.h"
#include "lockstep/comm/device_mesh.h"
#include "lockstep/comm/process_group.h"
#include "lockstep/models/parallel_linear.h"
#include "parallel_testing.h"

namespace lockstep::models {
namespace {

using lockstep::testing::lock_default_generator;
using lockstep::testing::max_abs_diff;
using lockstep::testing::mesh_shape_name;
using lockstep::testing::MeshShape;
using lockstep::testing::run_group_ranks;
using lockstep::testing::thread_group_options;

constexpr int64_t kIn = 6;
constexpr int64_t kHidden = 24;  // divisible by 1, 2, 3, 4 and 8
constexpr int64_t kOut = 5;
constexpr int64_t kBatch = 4;
constexpr double kTolerance = 1e-12;

class ParallelLinearWorld : public ::testing::TestWithParam<int> {
 protected:
  // Runs `body(rank, group)` on each of GetParam() ranks, each with its own Gloo group over one store.
  void run(const std::string& run_id, const std::function<void(int, comm::ProcessGroup&)>& body) {
    run_group_ranks(GetParam(), run_id, body);
  }
};

// A full Linear in float64 made after manual_seed(seed), under the test's generator lock.
torch::nn::Linear reference_linear(int64_t in, int64_t out, uint64_t seed) {
  auto lock = lock_default_generator(seed);
  torch::nn::Linear linear(in, out);
  linear->to(at::kDouble);
  return linear;
}

TEST_P(ParallelLinearWorld, CopyToRegionIsTheIdentityForwardAndAllReducesTheGradient) {
  const int world = GetParam();
  run("tp-copy", [&](int rank, comm::ProcessGroup& group) {
    auto x = at::arange(6, at::kDouble).reshape({2, 3}).requires_grad_();
    auto y = copy_to_tensor_parallel_region(x, group);
    EXPECT_TRUE(at::equal(y, x));
    // Only x's gradient depends on the region's backward: rank r's loss weighs y by r + 1.
    (y * static_cast<double>(rank + 1)).sum().backward();
    EXPECT_TRUE(at::equal(x.grad(), at::full({2, 3}, world * (world + 1) / 2.0, at::kDouble))) << x.grad();
  });
}

TEST_P(ParallelLinearWorld, ReduceFromRegionAllReducesForwardAndPassesTheGradientThrough) {
  const int world = GetParam();
  run("tp-reduce", [&](int rank, comm::ProcessGroup& group) {
    auto x = (at::arange(6, at::kDouble).reshape({2, 3}) * (rank + 1)).requires_grad_();
    auto y = reduce_from_tensor_parallel_region(x, group);
    EXPECT_TRUE(at::equal(y, at::arange(6, at::kDouble).reshape({2, 3}) * (world * (world + 1) / 2.0))) << y;
    (y * 3.0).sum().backward();
    EXPECT_TRUE(at::equal(x.grad(), at::full({2, 3}, 3.0, at::kDouble))) << x.grad();
  });
}

TEST_P(ParallelLinearWorld, GatherFromRegionConcatenatesTheLastDimAndKeepsThisRanksGradient) {
  const int world = GetParam();
  run("tp-gather", [&](int rank, comm::ProcessGroup& group) {
    auto x = at::full({2, 3}, static_cast<double>(rank), at::kDouble).requires_grad_();
    auto y = gather_from_tensor_parallel_region(x, group);
    ASSERT_EQ(y.sizes(), (std::vector<int64_t>{2, 3 * world}));
    for (int r = 0; r < world; ++r) {
      EXPECT_TRUE(at::equal(y.narrow(1, 3 * r, 3), at::full({2, 3}, static_cast<double>(r), at::kDouble)));
    }
    auto weights = at::arange(2 * 3 * world, at::kDouble).reshape({2, 3 * world});
    (y * weights).sum().backward();
    EXPECT_TRUE(at::equal(x.grad(), weights.narrow(1, 3 * rank, 3))) << x.grad();
  });
}

TEST_P(ParallelLinearWorld, ScatterToRegionKeepsThisRanksSliceAndAllGathersTheGradient) {
  const int world = GetParam();
  run("tp-scatter", [&](int rank, comm::ProcessGroup& group) {
    auto x = at::arange(2 * 3 * world, at::kDouble).reshape({2, 3 * world}).requires_grad_();
    auto y = scatter_to_tensor_parallel_region(x, group);
    EXPECT_TRUE(at::equal(y, x.detach().narrow(1, 3 * rank, 3)));
    (y * static_cast<double>(rank + 1)).sum().backward();
    for (int r = 0; r < world; ++r) {
      EXPECT_TRUE(at::equal(x.grad().narrow(1, 3 * r, 3), at::full({2, 3}, r + 1.0, at::kDouble)))
          << x.grad();
    }
  });
}

TEST_P(ParallelLinearWorld, ColumnThenRowMlpEqualsOneProcessInOutputAndEveryGradient) {
  const int world = GetParam();
  auto fc1 = reference_linear(kIn, kHidden, 11);
  auto fc2 = reference_linear(kHidden, kOut, 12);
  auto x_full = at::randn({kBatch, kIn}, at::kDouble);
  auto loss_weights = at::randn({kBatch, kOut}, at::kDouble);
  auto x_ref = x_full.clone().requires_grad_();
  auto y_ref = fc2(at::gelu(fc1(x_ref)));
  (y_ref * loss_weights).sum().backward();

  run("tp-mlp", [&](int rank, comm::ProcessGroup& group) {
    ColumnParallelLinear column(ColumnParallelLinearOptions(kIn, kHidden).gather_output(false), group);
    RowParallelLinear row(RowParallelLinearOptions(kHidden, kOut).input_is_parallel(true), group);
    column->to(at::kDouble);
    row->to(at::kDouble);
    column->load_full(fc1->weight, fc1->bias);
    row->load_full(fc2->weight, fc2->bias);

    auto x = x_full.clone().requires_grad_();
    auto hidden = column(x);
    ASSERT_EQ(hidden.sizes(), (std::vector<int64_t>{kBatch, kHidden / world}));
    auto y = row(at::gelu(hidden));
    (y * loss_weights).sum().backward();

    const int64_t slice = kHidden / world;
    EXPECT_LT(max_abs_diff(y, y_ref), kTolerance) << "rank " << rank;
    EXPECT_LT(max_abs_diff(x.grad(), x_ref.grad()), kTolerance) << "rank " << rank;
    EXPECT_LT(max_abs_diff(column->weight.grad(), fc1->weight.grad().narrow(0, rank * slice, slice)),
              kTolerance);
    EXPECT_LT(max_abs_diff(column->bias.grad(), fc1->bias.grad().narrow(0, rank * slice, slice)), kTolerance);
    EXPECT_LT(max_abs_diff(row->weight.grad(), fc2->weight.grad().narrow(1, rank * slice, slice)),
              kTolerance);
    EXPECT_LT(max_abs_diff(row->bias.grad(), fc2->bias.grad()), kTolerance);
  });
}

TEST_P(ParallelLinearWorld, ColumnWithGatherOutputEqualsTheFullLinearOnEveryRank) {
  auto fc = reference_linear(kIn, kHidden, 21);
  auto x_full = at::randn({kBatch, kIn}, at::kDouble);
  auto loss_weights = at::randn({kBatch, kHidden}, at::kDouble);
  auto x_ref = x_full.clone().requires_grad_();
  auto y_ref = fc(x_ref);
  (y_ref * loss_weights).sum().backward();

  run("tp-column-gather", [&](int rank, comm::ProcessGroup& group) {
    ColumnParallelLinear column(ColumnParallelLinearOptions(kIn, kHidden), group);  // gather_output: default
    column->to(at::kDouble);
    column->load_full(fc->weight, fc->bias);
    auto x = x_full.clone().requires_grad_();
    auto y = column(x);
    (y * loss_weights).sum().backward();
    EXPECT_LT(max_abs_diff(y, y_ref), kTolerance) << "rank " << rank;
    EXPECT_LT(max_abs_diff(x.grad(), x_ref.grad()), kTolerance) << "rank " << rank;
  });
}

TEST_P(ParallelLinearWorld, RowWithFullInputEqualsTheFullLinearOnEveryRank) {
  auto fc = reference_linear(kHidden, kOut, 31);
  auto x_full = at::randn({kBatch, kHidden}, at::kDouble);
  auto loss_weights = at::randn({kBatch, kOut}, at::kDouble);
  auto x_ref = x_full.clone().requires_grad_();
  auto y_ref = fc(x_ref);
  (y_ref * loss_weights).sum().backward();

  run("tp-row-scatter", [&](int rank, comm::ProcessGroup& group) {
    RowParallelLinear row(RowParallelLinearOptions(kHidden, kOut), group);  // input_is_parallel: default
    row->to(at::kDouble);
    row->load_full(fc->weight, fc->bias);
    auto x = x_full.clone().requires_grad_();
    auto y = row(x);
    (y * loss_weights).sum().backward();
    EXPECT_LT(max_abs_diff(y, y_ref), kTolerance) << "rank " << rank;
    EXPECT_LT(max_abs_diff(x.grad(), x_ref.grad()), kTolerance) << "rank " << rank;
  });
}

TEST_P(ParallelLinearWorld, InitialisationFromASeedDoesNotDependOnTheGroupSize) {
  const int world = GetParam();
  constexpr uint64_t kSeed = 7;
  std::vector<at::Tensor> column_weights(world), column_biases(world), row_weights(world), row_biases(world);
  run("tp-init", [&](int rank, comm::ProcessGroup& group) {
    {
      auto lock = lock_default_generator(kSeed);
      ColumnParallelLinear column(ColumnParallelLinearOptions(kIn, kHidden), group);
      column_weights[rank] = column->weight.detach();
      column_biases[rank] = column->bias.detach();
    }
    auto lock = lock_default_generator(kSeed);
    RowParallelLinear row(RowParallelLinearOptions(kHidden, kIn), group);
    row_weights[rank] = row->weight.detach();
    row_biases[rank] = row->bias.detach();
  });
  torch::manual_seed(kSeed);
  torch::nn::Linear column_ref(kIn, kHidden);
  torch::manual_seed(kSeed);
  torch::nn::Linear row_ref(kHidden, kIn);
  EXPECT_TRUE(at::equal(at::cat(column_weights, 0), column_ref->weight));
  EXPECT_TRUE(at::equal(at::cat(column_biases, 0), column_ref->bias));
  EXPECT_TRUE(at::equal(at::cat(row_weights, 1), row_ref->weight));
  for (int r = 0; r < world; ++r) EXPECT_TRUE(at::equal(row_biases[r], row_ref->bias)) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Worlds, ParallelLinearWorld, ::testing::Values(1, 2, 3, 4, 8));

// Sizes that the group's size does not divide: the error names both numbers (a world of 4; 10 % 4 != 0).
// Data × tensor parallel on a DeviceMesh: each data-parallel rank takes its rows of the global batch, the
// tensor-parallel group splits the MLP, and gradients are summed over the data-parallel group. Three SGD
// steps end on the parameters one process reaches on the whole batch (float64, 1e-12), on every rank.
class ParallelLinearMesh : public ::testing::TestWithParam<MeshShape> {};

TEST_P(ParallelLinearMesh, DataTimesTensorParallelStepsEqualOneProcessOnTheGlobalBatch) {
  const auto [world, tp] = GetParam();
  const int dp = world / tp;
  const int64_t global = kBatch * dp;
  constexpr int kSteps = 3;
  constexpr double kLr = 0.1;
  auto fc1 = reference_linear(kIn, kHidden, 21);
  auto fc2 = reference_linear(kHidden, kOut, 22);
  std::vector<at::Tensor> inputs;
  std::vector<at::Tensor> targets;
  {
    auto lock = lock_default_generator(23);
    for (int step = 0; step < kSteps; ++step) {
      inputs.push_back(at::randn({global, kIn}, at::kDouble));
      targets.push_back(at::randn({global, kOut}, at::kDouble));
    }
  }
  // The loss of a batch's rows: the squared error summed, over the global batch size (a mean over it).
  const auto loss_of = [&](const at::Tensor& y, const at::Tensor& target) {
    return (y - target).pow(2).sum() / static_cast<double>(global);
  };
  const auto sgd = [&](const std::vector<at::Tensor>& parameters) {
    at::NoGradGuard no_grad;
    for (const at::Tensor& p : parameters) {
      p.sub_(p.grad() * kLr);
      p.mutable_grad().zero_();
    }
  };
  const std::vector<at::Tensor> reference = {fc1->weight, fc1->bias, fc2->weight, fc2->bias};
  const at::Tensor w1 = fc1->weight.detach().clone(), b1 = fc1->bias.detach().clone();
  const at::Tensor w2 = fc2->weight.detach().clone(), b2 = fc2->bias.detach().clone();
  for (int step = 0; step < kSteps; ++step) {
    loss_of(fc2(at::gelu(fc1(inputs[step]))), targets[step]).backward();
    sgd(reference);
  }

  run_group_ranks(world, "tp-mesh", [&](int rank, comm::ProcessGroup& group) {
    comm::DeviceMesh mesh(group, tp);
    ColumnParallelLinear column(ColumnParallelLinearOptions(kIn, kHidden).gather_output(false), mesh.tp());
    RowParallelLinear row(RowParallelLinearOptions(kHidden, kOut).input_is_parallel(true), mesh.tp());
    column->to(at::kDouble);
    row->to(at::kDouble);
    column->load_full(w1, b1);
    row->load_full(w2, b2);
    const std::vector<at::Tensor> mine = {column->weight, column->bias, row->weight, row->bias};
    for (int step = 0; step < kSteps; ++step) {
      const at::Tensor x = inputs[step].narrow(0, mesh.dp_rank() * kBatch, kBatch);
      const at::Tensor target = targets[step].narrow(0, mesh.dp_rank() * kBatch, kBatch);
      loss_of(row(at::gelu(column(x))), target).backward();
      for (const at::Tensor& p : mine) {
        at::Tensor grad = p.mutable_grad();
        mesh.dp().all_reduce(grad, comm::ReduceOp::kSum).wait();
      }
      sgd(mine);
    }
    const int64_t slice = kHidden / tp;
    const int64_t at_slice = mesh.tp_rank() * slice;
    EXPECT_LT(max_abs_diff(column->weight, fc1->weight.narrow(0, at_slice, slice)), kTolerance) << rank;
    EXPECT_LT(max_abs_diff(column->bias, fc1->bias.narrow(0, at_slice, slice)), kTolerance) << rank;
    EXPECT_LT(max_abs_diff(row->weight, fc2->weight.narrow(1, at_slice, slice)), kTolerance) << rank;
    EXPECT_LT(max_abs_diff(row->bias, fc2->bias), kTolerance) << rank;
    mesh.shutdown();
  });
}

INSTANTIATE_TEST_SUITE_P(Shapes, ParallelLinearMesh,
                         ::testing::Values(MeshShape{2, 2}, MeshShape{2, 1}, MeshShape{4, 2}, MeshShape{8, 2},
                                           MeshShape{8, 4}),
                         mesh_shape_name);

TEST(ParallelLinear, SizesNotDivisibleByTheGroupSizeAreRefusedNamingBoth) {
  run_group_ranks(4, "tp-errors", [&](int, comm::ProcessGroup& group) {
    try {
      ColumnParallelLinear column(ColumnParallelLinearOptions(kIn, 10), group);
      ADD_FAILURE() << "ColumnParallelLinear accepted out_features 10 over 4 ranks";
    } catch (const c10::Error& e) {
      EXPECT_NE(
          std::string(e.what()).find("ColumnParallelLinearOptions::out_features (10) must be divisible by "
                                     "the tensor-parallel group's size (4)"),
          std::string::npos)
          << e.what();
    }
    try {
      RowParallelLinear row(RowParallelLinearOptions(10, kOut), group);
      ADD_FAILURE() << "RowParallelLinear accepted in_features 10 over 4 ranks";
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find("RowParallelLinearOptions::in_features (10) must be divisible by "
                                           "the tensor-parallel group's size (4)"),
                std::string::npos)
          << e.what();
    }
    try {
      scatter_to_tensor_parallel_region(at::zeros({2, 10}), group);
      ADD_FAILURE() << "scatter_to_tensor_parallel_region accepted a last dimension of 10 over 4 ranks";
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find("(10) must be divisible by the tensor-parallel group's size (4)"),
                std::string::npos)
          << e.what();
    }
  });
}

TEST(ParallelLinear, WrongInputWidthAndFullWeightShapeAreRefusedNamingTheSizes) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto group = comm::init_process_group(thread_group_options(0, 1, store, "tp-shapes"));
  ColumnParallelLinear column(ColumnParallelLinearOptions(kIn, kHidden), group);
  try {
    column(at::zeros({2, kIn + 1}));
    ADD_FAILURE() << "forward accepted 7 features";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected [..., 6]"), std::string::npos) << e.what();
  }
  try {
    column->load_full(at::zeros({kIn, kHidden}), at::zeros({kHidden}));
    ADD_FAILURE() << "load_full accepted a transposed weight";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected a full weight of [24, 6]"), std::string::npos) << e.what();
  }
  group.shutdown();
}

}  // namespace
}  // namespace lockstep::models
