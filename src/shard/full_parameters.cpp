// FullParameters: see include/lockstep/shard/full_parameters.h.
#include "lockstep/shard/full_parameters.h"

#include <cstdio>
#include <exception>
#include <utility>

namespace lockstep::shard {

FullParameters::FullParameters(std::vector<ShardedParameters*> models) : models_(std::move(models)) {
  for (auto* model : models_) model->gather_all();
}

FullParameters::~FullParameters() {
  for (auto* model : models_) {
    try {
      model->reshard(/*from_parameters=*/true);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "lockstep: FullParameters: resharding failed: %s\n", e.what());
    }
  }
}

}  // namespace lockstep::shard
