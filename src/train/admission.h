// What a rank joining a running job receives from rank 0 (docs/elastic.md, "Joining"), in the pieces that
// the Trainer (trainer_restore.cpp) and the Accelerator (accelerator.cpp) both send. Every rank of the new
// group calls each function in the same order: rank 0 sends, a joiner (`load`) takes what it sent, and a
// survivor only takes part in the broadcast (it holds the same state already).
#pragma once

#include <string>
#include <vector>

#include <c10/core/Device.h>
#include <torch/optim/optimizer.h>
#include <nlohmann/json.hpp>

#include "lockstep/comm/process_group.h"
#include "lockstep/data/epoch_part.h"
#include "lockstep/train/precision.h"

namespace lockstep::train::detail {

/// Rank 0's optimizer state (its serialized archive), loaded onto `device` where `load`.
void share_optimizer_state(comm::ProcessGroup& group, torch::optim::Optimizer& optimizer, bool load,
                           const c10::Device& device);

/// Rank 0's GradScaler state (scale and growth tracker), loaded where `load`; nothing when it is disabled.
void share_scaler_state(comm::ProcessGroup& group, GradScaler& scaler, bool load);

/// An epoch's parts on earlier worlds (data::ShardPlan::before) as JSON: [[world, batches, planned], ...].
nlohmann::json parts_to_json(const std::vector<data::EpochPart>& parts);
std::vector<data::EpochPart> parts_from_json(const nlohmann::json& parts);

}  // namespace lockstep::train::detail
