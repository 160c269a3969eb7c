// What a prepared loader holds: its shard loader, this rank's plan, the epoch and the batch of the pass in
// progress (internal; include/lockstep/train/accelerator/prepared_loader.h is its handle).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

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
  // elastic: the batches of the pass so far are committed (every rank applied the step they fed).
  void commit();
  // elastic: the plan is now `rank` of `world` (from `old_world`). A pass in progress goes on with the rest
  // of its epoch dealt over the new world: the next advance() returns the first batch of that.
  void reshard(int old_world, int world, int rank);

  std::unique_ptr<data::detail::AnyShardLoader> loader;
  data::ShardPlan plan;  // this rank's, but for the epoch
  std::shared_ptr<GradientState> gradient_state;
  c10::Device device;
  int64_t epoch = 0;
  int64_t batches = 0;  // of the pass in progress (-1: a stream of unknown length)
  int64_t batch_index = -1;
  data::detail::AnyBatch current;  // null outside a pass
  // elastic: batches of the current plan every rank committed, and the parts of the pass's epoch that
  // earlier worlds ran (ShardPlan::before; empty outside a re-sharded pass).
  int64_t committed = 0;
  std::vector<data::EpochPart> before;
  // elastic: run before each pass and each batch (Accelerator::at_batch_boundary: an admission the last
  // vote decided, or a joiner's first state); keep_before: the next pass goes on with `before` (a joiner's
  // received position) instead of starting its epoch.
  std::function<void()> at_boundary;
  bool keep_before = false;
};

}  // namespace lockstep::train::detail
