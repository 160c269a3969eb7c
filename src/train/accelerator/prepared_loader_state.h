// What a prepared loader holds: its shard loader, this rank's plan, the epoch and the batch of the pass in
// progress (internal; include/lockstep/train/accelerator/prepared_loader.h is its handle).
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include <c10/core/Device.h>

#include "gradient_state.h"
#include "lockstep/data/loader.h"
#include "lockstep/data/shard_loader.h"

namespace lockstep::train::detail {

struct PreparedLoaderState {
  PreparedLoaderState(std::unique_ptr<data::detail::AnyShardLoader> loader_in, data::ShardPlan plan_in,
                      std::shared_ptr<GradientState> gradient_state_in, c10::Device device_in)
      : loader(std::move(loader_in)),
        plan(plan_in),
        gradient_state(std::move(gradient_state_in)),
        device(device_in) {}

  data::ShardPlan epoch_plan() const;
  void begin_pass();
  // The next batch of the pass; false (and the epoch advanced) after the last one.
  bool advance();

  std::unique_ptr<data::detail::AnyShardLoader> loader;
  data::ShardPlan plan;  // this rank's, but for the epoch
  std::shared_ptr<GradientState> gradient_state;
  c10::Device device;
  int64_t epoch = 0;
  int64_t batches = 0;  // of the pass in progress (-1: a stream of unknown length)
  int64_t batch_index = -1;
  data::detail::AnyBatch current;
};

}  // namespace lockstep::train::detail
