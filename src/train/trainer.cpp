// The Trainer: see include/lockstep/train/trainer.h.
#include "lockstep/train/trainer.h"

#include <signal.h>
#include <sys/types.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include <ATen/Parallel.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/output-archive.h>
#include <torch/types.h>
#include <torch/utils.h>

#include "lockstep/comm/process_group.h"
#include "lockstep/data/distributed_sampler.h"
#include "lockstep/ddp/distributed_data_parallel.h"
#include "lockstep/launch/launcher.h"
#include "lockstep/train/atomic_file.h"
#include "lockstep/train/checkpoint.h"
#include "lockstep/train/precision.h"
#include "lockstep/train/progress_bar.h"
#include "lockstep/train/safetensors.h"

namespace lockstep::train {
namespace {

using Clock = std::chrono::steady_clock;
using Ddp = ddp::DistributedDataParallel<std::shared_ptr<TrainModule>>;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Options that contradict the launcher that started this rank are a mistake worth stopping for: Lightning
// likewise refuses devices=4 under an srun that started 2 tasks per node.
void check_against_environment(const TrainerOptions& options, const env::Environment& environment) {
  if (options.devices() && *options.devices() != environment.local_world_size) {
    throw std::invalid_argument(
        "--devices " + std::to_string(*options.devices()) + " contradicts the environment (" +
        env::to_string(environment.source) + " started " + std::to_string(environment.local_world_size) +
        " rank(s) on this node): drop --devices, or start that many ranks per node");
  }
  if (options.num_nodes() && *options.num_nodes() != environment.num_nodes) {
    throw std::invalid_argument("--num-nodes " + std::to_string(*options.num_nodes()) +
                                " contradicts the environment (" + env::to_string(environment.source) +
                                " reports " + std::to_string(environment.num_nodes) +
                                " node(s)): drop --num-nodes, or make them agree");
  }
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
  if (argv.empty()) throw std::runtime_error("cannot read this program's command line from /proc/self/cmdline");
  argv[0] = std::filesystem::read_symlink("/proc/self/exe").string();  // argv[0] may be relative to PATH
  return argv;
}

// devices(N > 1) in a program started without a launcher: start it again as N ranks (Lightning's
// subprocess launcher) and leave with their status. Never returns in that case.
void start_ranks_if_asked(const TrainerOptions& options, const env::Environment& environment) {
  if (environment.source != env::Source::kSingleProcess || !options.devices() || *options.devices() <= 1) return;
  if (options.num_nodes().value_or(1) > 1) {
    throw std::invalid_argument("num_nodes " + std::to_string(*options.num_nodes()) +
                                " needs a launcher on every node (lockstep run, srun or mpirun): the Trainer starts "
                                "ranks itself only on one node");
  }
  launch::LaunchOptions launch_options(own_command_line());
  launch_options.nproc_per_node(*options.devices()).standalone(true).direct_stdout_local_rank(0);
  if (options.collective_timeout()) launch_options.collective_timeout(*options.collective_timeout());
  launch::Launcher launcher(launch_options);
  std::fflush(nullptr);
  std::exit(launcher.run().exit_status);
}

// Validation indices of this rank: the DistributedSampler's (no shuffle) without the padding it adds to
// make the shards equal, so that every sample counts exactly once whatever the world size. Rank r's k-th
// index sits at position r + k * R of the padded list; positions >= size are padding.
std::vector<int64_t> unpadded_shard(const data::DistributedSampler& sampler) {
  std::vector<int64_t> indices = sampler.indices();
  const int64_t rank = sampler.options().rank();
  const int64_t replicas = sampler.options().num_replicas();
  int64_t keep = 0;
  while (keep < static_cast<int64_t>(indices.size()) && rank + keep * replicas < sampler.dataset_size()) ++keep;
  indices.resize(static_cast<std::size_t>(keep));
  return indices;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The rest of an epoch that `old_world` ranks had trained `old_batches` batches of, for this rank of `world`.
std::vector<int64_t> reshard_rest(int64_t dataset_size, uint64_t seed, int64_t epoch, int old_world,
                                  int64_t old_batches, int64_t batch_size, const BatchLimit& limit, int world, int rank) {
  const auto old_options = data::DistributedSamplerOptions(old_world, 0).shuffle(true).seed(seed);
  const int64_t shard = data::DistributedSampler(dataset_size, old_options).num_samples();
  const int64_t planned = std::min(shard, limit.apply(ceil_div(shard, batch_size)) * batch_size);
  return data::reshard_remaining(dataset_size, old_options, epoch, std::min(old_batches * batch_size, planned), planned,
                                 world, rank);
}

// A rank killed while writing a checkpoint leaves its temporary file (".last.ckpt.tmp.<pid>", see
// write_atomically); the checkpoint itself is whole. Remove those of processes that no longer exist.
void remove_orphaned_temporaries(const std::string& dir) {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    const auto mark = name.rfind(".tmp.");
    if (name.empty() || name[0] != '.' || mark == std::string::npos) continue;
    const std::string pid_text = name.substr(mark + 5);
    if (pid_text.empty() || pid_text.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto pid = static_cast<pid_t>(std::stol(pid_text));
    if (::kill(pid, 0) != 0 && errno == ESRCH) std::filesystem::remove(entry.path(), error);
  }
}

// Fault injection for the recovery tests: LOCKSTEP_FAULT="RANK:STEP" kills rank RANK with SIGKILL right
// after optimizer step STEP; "RANK:STEP:ckpt" kills it inside the first checkpoint write at or after that
// step (the bytes written, not yet renamed into place); "RANK:STEP:usr1" / ":term" makes it send SIGUSR1 /
// SIGTERM to its parent, the launcher, once (a preemption notice, as Slurm or a scheduler sends it);
// "RANK:STEP:nan" makes that rank's loss NaN for the batches of optimizer step STEP + 1; "RANK:STEP:stop" makes
// it SIGSTOP itself, "RANK:STEP:hang" makes it block forever outside collectives (a data loader that never
// returns), and "RANK:STEP:extra" makes it issue one all-reduce the other ranks do not (a branch taken on one
// rank only), each once after optimizer step STEP. Only in the first run of a job
// (TORCHELASTIC_RESTART_COUNT 0), so that the restarted ranks can finish. Unset: nothing.
struct Fault {
  int rank = -1;
  int64_t step = 0;
  bool in_checkpoint = false;
  int signal_launcher = 0;  // "usr1" / "term": send it to the parent (the launcher) instead of dying
  bool nan_loss = false;    // "nan": the loss of the batches of step STEP + 1 becomes NaN on that rank
  std::string stall;        // "stop" | "hang" | "extra" (see above)

  static Fault from_env(const env::Environment& environment) {
    Fault fault;
    const char* text = std::getenv("LOCKSTEP_FAULT");
    if (text == nullptr || environment.restart_count > 0) return fault;
    int rank = -1;
    long long step = 0;
    char where[8] = {0};
    const int fields = std::sscanf(text, "%d:%lld:%7s", &rank, &step, where);
    const std::string kind = fields == 3 ? where : "";
    const bool stall = kind == "stop" || kind == "hang" || kind == "extra";
    if (fields < 2 || !(kind.empty() || kind == "ckpt" || kind == "usr1" || kind == "term" || kind == "nan" || stall)) {
      throw std::invalid_argument(std::string("LOCKSTEP_FAULT='") + text +
                                  "' is not RANK:STEP or RANK:STEP:ckpt|usr1|term|nan|stop|hang|extra");
    }
    if (stall) fault.stall = kind;
    fault.nan_loss = kind == "nan";
    fault.rank = rank;
    fault.step = step;
    fault.in_checkpoint = kind == "ckpt";
    fault.signal_launcher = kind == "usr1" ? SIGUSR1 : kind == "term" ? SIGTERM : 0;
    return fault;
  }
  bool armed_for(int my_rank) const { return rank == my_rank; }
};

// SIGUSR1 and SIGTERM as a preemption notice: the handler only records the signal; the training loop
// acts on it at the next step boundary. RAII: the previous handlers come back when fit() ends.
std::atomic<int> preemption_signal{0};
extern "C" void record_preemption_signal(int signal) { preemption_signal.store(signal); }

class PreemptionHandlers {
 public:
  explicit PreemptionHandlers(bool install) : installed_(install) {
    if (!installed_) return;
    preemption_signal.store(0);
    struct sigaction action {};
    action.sa_handler = record_preemption_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    ::sigaction(SIGUSR1, &action, &old_usr1_);
    ::sigaction(SIGTERM, &action, &old_term_);
  }
  ~PreemptionHandlers() {
    if (!installed_) return;
    ::sigaction(SIGUSR1, &old_usr1_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
  }
  PreemptionHandlers(const PreemptionHandlers&) = delete;
  PreemptionHandlers& operator=(const PreemptionHandlers&) = delete;
  bool installed() const { return installed_; }
  static int pending() { return preemption_signal.load(); }

 private:
  bool installed_;
  struct sigaction old_usr1_ {};
  struct sigaction old_term_ {};
};

void set_lr(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

}  // namespace

int threads_per_rank(int requested, const env::Environment& environment) {
  if (requested > 0) return requested;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return std::max(1, static_cast<int>(cores) / std::max(1, environment.local_world_size));
}

void TrainerOptions::validate() const {
  auto at_least = [](const char* name, int64_t value, int64_t least) {
    if (value < least) {
      throw std::invalid_argument(std::string(name) + " " + std::to_string(value) + " is out of range: it must be >= " +
                                  std::to_string(least));
    }
  };
  if (devices_) at_least("devices", *devices_, 1);
  if (num_nodes_) at_least("num_nodes", *num_nodes_, 1);
  at_least("max_epochs", max_epochs_, 0);
  if (max_steps_ != -1) at_least("max_steps (or -1 for no limit)", max_steps_, 1);
  at_least("accumulate_grad_batches", accumulate_grad_batches_, 1);
  at_least("ckpt_every_n_steps", ckpt_every_n_steps_, 0);
  at_least("log_every_n_steps", log_every_n_steps_, 0);
  at_least("threads", threads_, 0);
  if (bucket_cap_mb_ && (!(*bucket_cap_mb_ > 0) || !std::isfinite(*bucket_cap_mb_))) {
    throw std::invalid_argument("bucket_cap_mb " + std::to_string(*bucket_cap_mb_) +
                                " is not a number of MiB > 0 (leave it unset for DDP's default)");
  }
  if (!(gradient_clip_val_ >= 0) || !std::isfinite(gradient_clip_val_)) {
    throw std::invalid_argument("gradient_clip_val " + std::to_string(gradient_clip_val_) +
                                " is not a finite number >= 0 (0 turns clipping off)");
  }
  parse_precision(precision_);
  if (on_nan_ != "stop" && on_nan_ != "skip") {
    throw std::invalid_argument("on_nan '" + on_nan_ + "' is not known (expected stop or skip)");
  }
  if (resume_ == "last" && ckpt_dir_.empty()) {
    throw std::invalid_argument("resume 'last' needs ckpt_dir (--ckpt-dir), where last.ckpt lives");
  }
}

// The state of one fit(): what the hooks and the TrainerContext methods read.
struct Trainer::Run {
  env::Environment environment;
  std::optional<comm::ProcessGroup> owned_group;
  comm::ProcessGroup* group = nullptr;
  std::shared_ptr<TrainModule> module;
  std::unique_ptr<Ddp> ddp;
  OptimizerConfig optim;
  Precision precision = Precision::k32;
  GradScaler scaler;
  std::unique_ptr<MetricsWriter> metrics_writer;
  TrainPosition position;  // where a checkpoint written now resumes
  int64_t epoch = 0;       // the epoch in progress, or just finished in the epoch-end hooks
  bool mid_accumulation = false;  // gradients of an unfinished accumulation group exist
  int reshard_world = 0;          // see CheckpointState
  int64_t reshard_batch = 0;
  std::map<std::string, double> callback_metrics;
  bool stop_requested = false;
  std::string stop_reason;
  double lr = 0.0;
};

Trainer::Trainer(TrainerOptions options) : options_(std::move(options)) {}
Trainer::~Trainer() = default;

int Trainer::rank() const { return rank_; }
int Trainer::world_size() const { return world_size_; }
int64_t Trainer::current_epoch() const { return run_ ? run_->epoch : 0; }
int64_t Trainer::global_step() const { return run_ ? run_->position.step : 0; }

const std::map<std::string, double>& Trainer::callback_metrics() const {
  static const std::map<std::string, double> empty;
  return run_ ? run_->callback_metrics : empty;
}

std::vector<double> Trainer::learning_rates() const {
  std::vector<double> rates;
  if (!run_ || !run_->optim.optimizer) return rates;
  for (const auto& group : run_->optim.optimizer->param_groups()) rates.push_back(group.options().get_lr());
  return rates;
}

void Trainer::request_stop(const std::string& reason) {
  if (!run_) return;
  if (!run_->stop_requested) run_->stop_reason = reason;
  run_->stop_requested = true;
}

bool Trainer::should_stop() const { return run_ && run_->stop_requested; }

void Trainer::save_checkpoint(const std::string& path) {
  if (!run_) throw std::logic_error("Trainer::save_checkpoint outside fit()");
  Run& run = *run_;
  comm::ProcessGroup& group = *run.group;
  if (run.mid_accumulation) {
    throw std::logic_error("save_checkpoint('" + path + "') in the middle of an accumulation group (batch " +
                           std::to_string(run.position.batch) +
                           "): the accumulated gradients would be lost; save when BatchEnd::stepped is true");
  }
  // Every rank must be saving the same file: a callback deciding from rank-local values would otherwise
  // make the ranks' collectives diverge. Name it instead of hanging.
  const std::vector<std::string> paths = group.all_gather_strings(path);
  for (int r = 0; r < group.size(); ++r) {
    if (paths[r] != paths[0]) {
      throw std::runtime_error("save_checkpoint: rank 0 saves '" + paths[0] + "' but rank " + std::to_string(r) +
                               " saves '" + paths[r] +
                               "': callbacks must decide from callback_metrics() only (the same on every rank)");
    }
  }
  const at::Tensor rng_states = group.all_gather_stacked(cpu_rng_state());
  std::vector<std::string> logged =
      group.all_gather_strings(run.position.batch == 0 ? std::string() : run.module->logged_.to_json());
  if (group.rank() != 0) return;
  CheckpointState state;
  state.position = run.position;
  state.world_size = group.size();
  state.model = run.module->checkpoint_name();
  state.config = options_.description();
  state.rng_states = rng_states;
  state.logged_states = std::move(logged);
  for (const auto& callback : options_.callbacks()) state.callback_states[callback->state_key()] = callback->state_dict();
  if (run.scaler.enabled()) state.scaler_state = run.scaler.state();
  state.reshard_world = run.reshard_world;
  state.reshard_batch = run.reshard_batch;
  train::save_checkpoint(path, *run.module, *run.optim.optimizer, state);
}

void Trainer::remove_checkpoint(const std::string& path) {
  if (rank() != 0) return;
  std::error_code ignored;
  std::filesystem::remove(path, ignored);
}

void Trainer::log_metrics(const std::map<std::string, double>& values) {
  if (!run_ || !run_->metrics_writer) return;
  nlohmann::ordered_json record = {{"epoch", run_->epoch}, {"step", run_->position.step}};
  for (const auto& [name, value] : values) {
    if (std::isfinite(value)) {
      record[name] = value;
    } else {
      record[name] = nullptr;  // JSON has no NaN or Infinity
    }
  }
  run_->metrics_writer->write_line(record.dump());
}

TrainerResult Trainer::fit(std::shared_ptr<TrainModule> module, DataModule& data) {
  if (!module) throw std::invalid_argument("Trainer::fit: the module is null");
  options_.validate();
  const env::Environment environment = options_.environment().value_or(env::from_env());
  start_ranks_if_asked(options_, environment);
  check_against_environment(options_, environment);
  const Precision precision = parse_precision(options_.precision());
  check_precision_supported(precision, c10::DeviceType::CPU);
  const auto started = Clock::now();

  run_ = std::make_unique<Run>();
  Run& run = *run_;
  struct RunReset {  // the TrainerContext answers "no run" again after fit(), also when it throws
    std::unique_ptr<Run>& run;
    ~RunReset() { run.reset(); }
  } reset{run_};
  run.environment = environment;
  run.module = module;
  run.precision = precision;
  GradScalerOptions scaler_options;
  scaler_options.enabled = precision == Precision::k16Mixed;  // bfloat16 has float32's range: no scaling
  run.scaler = GradScaler(scaler_options);
  if (!options_.process_group()) at::set_num_threads(threads_per_rank(options_.threads(), environment));

  // With a process group of the caller's (threads in tests), who is who comes from the group.
  const bool is_main = (options_.process_group() ? options_.process_group()->rank() : environment.rank) == 0;
  const int local_rank =
      options_.process_group() && !options_.environment() ? options_.process_group()->rank() : environment.local_rank;
  if (is_main && !options_.ckpt_dir().empty()) {
    ensure_writable_dir(options_.ckpt_dir());
    remove_orphaned_temporaries(options_.ckpt_dir());
  }
  if (is_main && !options_.metrics_file().empty()) {
    run.metrics_writer = std::make_unique<MetricsWriter>(options_.metrics_file());
  }

  if (options_.process_group()) {
    run.group = options_.process_group();
  } else {
    auto group_options =
        comm::ProcessGroupOptions::from_environment(environment).backend(comm::parse_backend(options_.backend()));
    if (options_.collective_timeout()) group_options.collective_timeout(*options_.collective_timeout());
    run.owned_group.emplace(comm::init_process_group(group_options));
    run.group = &*run.owned_group;
  }
  comm::ProcessGroup& group = *run.group;
  const int world = group.size();
  const int rank = group.rank();
  rank_ = rank;
  world_size_ = world;

  // ---- data: prepared once per node, then loaded everywhere ----
  if (local_rank == 0) data.prepare_data();
  group.barrier();
  data.setup();
  const std::shared_ptr<const data::TensorDataset> train_set = data.train_dataset();
  const std::shared_ptr<const data::TensorDataset> val_set = data.val_dataset();
  if (!train_set || train_set->size() == 0) {
    throw std::invalid_argument("the DataModule's train_dataset() is empty: nothing to train on");
  }
  const data::LoaderOptions train_options = data.train_loader_options();
  const int64_t batch_size = train_options.batch_size();
  data::Loader train_loader(train_set, train_options);
  std::optional<data::Loader> val_loader;
  if (val_set && val_set->size() > 0) val_loader.emplace(val_set, data.val_loader_options());
  data::DistributedSampler train_sampler(
      train_set->size(), data::DistributedSamplerOptions(world, rank).shuffle(true).seed(options_.seed()));

  // ---- the model across ranks, then the optimizer ----
  // .grad lives in the buckets (shared memory with shm): no copy into the buckets and back each step.
  run.ddp = std::make_unique<Ddp>(
      module, group, ddp::DdpOptions().gradient_as_bucket_view(true).bucket_cap_mb(options_.bucket_cap_mb()));
  // Dropout and augmentation differ per rank, reproducibly (a process group of threads shares one
  // generator: leave it to the test that made it).
  if (!options_.process_group()) torch::manual_seed(options_.seed() + 1000003ULL * static_cast<uint64_t>(rank + 1));

  const int64_t accumulate = options_.accumulate_grad_batches();
  const int64_t train_batches = options_.limit_train_batches().apply(ceil_div(train_sampler.num_samples(), batch_size));
  TrainingPlan& plan = module->plan_;
  plan.world_size = world;
  plan.rank = rank;
  plan.max_epochs = options_.max_epochs();
  plan.batches_per_epoch = train_batches;
  plan.steps_per_epoch = ceil_div(train_batches, accumulate);
  plan.accumulate_grad_batches = accumulate;
  plan.batch_size = batch_size;
  plan.estimated_stepping_batches = std::max<int64_t>(1, plan.steps_per_epoch * options_.max_epochs());
  if (options_.max_steps() > 0) plan.estimated_stepping_batches = std::min(plan.estimated_stepping_batches, options_.max_steps());
  run.optim = module->configure_optimizers();
  if (!run.optim.optimizer) throw std::invalid_argument("configure_optimizers() returned no optimizer");
  torch::optim::Optimizer& optimizer = *run.optim.optimizer;

  // ---- resume: every rank reads the same checkpoint ----
  TrainPosition start;
  std::vector<int64_t> resharded;  // the rest of the start epoch for this rank, when it is re-sharded
  std::string resume_path = options_.resume();
  if (resume_path == "last") resume_path = (std::filesystem::path(options_.ckpt_dir()) / "last.ckpt").string();
  if (resume_path.empty() && environment.restart_count > 0 && !options_.ckpt_dir().empty()) {
    // Restarted by the launcher after a failure (torchrun's TORCHELASTIC_RESTART_COUNT): go on from the last
    // checkpoint rather than from scratch. Every rank sees the same file: rank 0 wrote it before the failure,
    // and the launcher stopped every rank before restarting any.
    const auto last = std::filesystem::path(options_.ckpt_dir()) / "last.ckpt";
    if (std::filesystem::is_regular_file(last)) {
      resume_path = last.string();
      if (is_main) {
        std::fprintf(options_.out(), "restart %d: resuming from %s\n", environment.restart_count, resume_path.c_str());
      }
    }
  }
  if (!resume_path.empty()) {
    const CheckpointState saved = load_checkpoint(resume_path, module->checkpoint_name(), *module, optimizer);
    start = saved.position;
    for (const auto& callback : options_.callbacks()) {
      if (auto it = saved.callback_states.find(callback->state_key()); it != saved.callback_states.end()) {
        callback->load_state_dict(it->second);
      }
    }
    if (saved.scaler_state.defined() && run.scaler.enabled()) run.scaler.load_state(saved.scaler_state);
    if (saved.world_size == world) {
      set_cpu_rng_state(saved.rng_states[rank]);
      module->logged_ = LoggedMetrics::from_json(saved.logged_states.at(static_cast<std::size_t>(rank)));
      if (saved.reshard_world != 0) {  // still inside an epoch re-sharded by the run that wrote it
        run.reshard_world = saved.reshard_world;
        run.reshard_batch = saved.reshard_batch;
        resharded = reshard_rest(train_set->size(), options_.seed(), start.epoch, saved.reshard_world,
                                 saved.reshard_batch, batch_size, options_.limit_train_batches(), world, rank);
      }
    } else if (start.batch != 0) {
      if (saved.reshard_world != 0) {
        throw std::invalid_argument("checkpoint '" + resume_path + "' lies in an epoch already re-sharded from " +
                                    std::to_string(saved.reshard_world) + " to " + std::to_string(saved.world_size) +
                                    " rank(s): resume it with " + std::to_string(saved.world_size) +
                                    " ranks, or from an epoch-end checkpoint");
      }
      // Mid-epoch on another world size: the old ranks' logged sums go to rank 0 (sync_dist sums stay
      // exact over all ranks; rank-local values become rank 0's view), and the rest of the epoch is
      // dealt anew.
      run.reshard_world = saved.world_size;
      run.reshard_batch = start.batch;
      resharded = reshard_rest(train_set->size(), options_.seed(), start.epoch, saved.world_size, start.batch,
                               batch_size, options_.limit_train_batches(), world, rank);
      if (rank == 0) {
        LoggedMetrics merged = LoggedMetrics::from_json(saved.logged_states.at(0));
        for (std::size_t r = 1; r < saved.logged_states.size(); ++r) {
          const LoggedMetrics other = LoggedMetrics::from_json(saved.logged_states[r]);
          merged.samples += other.samples;
          for (const auto& [name, entry] : other.entries()) {
            if (!entry.sync_dist) continue;
            merged.add(name, entry.mean(), entry.weight, true, entry.prog_bar);
          }
        }
        module->logged_ = std::move(merged);
      }
      start.batch = 0;  // counts batches of the re-sharded rest from here on
    }
    if (is_main) {
      std::fprintf(options_.out(), "resumed from %s: epoch %lld, batch %lld, step %lld (written by %d rank(s)%s)\n",
                   resume_path.c_str(), static_cast<long long>(saved.position.epoch),
                   static_cast<long long>(saved.position.batch), static_cast<long long>(saved.position.step),
                   saved.world_size, run.reshard_world != 0 && saved.world_size != world ? "; re-sharding the rest of the epoch" : "");
      std::fflush(options_.out());
    }
    if (run.reshard_world == 0 && start.batch > train_batches) {
      throw std::invalid_argument("checkpoint position (epoch " + std::to_string(start.epoch) + ", batch " +
                                  std::to_string(start.batch) + ") is beyond this run's " +
                                  std::to_string(train_batches) +
                                  " batches per epoch: resume with the batch size and limit_train_batches it was "
                                  "written with");
    }
  }

  // The rate of the last step taken (of step 0 before any): a run resumed after an epoch's last batch
  // reports that epoch, before its next step, as the uninterrupted run did.
  run.lr = run.optim.lr_schedule ? run.optim.lr_schedule->at(std::max<int64_t>(0, start.step - 1))
                                 : learning_rates().at(0);

  const std::string last_ckpt =
      options_.ckpt_dir().empty() ? "" : (std::filesystem::path(options_.ckpt_dir()) / "last.ckpt").string();
  const Fault fault = Fault::from_env(environment);
  bool fault_sent = false;
  // A preemption notice (SIGUSR1, SIGTERM) becomes a checkpoint at the next step boundary, agreed by all
  // ranks; only where there is somewhere to write it.
  PreemptionHandlers preemption(!last_ckpt.empty());
  const bool skip_nan = options_.on_nan() == "skip";
  bool group_has_nan = false;  // a non-finite loss in the accumulation group in progress (skip_nan)
  LoggedMetrics logged_before;
  int preempted_by = 0;
  const bool on_epoch_line = is_main;
  for (const auto& callback : options_.callbacks()) callback->on_fit_start(*this);

  ProgressBar bar(options_.out());
  TrainerResult result;
  run.position = start;
  bool max_steps_reached = false;
  for (int64_t epoch = start.epoch; epoch < options_.max_epochs() && !max_steps_reached && !run.stop_requested;
       ++epoch) {
    // ---- train ----
    const bool resumed_epoch = epoch == start.epoch;
    const bool reshard_epoch = resumed_epoch && run.reshard_world != 0;
    const int64_t first_batch = resumed_epoch ? start.batch : 0;
    int64_t epoch_batches = train_batches;
    train_sampler.set_epoch(epoch);
    if (reshard_epoch) {
      epoch_batches = ceil_div(static_cast<int64_t>(resharded.size()), batch_size);
      train_loader.start_epoch(resharded, epoch, first_batch);
    } else {
      train_loader.start_epoch(train_sampler.indices(), epoch, first_batch);
    }
    if (!resumed_epoch || resume_path.empty()) module->logged_.clear();  // else: the checkpoint's sums
    run.position = TrainPosition{epoch, first_batch, run.position.step};
    run.epoch = epoch;
    module->epoch_ = epoch;
    module->step_ = run.position.step;  // also for validation_step when no batch is left (resumed at the end)
    module->train();
    for (const auto& callback : options_.callbacks()) callback->on_train_epoch_start(*this);
    if (is_main && options_.progress_bar()) bar.start(epoch, options_.max_epochs(), epoch_batches);
    const auto train_start = Clock::now();
    int64_t samples = 0;
    int64_t batches_done = first_batch;
    for (int64_t b = first_batch; b < epoch_batches && !max_steps_reached && preempted_by == 0; ++b) {
      std::optional<data::Batch> batch = train_loader.next();
      TORCH_INTERNAL_ASSERT(batch.has_value(), "loader ended after ", b, " of ", epoch_batches, " batches");
      const bool steps_now = (b + 1) % accumulate == 0 || b + 1 == epoch_batches;
      module->batch_size_ = batch->target.size(0);
      module->step_ = run.position.step;
      if (skip_nan) logged_before = module->logged_;
      at::Tensor loss;
      {
        // Gradients of a partial accumulation group stay local (no all-reduce) until its last batch.
        std::optional<ddp::NoSyncGuard> no_sync;
        if (!steps_now) no_sync.emplace(run.ddp->no_sync());
        run.ddp->before_forward();
        {
          AutocastScope autocast(precision, c10::DeviceType::CPU);
          loss = module->training_step(*batch, b);
        }
        if (!loss.defined() || loss.numel() != 1) {
          throw std::invalid_argument("training_step must return the batch's loss as a scalar tensor (batch " +
                                      std::to_string(b) + " of epoch " + std::to_string(epoch) + ")");
        }
        if (fault.nan_loss && fault.armed_for(rank) && run.position.step == fault.step && !fault_sent) {
          loss = loss * std::numeric_limits<double>::quiet_NaN();
          fault_sent = steps_now;  // the batches of one optimizer step only
        }
        const double value = loss.item<double>();
        if (!std::isfinite(value)) {
          if (!skip_nan) {
            throw std::runtime_error("non-finite training loss " + std::to_string(value) + " at step " +
                                     std::to_string(run.position.step + 1) + " (epoch " + std::to_string(epoch) +
                                     ", batch " + std::to_string(b) + ") on rank " + std::to_string(rank) +
                                     ": lower the learning rate, clip gradients (--gradient-clip-val), check the "
                                     "data, or skip such steps on every rank with --on-nan skip");
          }
          group_has_nan = true;
          module->logged_ = logged_before;  // what this batch logged is dropped with the step
        }
        run.scaler.scale(accumulate > 1 ? loss / static_cast<double>(accumulate) : loss).backward();
      }
      const double batch_loss = loss.item<double>();
      samples += batch->target.size(0);
      module->logged_.samples += batch->target.size(0);
      batches_done = b + 1;
      run.mid_accumulation = !steps_now;
      bool skip_step = false;
      if (steps_now && skip_nan) {
        // Every rank must skip the same steps: a NaN on one rank only still skips it everywhere.
        at::Tensor flag = torch::full({1}, group_has_nan ? 1.0 : 0.0, torch::kDouble);
        group.all_reduce(flag, comm::ReduceOp::kMax).wait();
        skip_step = flag.item<double>() > 0;
        group_has_nan = false;
      }
      if (skip_step) {
        optimizer.zero_grad();
        ++result.skipped_steps;
        if (is_main) {
          std::fprintf(options_.out(), "skipped optimizer step %lld (epoch %lld, batch %lld): non-finite loss on a rank\n",
                       static_cast<long long>(run.position.step + 1), static_cast<long long>(epoch),
                       static_cast<long long>(b));
          std::fflush(options_.out());
        }
      }
      if (steps_now && !skip_step) {
        if (options_.gradient_clip_val() > 0) {
          run.scaler.unscale(optimizer);
          torch::nn::utils::clip_grad_norm_(module->parameters(), options_.gradient_clip_val());
        }
        if (run.optim.lr_schedule) {
          run.lr = run.optim.lr_schedule->at(run.position.step);
          set_lr(optimizer, run.lr);
        } else {
          run.lr = learning_rates().at(0);
        }
        run.scaler.step(optimizer);
        run.scaler.update();
        optimizer.zero_grad();
        ++run.position.step;
        module->step_ = run.position.step;
      }
      run.position.batch = b + 1;
      if (steps_now && fault.armed_for(rank) && !fault.nan_loss && run.position.step >= fault.step) {
        if (fault.signal_launcher != 0) {
          if (!fault_sent) {
            ::kill(::getppid(), fault.signal_launcher);
            // The launcher forwards the notice to every rank, this one too: wait (at most 10 s) for it to come
            // back, so that the ranks agree on this very step and a test can choose where the notice lands.
            const auto give_up = Clock::now() + std::chrono::seconds(10);
            while (preemption.installed() && PreemptionHandlers::pending() == 0 && Clock::now() < give_up) {
              std::this_thread::sleep_for(std::chrono::milliseconds(1));
            }
          }
          fault_sent = true;
        } else if (!fault.stall.empty()) {
          if (!fault_sent && fault.stall == "stop") ::raise(SIGSTOP);
          if (!fault_sent && fault.stall == "extra") {
            at::Tensor extra = torch::zeros({3});
            group.all_reduce(extra).wait();
          }
          while (fault.stall == "hang") ::pause();
          fault_sent = true;
        } else if (fault.in_checkpoint) {
          detail::checkpoint_written_hook() = [](const std::string&) { ::raise(SIGKILL); };
        } else {
          ::raise(SIGKILL);
        }
      }
      if (steps_now) {
        const int64_t step = run.position.step;
        if (run.metrics_writer && !skip_step && options_.log_every_n_steps() > 0 && step % options_.log_every_n_steps() == 0) {
          run.metrics_writer->write(StepMetrics{step, epoch, b + 1, batch_loss, run.lr});
        }
        max_steps_reached = options_.max_steps() > 0 && step >= options_.max_steps();
        const bool due = options_.ckpt_every_n_steps() > 0 && step % options_.ckpt_every_n_steps() == 0;
        if (preemption.installed()) {
          // One tiny all-reduce per step, only with a ckpt_dir: the ranks got the signal at different
          // steps, and all must stop at the same one.
          at::Tensor notice = torch::full({1}, static_cast<double>(PreemptionHandlers::pending()), torch::kDouble);
          group.all_reduce(notice, comm::ReduceOp::kMax).wait();
          preempted_by = static_cast<int>(notice.item<double>());
        }
        if (!last_ckpt.empty() && (due || max_steps_reached || preempted_by != 0)) save_checkpoint(last_ckpt);
        if (preempted_by != 0) group.barrier();  // every rank leaves after rank 0 has written it
      }
      for (const auto& callback : options_.callbacks()) callback->on_train_batch_end(*this, BatchEnd{b, steps_now && !skip_step, batch_loss});
      if (is_main && options_.progress_bar()) bar.update(b + 1, samples * world, batch_loss);
    }
    const double epoch_s = seconds_since(train_start);
    if (is_main && options_.progress_bar()) bar.finish();
    if (preempted_by != 0) {
      result.preempted = true;
      result.stopped_early = true;
      result.stop_reason = std::string("preempted by ") + (preempted_by == SIGUSR1 ? "SIGUSR1" : "SIGTERM");
      if (is_main) {
        std::fprintf(options_.out(),
                     "%s at step %lld (epoch %lld, batch %lld): %s holds the position; exiting with status %d "
                     "(requeue with --resume last)\n",
                     result.stop_reason.c_str(), static_cast<long long>(run.position.step),
                     static_cast<long long>(epoch + 1), static_cast<long long>(batches_done), last_ckpt.c_str(),
                     kPreemptedExitStatus);
        std::fflush(options_.out());
      }
      break;
    }
    if (batches_done < epoch_batches) {  // max_steps stopped the epoch: no validation, no epoch metrics
      if (is_main) {
        std::fprintf(options_.out(), "stopped at max_steps %lld (epoch %lld, batch %lld of %lld)%s\n",
                     static_cast<long long>(options_.max_steps()), static_cast<long long>(epoch + 1),
                     static_cast<long long>(batches_done), static_cast<long long>(epoch_batches),
                     last_ckpt.empty() ? "" : (": " + last_ckpt + " holds the position").c_str());
        std::fflush(options_.out());
      }
      result.stopped_early = true;
      result.stop_reason = "max_steps";
      break;
    }

    // ---- validate ----
    const auto val_start = Clock::now();
    int64_t val_samples = 0;
    if (val_loader) {
      module->eval();
      torch::NoGradGuard no_grad;
      data::DistributedSampler val_sampler(val_set->size(), data::DistributedSamplerOptions(world, rank).shuffle(false));
      std::vector<int64_t> shard = unpadded_shard(val_sampler);
      const int64_t val_batch = val_loader->options().batch_size();
      const int64_t val_batches = options_.limit_val_batches().apply(ceil_div(static_cast<int64_t>(shard.size()), val_batch));
      shard.resize(std::min<std::size_t>(shard.size(), static_cast<std::size_t>(val_batches * val_batch)));
      val_loader->start_epoch(std::move(shard), epoch);
      int64_t i = 0;
      while (std::optional<data::Batch> batch = val_loader->next()) {
        module->batch_size_ = batch->target.size(0);
        AutocastScope autocast(precision, c10::DeviceType::CPU);
        module->validation_step(*batch, i++);
        val_samples += batch->target.size(0);
      }
      module->train();
    }
    const double val_s = seconds_since(val_start);

    // ---- reduce: the sync_dist sums over all ranks, the slowest rank's times; then rank 0's table ----
    const LoggedMetrics& logged = module->logged_;
    std::string sync_names;
    std::vector<double> sums{static_cast<double>(logged.samples), static_cast<double>(val_samples)};
    for (const auto& [name, entry] : logged.entries()) {
      if (!entry.sync_dist) continue;
      sync_names += name + "\n";
      sums.push_back(entry.weighted_sum);
      sums.push_back(entry.weight);
    }
    const std::vector<std::string> all_names = group.all_gather_strings(sync_names);
    for (int r = 1; r < world; ++r) {
      if (all_names[r] != all_names[0]) {
        throw std::runtime_error("epoch " + std::to_string(epoch) + ": rank 0 logged the sync_dist values {" +
                                 all_names[0] + "} but rank " + std::to_string(r) + " logged {" + all_names[r] +
                                 "}: log the same names with sync_dist on every rank");
      }
    }
    at::Tensor reduced = torch::tensor(sums, torch::kDouble);
    group.all_reduce(reduced).wait();
    at::Tensor times = torch::tensor({epoch_s, val_s}, torch::kDouble);
    group.all_reduce(times, comm::ReduceOp::kMax).wait();
    const auto s = reduced.accessor<double, 1>();
    const auto t = times.accessor<double, 1>();

    EpochMetrics m;
    m.epoch = epoch;
    m.step = run.position.step;
    m.train_samples = static_cast<int64_t>(s[0]);
    m.val_samples = static_cast<int64_t>(s[1]);
    m.epoch_s = t[0];
    m.val_s = t[1];
    m.samples_per_s = t[0] > 0 ? s[0] / t[0] : 0.0;
    m.lr = run.lr;
    m.world_size = world;
    {
      std::size_t k = 2;
      std::map<std::string, double> values;
      for (const auto& [name, entry] : logged.entries()) {
        if (entry.sync_dist) {
          values[name] = s[k + 1] > 0 ? s[k] / s[k + 1] : 0.0;
          k += 2;
        } else {
          values[name] = entry.mean();
        }
      }
      // Rank 0's table, everywhere: callbacks decide from the same numbers on every rank.
      std::string table;
      for (const std::string& name : logged.order()) {
        char line[128];
        std::snprintf(line, sizeof line, "%a", values[name]);
        table += name + "\t" + line + "\t" + (logged.entries().at(name).prog_bar ? "1" : "0") + "\n";
      }
      table = group.broadcast_string(table);
      run.callback_metrics.clear();
      std::istringstream in(table);
      for (std::string line; std::getline(in, line);) {
        const auto tab1 = line.find('\t');
        const auto tab2 = line.find('\t', tab1 + 1);
        const std::string name = line.substr(0, tab1);
        const double value = std::strtod(line.substr(tab1 + 1, tab2 - tab1 - 1).c_str(), nullptr);
        run.callback_metrics[name] = value;
        m.logged.emplace_back(name, value);
        if (line.substr(tab2 + 1) == "1") m.prog_bar.push_back(name);
      }
    }
    run.callback_metrics["epoch"] = static_cast<double>(epoch);
    run.callback_metrics["step"] = static_cast<double>(run.position.step);
    run.callback_metrics["lr"] = run.lr;
    if (auto it = run.callback_metrics.find("train_loss"); it != run.callback_metrics.end()) m.train_loss = it->second;
    if (auto it = run.callback_metrics.find("val_loss"); it != run.callback_metrics.end()) m.val_loss = it->second;
    if (auto it = run.callback_metrics.find("val_acc"); it != run.callback_metrics.end()) m.val_acc = it->second;

    run.position = TrainPosition{epoch + 1, 0, run.position.step};
    run.reshard_world = 0;
    run.reshard_batch = 0;
    run.mid_accumulation = false;
    for (const auto& callback : options_.callbacks()) callback->on_validation_end(*this);
    result.epochs.push_back(m);
    if (on_epoch_line) {
      std::string line = "epoch " + std::to_string(epoch + 1) + "/" + std::to_string(options_.max_epochs());
      for (const std::string& name : m.prog_bar) {
        char value[64];
        std::snprintf(value, sizeof value, "  %s %.4f", name.c_str(), run.callback_metrics[name]);
        line += value;
      }
      char tail[128];
      std::snprintf(tail, sizeof tail, "  train %.2f s  val %.2f s  %.0f samples/s", m.epoch_s, m.val_s,
                    m.samples_per_s);
      std::fprintf(options_.out(), "%s%s\n", line.c_str(), tail);
      std::fflush(options_.out());
      if (run.metrics_writer) run.metrics_writer->write(m);
    }
    for (const auto& callback : options_.callbacks()) callback->on_train_epoch_end(*this);

    // A stop asked for on any rank stops all of them, together.
    at::Tensor stop = torch::tensor({run.stop_requested ? 1.0 : 0.0}, torch::kDouble);
    group.all_reduce(stop, comm::ReduceOp::kMax).wait();
    if (stop.item<double>() > 0 && !run.stop_requested) {
      run.stop_requested = true;
      run.stop_reason = "another rank's callback asked to stop";
    }
    if (!last_ckpt.empty()) save_checkpoint(last_ckpt);
    if (run.stop_requested) {
      result.stopped_early = epoch + 1 < options_.max_epochs();
      result.stop_reason = run.stop_reason;
      if (is_main && result.stopped_early) {
        std::fprintf(options_.out(), "stopping after epoch %lld: %s\n", static_cast<long long>(epoch + 1),
                     run.stop_reason.c_str());
        std::fflush(options_.out());
      }
    }
  }
  if (max_steps_reached) {
    result.stopped_early = true;
    result.stop_reason = "max_steps";
  }
  result.global_step = run.position.step;
  if (result.preempted) {
    if (run.owned_group) run.owned_group->shutdown();
    return result;
  }
  for (const auto& callback : options_.callbacks()) callback->on_fit_end(*this);

  if (!options_.ckpt_dir().empty() && options_.save_final_weights()) {
    result.weights_path = (std::filesystem::path(options_.ckpt_dir()) / "final.pt").string();
    result.safetensors_path = (std::filesystem::path(options_.ckpt_dir()) / "final.safetensors").string();
    if (is_main) {
      write_atomically(result.weights_path, [&](const std::string& tmp) {
        torch::serialize::OutputArchive archive;
        module->save(archive);
        archive.save_to(tmp);
      });
      // The same weights for Python without lockstep or LibTorch's archive format (docs/export.md).
      SafetensorsMetadata metadata{{"format", "pt"}, {"producer", options_.producer()}, {"model", module->checkpoint_name()}};
      if (!result.epochs.empty()) metadata["epochs"] = std::to_string(result.epochs.back().epoch + 1);
      save_module_safetensors(result.safetensors_path, *module, metadata);
    }
  }
  if (run.owned_group) run.owned_group->shutdown();
  if (is_main) {
    std::fprintf(options_.out(), "%lld optimizer step(s), %d rank(s), %.1f s\n", static_cast<long long>(result.global_step),
                 world, seconds_since(started));
    std::fflush(options_.out());
  }
  return result;
}

}  // namespace lockstep::train
