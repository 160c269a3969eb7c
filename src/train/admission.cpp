#include "admission.h"

#include <sstream>

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

namespace lockstep::train::detail {

void share_optimizer_state(comm::ProcessGroup& group, torch::optim::Optimizer& optimizer, bool load,
                           const c10::Device& device) {
  std::ostringstream out;
  if (group.rank() == 0) {
    torch::serialize::OutputArchive archive;
    optimizer.save(archive);
    archive.save_to(out);
  }
  const std::string bytes = group.broadcast_string(out.str());
  if (!load) return;
  std::istringstream in(bytes);
  torch::serialize::InputArchive archive;
  archive.load_from(in, device);
  optimizer.load(archive);
}

void share_scaler_state(comm::ProcessGroup& group, GradScaler& scaler, bool load) {
  if (!scaler.enabled()) return;
  at::Tensor state = scaler.state();
  group.broadcast(state).wait();
  if (load) scaler.load_state(state);
}

nlohmann::json parts_to_json(const std::vector<data::EpochPart>& parts) {
  nlohmann::json out = nlohmann::json::array();
  for (const data::EpochPart& part : parts) out.push_back({part.world, part.batches, part.planned});
  return out;
}

std::vector<data::EpochPart> parts_from_json(const nlohmann::json& parts) {
  std::vector<data::EpochPart> out;
  for (const auto& part : parts)
    out.push_back(
        data::EpochPart{part.at(0).get<int>(), part.at(1).get<int64_t>(), part.at(2).get<int64_t>()});
  return out;
}

}  // namespace lockstep::train::detail
