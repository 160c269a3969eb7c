// The Trainer: see include/lockstep/train/trainer.h.
#include "lockstep/train/trainer.h"

#include "lockstep/shard/shard_checkpoint.h"
#include "lockstep/shard/zero_optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <thread>

#include <nlohmann/json.hpp>

#include <torch/optim/optimizer.h>

#include "every_rank.h"
#include "lockstep/comm/process_group.h"
#include "lockstep/launch/launcher.h"
#include "lockstep/launch/rank_start.h"
#include "lockstep/models/tensor_parallel_layout.h"
#include "lockstep/train/checkpoint.h"
#include "lockstep/train/precision.h"
#include "option_checks.h"
#include "trainer_run.h"

namespace lockstep::train {
namespace {

// CheckpointState::tensor_parallel_layout of `module`: its split parameters' layouts by name.
std::string tensor_parallel_layout(const torch::nn::Module& module) {
  const std::vector<models::ParameterSplit> splits = models::parameter_splits(module);
  const auto named = module.named_parameters();
  nlohmann::json layout = nlohmann::json::object();
  for (size_t i = 0; i < splits.size(); ++i) {
    if (!splits[i].replicated()) layout[named[i].key()] = {splits[i].dim, splits[i].chunks};
  }
  return layout.dump();
}

// This program's own command line, to start it again as ranks.
std::vector<std::string> own_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> argv;
  std::string::size_type begin = 0;
  while (begin < all.size()) {
    const auto end = all.find('\0', begin);
    argv.push_back(all.substr(begin, end - begin));
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  if (argv.empty())
    throw std::runtime_error("cannot read this program's command line from /proc/self/cmdline");
  argv[0] = std::filesystem::read_symlink("/proc/self/exe").string();  // argv[0] may be relative to PATH
  return argv;
}

// launch::plan_rank_start decides. Started as a process of its own with devices(N > 1) (or as srun's one
// task of a node), fit() starts the ranks: it runs this program again through lockstep's launcher
// (Lightning's subprocess launcher) and leaves with their status; it never returns then. Returns who this
// process is otherwise. An environment given in the options stands for the one read from the process.
env::Environment start_ranks_or_become_one(const TrainerOptions& options) {
  launch::RankRequest request;
  request.devices = options.devices();
  request.num_nodes = options.num_nodes();
  request.mpi_backend = options.backend() == comm::Backend::kMpi;
  const env::Environment environment = options.environment().value_or(env::from_env());
  std::optional<env::SlurmNode> slurm_node;
  if (environment.source == env::Source::kSlurm) slurm_node = env::slurm_node();
  auto plan = launch::plan_rank_start(request, own_command_line(), environment, slurm_node);
  if (plan.become_rank) return plan.environment;
  if (options.collective_timeout()) plan.launch->collective_timeout(*options.collective_timeout());
  launch::Launcher launcher(*plan.launch);
  std::fflush(nullptr);
  std::exit(launcher.run().exit_status);
}

}  // namespace

int threads_per_rank(int requested, const env::Environment& environment) {
  if (requested > 0) return requested;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return std::max(1, static_cast<int>(cores) / std::max(1, environment.local_world_size));
}

Trainer::Trainer(TrainerOptions options) : options_(std::move(options)) {}
Trainer::~Trainer() = default;

int Trainer::rank() const {
  return rank_;
}
int Trainer::world_size() const {
  return world_size_;
}
int64_t Trainer::current_epoch() const {
  return run_ ? run_->step_state->epoch : 0;
}
int64_t Trainer::global_step() const {
  return run_ ? run_->position.step : 0;
}

const std::map<std::string, double>& Trainer::callback_metrics() const {
  static const std::map<std::string, double> empty;
  return run_ ? run_->callback_metrics : empty;
}

std::vector<double> Trainer::learning_rates() const {
  std::vector<double> rates;
  if (!run_ || !run_->optimizer) return rates;
  for (const auto& group : run_->optimizer->param_groups()) rates.push_back(group.options().get_lr());
  return rates;
}

void Trainer::request_stop(const std::string& reason) {
  if (!run_) return;
  if (!run_->stop_requested) run_->stop_reason = reason;
  run_->stop_requested = true;
}

bool Trainer::should_stop() const {
  return run_ && run_->stop_requested;
}

void Trainer::save_checkpoint(const std::string& path) {
  if (!run_) throw std::logic_error("Trainer::save_checkpoint outside fit()");
  Run& run = *run_;
  comm::ProcessGroup& world = *run.group;
  // The ranks whose states differ: the world, or under tensor and pipeline parallelism each part's
  // data-parallel group (Run::part_rank: a tensor-parallel rank's slices, a stage's optimizer), which
  // writes that part (tensor_parallel_path).
  comm::ProcessGroup& group = run.data_group();
  const int part = run.part_rank();
  const int64_t step = run.position.step;
  if (run.mid_accumulation) {
    throw std::logic_error("save_checkpoint('" + path + "') in the middle of an accumulation group (batch " +
                           std::to_string(run.position.batch) +
                           "): the accumulated gradients would be lost; save when BatchEnd::stepped is true");
  }
  // Every rank must be saving the same file: a callback deciding from rank-local values would otherwise
  // make the ranks' collectives diverge. Name it instead of hanging.
  const std::vector<std::string> paths = world.all_gather_strings(path);
  for (int r = 0; r < world.size(); ++r) {
    if (paths[r] != paths[0]) {
      throw std::runtime_error(
          "save_checkpoint: rank 0 saves '" + paths[0] + "' but rank " + std::to_string(r) + " saves '" +
          paths[r] + "': callbacks must decide from callback_metrics() only (the same on every rank)");
    }
  }
  // Under tensor parallelism the save's name (world rank 0's draw) names the other ranks' parts.
  const std::string save =
      run.mesh ? world.broadcast_string(world.rank() == 0 ? tensor_parallel_save_name(step) : "") : "";
  const std::string mine = tensor_parallel_path(path, part, save);
  // Under pipeline parallelism every stage's part holds the whole model (any part exports alone), and its
  // stage's optimizer state.
  const shard::FullParameters whole = run.strategy->checkpoint_parameters();
  run.flush_graph_logs();  // what replays of a CUDA graph logged, into the table
  const at::Tensor rng_states = group.all_gather_stacked(cpu_rng_state());
  std::vector<std::string> logged =
      group.all_gather_strings(run.position.batch == 0 ? std::string() : run.logged().to_json());
  // Sharded strategies (zero1, zero2, fsdp): every rank writes its shard, nothing is gathered; once all are
  // on disk rank 0 commits the checkpoint that names them (shard_checkpoint.h).
  shard::ZeroOptimizer* zero = run.strategy->sharded_optimizer(0);
  std::vector<std::string> shards;
  if (zero) {
    detail::on_every_rank(run.mesh ? world : group, "save_checkpoint('" + path + "')", [&] {
      shards = save_checkpoint_shard(mine, *zero, group.rank(), group.size(), step);
      return std::string();
    });
  }
  // Tensor parallelism: rank 0's part, at `path`, is written once every other part is (or every rank
  // knows one is not); it names the new set, and then the sets it replaced go. Every rank learns whether
  // rank 0's write succeeded too.
  if (run.mesh) {
    detail::on_every_rank(world, "save_checkpoint('" + path + "')", [&] {
      if (part > 0 && group.rank() == 0) write_checkpoint(mine, rng_states, logged, shards, save);
      return std::string();
    });
  }
  detail::on_every_rank(world, "save_checkpoint('" + path + "')", [&] {
    if (part > 0 || group.rank() != 0) return std::string();
    write_checkpoint(mine, rng_states, std::move(logged), std::move(shards), save);
    if (run.mesh) remove_tensor_parallel_parts(path, run.parts(), save);
    return std::string();
  });
}

// Rank 0 of its group: the checkpoint file of `path` with everything but what save_checkpoint gathered.
void Trainer::write_checkpoint(const std::string& path, at::Tensor rng_states,
                               std::vector<std::string> logged, std::vector<std::string> shards,
                               const std::string& save) {
  Run& run = *run_;
  comm::ProcessGroup& group = run.data_group();
  shard::ZeroOptimizer* zero = run.strategy->sharded_optimizer(0);
  CheckpointState state;
  state.position = run.position;
  state.world_size = group.size();
  state.model = run.module->checkpoint_name();
  state.config = options_.description();
  state.rng_states = rng_states;
  state.logged_states = std::move(logged);
  for (const auto& callback : options_.callbacks())
    state.callback_states[callback->state_key()] = callback->state_dict();
  if (run.scaler.enabled()) state.scaler_state = run.scaler.state();
  state.reshard_parts = run.reshard_parts;
  state.batches_per_step = run.batches_per_step;
  state.shards = std::move(shards);
  state.tensor_parallel = run.mesh ? run.mesh->tensor_parallel() : 1;
  state.pipeline_parallel = run.mesh ? run.mesh->pipeline_parallel() : 1;
  if (run.mesh) {
    if (state.tensor_parallel > 1) state.tensor_parallel_layout = tensor_parallel_layout(*run.module);
    state.tensor_parallel_rank = run.part_rank();
    state.tensor_parallel_save = save;
  }
  if (zero) {
    save_sharded_checkpoint(path, *run.module, shard::optimizer_parameters(*zero), state);
  } else {
    train::save_checkpoint(path, *run.module, *run.optimizer, state);
  }
}

void Trainer::remove_checkpoint(const std::string& path) {
  if (rank() != 0) return;
  std::error_code ignored;
  std::filesystem::remove(path, ignored);     // first: what is left is named by no checkpoint
  remove_checkpoint_shards(path);             // a sharded checkpoint's, beside it
  remove_tensor_parallel_parts(path, 1, "");  // a tensor-parallel checkpoint's other parts, and theirs
}

void Trainer::log_metrics(const std::map<std::string, double>& values) {
  if (!run_) return;
  run_->log_scalars({values.begin(), values.end()}, run_->position.step);
  if (!run_->metrics_writer) return;
  nlohmann::ordered_json record = {{"epoch", run_->step_state->epoch}, {"step", run_->position.step}};
  for (const auto& [name, value] : values) {
    if (std::isfinite(value)) {
      record[name] = value;
    } else {
      record[name] = nullptr;  // JSON has no NaN or Infinity
    }
  }
  run_->metrics_writer->write_line(record.dump());
}

TrainerResult Trainer::fit_erased(std::shared_ptr<TrainModuleBase> module, DataModuleBase& data) {
  if (!module) throw std::invalid_argument("Trainer::fit: the module is null");
  options_.validate();
  const env::Environment environment = start_ranks_or_become_one(options_);
  struct RunReset {  // the TrainerContext answers "no run" again after fit(), also when it throws
    std::unique_ptr<Run>& run;
    ~RunReset() { run.reset(); }
  } reset{run_};
  run_ = std::make_unique<Run>(*this, std::move(module), data, environment);
  run_->restore();
  return run_->fit();
}

comm::ProcessGroup* Trainer::process_group() {
  return run_ ? run_->group : nullptr;
}

comm::ElasticWorld* Trainer::elastic_world() {
  return run_ ? run_->elastic.get() : nullptr;
}

}  // namespace lockstep::train
