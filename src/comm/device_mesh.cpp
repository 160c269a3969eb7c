#include "lockstep/comm/device_mesh.h"

#include <stdexcept>
#include <string>

#include <ATen/ops/full.h>

#include "backend.h"

namespace lockstep::comm {

namespace {

// The checks DeviceMesh's constructor documents; `all` holds every rank's tensor_parallel.
void check_tensor_parallel(const ProcessGroup& world, const at::Tensor& all, int tensor_parallel) {
  const std::string what = "DeviceMesh: tensor_parallel " + std::to_string(tensor_parallel);
  for (int r = 0; r < world.size(); ++r) {
    const int64_t theirs = all[r].item<int64_t>();
    if (theirs != tensor_parallel) {
      throw std::invalid_argument(what + " on rank " + std::to_string(world.world_rank()) + " but " +
                                  std::to_string(theirs) + " on rank " + std::to_string(r) +
                                  ": every rank must pass the same value");
    }
  }
  if (tensor_parallel < 1 || world.size() % tensor_parallel != 0) {
    throw std::invalid_argument(what + " does not divide the world of " + std::to_string(world.size()) +
                                " ranks: choose a divisor of it (the data-parallel size is world / T)");
  }
  const int per_node = detail::hier_local_world_size(world.options());
  if (world.options().num_nodes() > 1 && per_node % tensor_parallel != 0) {
    throw std::invalid_argument(what + " does not divide the " + std::to_string(per_node) +
                                " ranks per node: a tensor-parallel group would span nodes, and it "
                                "all-reduces in every layer; choose T dividing the ranks per node");
  }
}

}  // namespace

DeviceMesh::DeviceMesh(ProcessGroup& world, int tensor_parallel) : world_(&world) {
  check_tensor_parallel(world,
                        world.all_gather_stacked(at::full({1}, tensor_parallel, at::kLong)).reshape({-1}),
                        tensor_parallel);
  tp_ = world.split(world.rank() / tensor_parallel, "tp");
  dp_ = world.split(world.rank() % tensor_parallel, "dp");
}

void DeviceMesh::shutdown() {
  tp_.shutdown();
  dp_.shutdown();
}

}  // namespace lockstep::comm
