// The restore phase of Trainer::fit (trainer_run.h): resume from a checkpoint, re-sharding the rest of
// its epoch when the world size changed.
#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include <torch/serialize/input-archive.h>
#include <nlohmann/json.hpp>

#include "admission.h"
#include "every_rank.h"
#include "lockstep/shard/shard_checkpoint.h"
#include "lockstep/train/checkpoint.h"
#include "trainer_run.h"

namespace lockstep::train {

// options.resume_path(), or, in a run restarted by the launcher after a failure (torchrun's
// TORCHELASTIC_RESTART_COUNT), last.ckpt when there is one: go on from it rather than from scratch. Every
// rank sees the same file: rank 0 wrote it before the failure, and the launcher stopped every rank before
// restarting any.

std::string Trainer::Run::resume_path() const {
  if (const std::string asked = options.resume_path(); !asked.empty()) return asked;
  const auto last = std::filesystem::path(options.ckpt_dir()) / "last.ckpt";
  if (environment.restart_count > 0 && !options.ckpt_dir().empty() &&
      std::filesystem::is_regular_file(last)) {
    print_line("restart " + std::to_string(environment.restart_count) + ": resuming from " + last.string());
    return last.string();
  }
  return "";
}

void Trainer::Run::restore() {
  if (elastic && elastic->joined()) {
    receive_admission();
    return;
  }
  const std::string whole_path = resume_path();
  if (whole_path.empty()) return;
  resumed_ = true;
  const int world = data_group().size();
  const int rank = data_group().rank();
  CheckpointState saved;
  {
    const shard::FullParameters whole = strategy->whole_parameters();  // what is loaded into them, re-sharded
    saved = mesh ? load_tensor_parallel_part(whole_path)
                 : load_checkpoint(whole_path, module->checkpoint_name(), *module, *optimizer);
  }
  if (!saved.shards.empty()) load_shards(saved.shards);
  start_ = saved.position;
  for (const auto& callback : options.callbacks()) {
    if (auto it = saved.callback_states.find(callback->state_key()); it != saved.callback_states.end()) {
      callback->load_state_dict(it->second);
    }
  }
  if (saved.scaler_state.defined() && scaler.enabled()) scaler.load_state(saved.scaler_state);
  // keep_global_batch: the global batch of the run that wrote the checkpoint (of its world and this run's
  // accumulate_grad_batches when it did not keep one).
  const int64_t saved_per_step = saved.batches_per_step > 0
                                     ? saved.batches_per_step
                                     : saved.world_size * options.accumulate_grad_batches();
  if (batches_per_step > 0 && saved_per_step != batches_per_step) {
    batches_per_step = saved_per_step;
    plan_world();
    refresh_schedule();
  }
  reshard_parts = saved.reshard_parts;  // still inside an epoch re-sharded by the run that wrote it
  if (!reshard_parts.empty()) reshard_parts.front().planned = planned_batches(reshard_parts.front().world);
  if (saved.world_size == world) {
    set_cpu_rng_state(saved.rng_states[rank]);
    logged() = LoggedMetrics::from_json(saved.logged_states.at(static_cast<std::size_t>(rank)));
  } else if (start_.batch != 0 || !reshard_parts.empty()) {
    reshard_after(saved);
  }
  print_line(
      "resumed from " + whole_path + ": epoch " + std::to_string(saved.position.epoch) + ", batch " +
      std::to_string(saved.position.batch) + ", step " + std::to_string(saved.position.step) +
      " (written by " + std::to_string(saved.world_size) + " rank(s)" +
      (!reshard_parts.empty() && saved.world_size != world ? "; re-sharding the rest of the epoch" : "") +
      ")" + describe_batch());
  if (reshard_parts.empty() && train_batches_ >= 0 && start_.batch > train_batches_) {
    throw std::invalid_argument(
        "checkpoint position (epoch " + std::to_string(start_.epoch) + ", batch " +
        std::to_string(start_.batch) + ") is beyond this run's " + std::to_string(train_batches_) +
        " batches per epoch: resume with the batch size and limit_train_batches it was "
        "written with");
  }
}

// Under tensor and pipeline parallelism each rank loads its part (part_rank()), which its data-parallel
// group wrote (the position, generators and logged sums are that group's). Part 0, `whole_path`, names the
// save the others are of (tensor_parallel_path): the ranks of part 0 load it first, then the others
// theirs; every rank learns of a failure on any (detail::on_every_rank) instead of waiting.
CheckpointState Trainer::Run::load_tensor_parallel_part(const std::string& whole_path) {
  const int part = part_rank();
  const std::string what = "resume '" + whole_path + "'";
  CheckpointState saved;
  const auto load = [&](const std::string& path) {
    saved = load_checkpoint(path, module->checkpoint_name(), *module, *optimizer, mesh->tensor_parallel(),
                            mesh->pipeline_parallel());
  };
  const std::vector<std::string> saves = detail::on_every_rank(*group, what, [&] {
    if (part != 0) return std::string();
    load(whole_path);
    return saved.tensor_parallel_save;
  });
  const std::string& save = saves.at(0);
  detail::on_every_rank(*group, what, [&] {
    if (part == 0) return std::string();
    const std::string path = tensor_parallel_path(whole_path, part, save);
    if (!std::filesystem::is_regular_file(path)) {
      throw std::runtime_error(what + ": its part " + std::to_string(part) + ", '" + path +
                               "', is missing: copy the checkpoint with all its parts (" + whole_path +
                               ".tp<r>." + save + ")");
    }
    load(path);
    if (saved.tensor_parallel_save != save || saved.tensor_parallel_rank != part) {
      throw std::runtime_error(what + ": '" + path + "' is part " +
                               std::to_string(saved.tensor_parallel_rank) + " of save '" +
                               saved.tensor_parallel_save + "', not part " + std::to_string(part) + " of '" +
                               save + "': the parts are of different saves");
    }
    return std::string();
  });
  return saved;
}

// A sharded checkpoint's parameters and optimizer state, re-sharded onto this run's ranks: each rank reads
// every shard once (shard_checkpoint.h). A sharded strategy keeps its chunks (the parameters whole under
// zero1 and zero2); ddp takes the whole state.
void Trainer::Run::load_shards(const std::vector<std::string>& shards) {
  const shard::ShardReader read = [&](int k, torch::serialize::InputArchive& archive) {
    load_checksummed_archive(
        archive, shards.at(static_cast<size_t>(k)), "checkpoint shard",
        "resume from an older checkpoint (resume 'PATH'), copy the checkpoint with all its "
        "shards (PATH.step-S.shard-R-of-W) again, or start from scratch",
        device_);
  };
  const int count = static_cast<int>(shards.size());
  strategy->load_optimizer_shards(0, count, read);
}

// Mid-epoch on another world size: the old ranks' logged sums go to rank 0 (sync_dist sums stay exact over
// all ranks; rank-local values become rank 0's view), and the rest of the epoch is dealt anew: what the
// saved world trained becomes one more part of the epoch (its first, or after the parts before it).
void Trainer::Run::reshard_after(const CheckpointState& saved) {
  if (start_.batch != 0) {
    const int64_t planned = reshard_parts.empty() ? planned_batches(saved.world_size) : -1;
    reshard_parts.push_back(data::EpochPart{saved.world_size, start_.batch, planned});
  }
  if (data_group().rank() == 0) {
    LoggedMetrics merged = LoggedMetrics::from_json(saved.logged_states.at(0));
    for (std::size_t r = 1; r < saved.logged_states.size(); ++r) {
      const LoggedMetrics other = LoggedMetrics::from_json(saved.logged_states[r]);
      merged.samples += other.samples;
      for (const auto& [name, entry] : other.entries()) {
        if (entry.sync_dist) merged.add(name, entry.mean(), entry.weight, true, entry.prog_bar);
      }
    }
    logged() = std::move(merged);
  }
  start_.batch = 0;  // counts batches of the re-sharded rest from here on
}

// ---- elastic admission: what a joining rank gets from rank 0 ----

void Trainer::Run::send_admission(int64_t e, const std::vector<data::EpochPart>& parts) {
  std::string position_text;
  if (group->rank() == 0) {
    nlohmann::json state = {{"epoch", e},
                            {"step", position.step},
                            {"batches_per_step", batches_per_step},
                            {"parts", detail::parts_to_json(parts)},
                            {"callbacks", nlohmann::json::object()}};
    for (const auto& callback : options.callbacks())
      state["callbacks"][callback->state_key()] = callback->state_dict();
    position_text = state.dump();
  }
  detail::share_optimizer_state(*group, *optimizer, /*load=*/false, device_);
  group->broadcast_string(position_text);
  detail::share_scaler_state(*group, scaler, /*load=*/false);
}

void Trainer::Run::receive_admission() {
  detail::share_optimizer_state(*group, *optimizer, /*load=*/true, device_);
  const nlohmann::json state = nlohmann::json::parse(group->broadcast_string(""));
  start_ = TrainPosition{state.at("epoch").get<int64_t>(), 0, state.at("step").get<int64_t>()};
  batches_per_step = state.at("batches_per_step").get<int64_t>();  // the survivors' (its own start is not)
  plan_world();
  reshard_parts = detail::parts_from_json(state.at("parts"));
  for (const auto& callback : options.callbacks()) {
    if (auto it = state.at("callbacks").find(callback->state_key()); it != state.at("callbacks").end())
      callback->load_state_dict(it->get<std::string>());
  }
  detail::share_scaler_state(*group, scaler, /*load=*/true);
  step_state->step = start_.step;
  replan_at_start_ = true;
  // Said by the joiner itself (rank 0 says the change): its launcher's output shows it was admitted.
  std::fprintf(options.out(), "joined the running job at step %lld (epoch %lld) as rank %d of %d\n",
               static_cast<long long>(start_.step), static_cast<long long>(start_.epoch + 1), group->rank(),
               group->size());
  std::fflush(options.out());
}

void Trainer::Run::refuse_joined_between_epochs(const comm::MembershipChange& change) const {
  throw std::runtime_error(
      "elastic: " + change.describe() +
      ", but the joining rank(s) came in as the others recovered between epochs, where no step boundary "
      "can admit them (a join waits for the next step's vote; here a loss came first): start them again "
      "once the job trains");
}

}  // namespace lockstep::train
