// A prepared loader's state and its type-free core (include/lockstep/train/accelerator/prepared_loader.h).
#include "lockstep/train/accelerator/prepared_loader.h"

#include <cstdint>

#include <c10/util/Exception.h>

#include "prepared_loader_state.h"

namespace lockstep::train::detail {

data::ShardPlan PreparedLoaderState::epoch_plan() const {
  data::ShardPlan p = plan;
  p.epoch = epoch;
  p.before = before;
  return p;
}

void PreparedLoaderState::begin_pass() {
  if (!keep_before) before.clear();
  keep_before = false;
  batches = loader->start(epoch_plan());
  batch_index = -1;
  committed = 0;
}

bool PreparedLoaderState::advance() {
  current = loader->next_any();
  if (!current) {
    gradient_state->batches_left = -1;
    before.clear();
    ++epoch;  // Accelerate's DataLoaderShard: each completed pass is the next epoch
    return false;
  }
  ++batch_index;
  if (device.type() != c10::kCPU) current = loader->to_device(current, device);
  // Read by the accumulate() of this batch: a group never reaches past the end of the pass, so a pass
  // whose length is not a multiple of gradient_accumulation_steps loses no gradients. A stream of
  // unknown length tells only at its last batch (the loader reads one ahead).
  if (batches >= 0) {
    gradient_state->batches_left = batches - batch_index;
  } else {
    gradient_state->batches_left = loader->at_last() ? 1 : -1;
  }
  return true;
}

void PreparedLoaderState::commit() {
  if (current) committed = batch_index + 1;
}

// The Trainer's recover_in_epoch, for one loader: what the old world committed becomes one more part of the
// epoch (its planned length given with the first part only, as there), and the rest is dealt over the new
// world from its first batch.
void PreparedLoaderState::reshard(int old_world, int world, int rank) {
  plan.world = world;
  plan.rank = rank;
  if (!current) return;  // between passes: the next one deals its epoch over the new world
  before.push_back(data::EpochPart{old_world, committed, before.empty() ? batches : -1});
  batches = loader->start(epoch_plan());
  batch_index = -1;
  committed = 0;
}

bool PreparedLoaderCore::begin_pass() {
  if (state_->at_boundary) state_->at_boundary();
  state_->begin_pass();
  return state_->advance();
}
bool PreparedLoaderCore::advance() {
  if (state_->at_boundary) state_->at_boundary();
  return state_->advance();
}
void* PreparedLoaderCore::current() const {
  TORCH_INTERNAL_ASSERT(state_->current != nullptr, "dereferencing the end of a PreparedLoader pass");
  return state_->current.get();
}
void PreparedLoaderCore::set_epoch(int64_t epoch) {
  state_->epoch = epoch;
}
int64_t PreparedLoaderCore::epoch() const {
  return state_->epoch;
}
int64_t PreparedLoaderCore::size() const {
  return state_->loader->batches(state_->epoch_plan());
}
data::detail::AnyShardLoader& PreparedLoaderCore::loader() {
  return *state_->loader;
}

}  // namespace lockstep::train::detail
