#include "lockstep/comm/device_mesh.h"

#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ops/tensor.h>

#include "backend.h"

namespace lockstep::comm {

namespace {

// The checks DeviceMesh's constructor documents; `all` holds every rank's [tensor_parallel,
// pipeline_parallel].
void check_sizes(const ProcessGroup& world, const at::Tensor& all, int tensor_parallel,
                 int pipeline_parallel) {
  const std::string what =
      "DeviceMesh: tensor_parallel " + std::to_string(tensor_parallel) +
      (pipeline_parallel != 1 ? " and pipeline_parallel " + std::to_string(pipeline_parallel) : "");
  for (int r = 0; r < world.size(); ++r) {
    const int64_t tp = all[r][0].item<int64_t>();
    const int64_t pp = all[r][1].item<int64_t>();
    if (tp != tensor_parallel || pp != pipeline_parallel) {
      throw std::invalid_argument(what + " on rank " + std::to_string(world.world_rank()) + " but " +
                                  std::to_string(tp) +
                                  (pp != 1 || pipeline_parallel != 1 ? " and " + std::to_string(pp) : "") +
                                  " on rank " + std::to_string(r) + ": every rank must pass the same value");
    }
  }
  if (tensor_parallel < 1 || world.size() % tensor_parallel != 0) {
    throw std::invalid_argument(what + " does not divide the world of " + std::to_string(world.size()) +
                                " ranks: choose a divisor of it (the data-parallel size is world / T)");
  }
  if (pipeline_parallel < 1 || world.size() % (tensor_parallel * pipeline_parallel) != 0) {
    throw std::invalid_argument(what + ": T x P = " + std::to_string(tensor_parallel * pipeline_parallel) +
                                " does not divide the world of " + std::to_string(world.size()) +
                                " ranks: choose P >= 1 with T x P dividing it (the data-parallel size is "
                                "world / (T x P))");
  }
  const int per_node = detail::hier_local_world_size(world.options());
  if (world.options().num_nodes() > 1 && per_node % tensor_parallel != 0) {
    throw std::invalid_argument(what + " does not divide the " + std::to_string(per_node) +
                                " ranks per node: a tensor-parallel group would span nodes, and it "
                                "all-reduces in every layer; choose T dividing the ranks per node");
  }
}

}  // namespace

DeviceMesh::DeviceMesh(ProcessGroup& world, int tensor_parallel, int pipeline_parallel) : world_(&world) {
  const at::Tensor mine = at::tensor(std::vector<int64_t>{tensor_parallel, pipeline_parallel}, at::kLong);
  check_sizes(world, world.all_gather_stacked(mine), tensor_parallel, pipeline_parallel);
  const int rank = world.rank();
  const int pipeline_size = tensor_parallel * pipeline_parallel;  // the ranks of one pipeline, P × T
  tp_ = world.split(rank / tensor_parallel, "tp");
  pp_ = world.split((rank / pipeline_size) * tensor_parallel + rank % tensor_parallel, "pp");
  dp_ = world.split(rank % pipeline_size, "dp");
}

void DeviceMesh::shutdown() {
  tp_.shutdown();
  pp_.shutdown();
  dp_.shutdown();
}

}  // namespace lockstep::comm
