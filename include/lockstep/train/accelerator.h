// Accelerator: Hugging Face Accelerate's Accelerator for LibTorch (docs/accelerator.md). What it is built
// with and what prepare() returns have their own headers in train/accelerator/, included here, so that
// this one include is all a program needs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include "lockstep/comm/backend.h"
#include "lockstep/comm/device_mesh.h"
#include "lockstep/comm/elastic_world.h"
#include "lockstep/comm/process_group.h"
#include "lockstep/data/shard_loader.h"
#include "lockstep/ddp/distributed_data_parallel.h"
#include "lockstep/shard/full_parameters.h"
#include "lockstep/train/accelerator/accelerator_options.h"
#include "lockstep/train/accelerator/accumulate_guard.h"
#include "lockstep/train/accelerator/detail/prepare_traits.h"
#include "lockstep/train/accelerator/prepared_loader.h"
#include "lockstep/train/accelerator/prepared_model.h"
#include "lockstep/train/accelerator/prepared_optimizer.h"
#include "lockstep/train/precision.h"
#include "lockstep/train/strategy/strategy.h"

// Not used here: what this header included before it was split into train/accelerator/ (issue 39), kept so
// that programs which include only this header keep compiling (the datasets and the sampler of a loop).
#include "lockstep/data/distributed_sampler.h"
#include "lockstep/data/loader.h"
#include "lockstep/data/tensor_dataset.h"
#include "lockstep/ddp/ddp_options.h"
#include "lockstep/shard/sharded_reducer.h"
#include "lockstep/train/trainer_options.h"

namespace torch::serialize {
class InputArchive;
}

namespace lockstep::train {

/// How Accelerator::reduce combines the ranks' tensors.
enum class Reduction { kSum, kMean };

/// Every fsdp-prepared model's parameters whole, and under bf16 zero1/zero2 the float32 masters in the
/// parameters, for a scope (Accelerator::full_parameters; the shard layer's scope, shard::FullParameters).
using FullParameters = shard::FullParameters;

namespace detail {
struct GradientState;  // src/train/accelerator/gradient_state.h
}  // namespace detail

/// Hugging Face Accelerate's Accelerator for LibTorch: one object that sets up the process group from the
/// launcher's environment and turns an ordinary single-process loop into data-parallel training with
/// mixed precision and gradient accumulation.
///
/// prepare() takes a model (wrapped in DistributedDataParallel, moved to device(), forward under autocast),
/// an optimizer (steps and zero_grads only on sync steps) and DataLoaderSpecs (sharded per rank),
/// in any number and order, and returns the prepared objects in the same order. Every rank must prepare
/// the same objects in the same order (wrapping a model is collective: rank 0's weights are broadcast).
///
/// Gradient accumulation: each accumulate() scope is one micro-step, and micro-steps form groups of
/// gradient_accumulation_steps; the last micro-step of a group synchronises (all-reduces the summed
/// gradients) and lets the optimizer step. backward() divides the loss by the group's length, so a sync
/// step's gradients are the mean over all micro-batches of all ranks: the same as one process on the
/// group's whole batch. Inside a prepared loader's pass, a group never reaches past the pass's end: the
/// last group of a pass whose batch count is not a multiple of gradient_accumulation_steps is shorter,
/// and its losses are divided by its own length (Accelerate syncs there too, but always divides by
/// gradient_accumulation_steps, which shrinks that step).
///
/// In-place recovery (AcceleratorOptions().elastic(true), docs/elastic.md "The Accelerator"): under
/// `lockstep run --recovery in-place` a lost rank costs the step in progress. Each sync step's optimizer
/// step votes first and throws comm::MembershipChanged when the world changed; the loop catches
/// comm::CommError and calls recover(), and its range-for over the prepared loader goes on with the rest
/// of the epoch re-sharded over the survivors.
///
/// Not thread-safe; one per process (or per thread-rank in tests). Prepared objects must not outlive it.
///
/// Example:
///   Accelerator
///   accelerator(AcceleratorOptions().mixed_precision(Precision::kBf16Mixed).gradient_accumulation_steps(4));
///   Net net;
///   auto [model, optimizer, loader] = accelerator.prepare(
///       net, torch::optim::Adam(net->parameters(), 1e-3), DataLoaderSpec(dataset, data::LoaderOptions(64)));
///   for (int64_t epoch = 0; epoch < 10; ++epoch) {
///     loader.set_epoch(epoch);
///     for (auto& batch : loader) {
///       auto scope = accelerator.accumulate(model);
///       auto loss = torch::nn::functional::cross_entropy(model(batch.data), batch.target);
///       accelerator.backward(loss);
///       optimizer.step();
///       optimizer.zero_grad();
///     }
///   }
///   accelerator.wait_for_everyone();
///   if (accelerator.is_main_process()) torch::save(accelerator.unwrap_model(model), "model.pt");
///   accelerator.end_training();
class Accelerator {
 public:
  /// Fills the options the program left unset from Accelerate's launcher variables
  /// (resolve_launch_environment), reads who this process is (env::from_env(): torchrun, Slurm, Open MPI,
  /// ... or a single process) and joins the process group (comm::init_process_group with
  /// options.backend()). Throws std::invalid_argument for bad options or launcher variables (before any
  /// connection is made), std::invalid_argument when the precision cannot run on the device (fp16 on
  /// CPU with LibTorch < 2.5), env::EnvError / comm::CommError from setup. With options.elastic(), the
  /// group is a comm::ElasticWorld's (the ranks must run under `lockstep run --recovery in-place`).
  explicit Accelerator(AcceleratorOptions options = AcceleratorOptions());
  /// Uses an existing process group (tests with thread ranks, programs with their own group); the options
  /// are resolved as above. The group must outlive the accelerator; end_training() leaves it open (its owner
  /// shuts it down). is_local_main_process() assumes torchrun's rank layout (rank = node * local_world_size +
  /// local rank). Refuses options.elastic() (std::invalid_argument): an elastic group is formed from the
  /// in-place launcher's store, so only the constructor above makes one.
  explicit Accelerator(comm::ProcessGroup& group, AcceleratorOptions options = AcceleratorOptions());
  ~Accelerator();
  Accelerator(const Accelerator&) = delete;
  Accelerator& operator=(const Accelerator&) = delete;

  /// Wraps `model` (a module holder or a std::shared_ptr to a module): moved to device(), then
  /// DistributedDataParallel over the accelerator's group. Collective. Under fsdp: sharded by
  /// FullyShardedDataParallel instead (one model per Accelerator, prepared before its optimizer): a
  /// models::Staged model in units of its stages (options().strategy()), any other as one unit, the whole
  /// model, whose forward must then take a tensor first and return one.
  template <typename M>
  PreparedModel<M> prepare_model(M model);
  /// `optimizer` stays owned by the caller (must outlive the accelerator) / is shared.
  PreparedOptimizer prepare_optimizer(torch::optim::Optimizer& optimizer);
  PreparedOptimizer prepare_optimizer(std::shared_ptr<torch::optim::Optimizer> optimizer);
  /// This rank's shard of the source's dataset, shuffled with the accelerator's seed unless
  /// source.shuffle(false). Throws std::invalid_argument for bad loader options or an empty dataset.
  template <typename B>
  BasicPreparedLoader<B> prepare_data_loader(const data::DataSource<B>& source) {
    return BasicPreparedLoader<B>(prepare_loader_state(source.make_loader()));
  }

  /// Prepares one object by its kind: a model (module holder or shared_ptr to a module), an optimizer
  /// (an lvalue is borrowed; an rvalue, shared_ptr or unique_ptr is owned), or a DataLoaderSpec.
  template <typename T>
  auto prepare(T&& item);
  /// Prepares several, left to right, and returns them as a tuple in the same order (for structured
  /// bindings: `auto [model, optimizer, loader] = accelerator.prepare(net, std::move(adam), spec);`).
  template <typename T1, typename T2, typename... Ts>
  auto prepare(T1&& first, T2&& second, Ts&&... rest);

  /// One micro-step's scope: decides whether it synchronises (see the class comment) and, if not, turns
  /// the model's gradient all-reduce off until the guard is destroyed. Call it once per batch, before
  /// the forward.
  template <typename M>
  [[nodiscard]] AccumulateGuard accumulate(PreparedModel<M>& model) {
    return AccumulateGuard(begin_micro_step(), model.gradient_sync());
  }
  /// Whether the current micro-step synchronises gradients (true outside accumulate()).
  bool sync_gradients() const;
  /// Sync micro-steps (optimizer updates, under accumulation) so far, counted by accumulate() and restored
  /// by load_state: the global step for logging and schedules.
  int64_t step() const;

  /// loss / the accumulation group's length (gradient_accumulation_steps except at the end of a pass; see
  /// the class comment), then backward (scaled by the GradScaler under fp16). Throws
  /// std::logic_error when no model was prepared.
  void backward(const at::Tensor& loss);

  /// Under AcceleratorOptions::pipeline_parallel: one batch's forward and backward passes through the
  /// pipeline that prepare() cut `model` into (pipeline::PipelineParallel: `input` and `target` cut into
  /// micro-batches; `loss(output, target)` a micro-batch's mean loss, computed on the last stage), in
  /// place of `model(x)` and backward(): the loss divided by the accumulation group's length, the stage's
  /// gradients averaged over the data-parallel ranks on sync steps. Returns the batch's loss on every
  /// rank. Collective. Throws std::logic_error without a pipeline.
  template <typename M, typename L>
  double pipeline_step(PreparedModel<M>& model, const at::Tensor& input, const at::Tensor& target, L&& loss) {
    M& net = model.module();
    return pipeline_step(
        input, target, [&net](const at::Tensor& x) { return at::Tensor(net->forward(x)); },
        std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>(std::forward<L>(loss)));
  }

  /// On a sync step: unscales the gradients (fp16), then clips the total norm of every prepared model's
  /// gradients to max_norm and returns the norm before clipping. On other micro-steps: does nothing and
  /// returns std::nullopt (the gradients there are partial, local sums).
  std::optional<double> clip_grad_norm_(double max_norm, double norm_type = 2.0);

  bool is_main_process() const { return process_index() == 0; }
  bool is_local_main_process() const { return local_process_index_ == 0; }
  int process_index() const { return group_->rank(); }
  int local_process_index() const { return local_process_index_; }
  int num_processes() const { return group_->size(); }
  /// Where prepared models and batches live: cuda:<local rank> for accelerator gpu (or auto when LibTorch
  /// sees a GPU; never with cpu()), else cpu. See device_choice.h.
  const c10::Device& device() const { return device_; }
  Precision mixed_precision() const { return precision_; }
  int64_t gradient_accumulation_steps() const { return *options_.gradient_accumulation_steps(); }
  /// The options resolved (resolve_launch_environment): mixed_precision, gradient_accumulation_steps and
  /// cpu are set.
  const AcceleratorOptions& options() const { return options_; }
  GradScaler& scaler() { return scaler_; }
  comm::ProcessGroup& group() { return *group_; }
  /// options().tensor_parallel() > 1: the world as data × tensor parallel (build the split model over its
  /// tp() before prepare); null otherwise. Shut down by end_training().
  comm::DeviceMesh* device_mesh() { return mesh_.get(); }

  /// Blocks until every rank has called it (a barrier bounded by the group's collective timeout).
  void wait_for_everyone();

  /// The user's model inside a prepared one (to save it, or to evaluate without DDP). Under fsdp its
  /// parameters are whole only inside full_parameters().
  template <typename M>
  M& unwrap_model(PreparedModel<M>& model) {
    return model.module();
  }
  /// Under fsdp: every prepared model's parameters whole until the returned scope ends (a collective:
  /// every rank calls it, between steps; the whole model is then in memory on every rank). For saving
  /// the weights, or for evaluation where ranks run different numbers of batches (outside it, every
  /// forward gathers its units from all ranks, so every rank must run the same passes). Nothing under
  /// the other strategies.
  [[nodiscard]] FullParameters full_parameters();

  /// Every rank's `tensor` concatenated along dim 0 (0-d tensors stacked into [num_processes()]), in rank
  /// order. Collective; the same shape on every rank. Under tensor parallelism: over the data-parallel
  /// ranks (device_mesh()->dp()), whose data differ; a tensor-parallel group's ranks share theirs.
  at::Tensor gather(const at::Tensor& tensor);
  /// The sum or mean of every rank's `tensor` (a new tensor; the mean is floating point). Collective; over
  /// the data-parallel ranks under tensor parallelism, as gather.
  at::Tensor reduce(const at::Tensor& tensor, Reduction reduction = Reduction::kSum);

  /// Writes the arguments (streamed with <<, no separators) and a newline to stdout on the main process only.
  template <typename... Args>
  void print(const Args&... args) const {
    if (!is_main_process()) return;
    std::ostringstream line;
    (line << ... << args);
    std::cout << line.str() << std::endl;
  }

  /// Saves everything needed to continue exactly: every prepared model's parameters and buffers, every
  /// optimizer's state, the GradScaler, the step counter and accumulation position, the prepared loaders'
  /// epochs and every rank's CPU generator state, as `dir`/accelerator_state.pt (written by rank 0,
  /// atomically; `dir` is created). A sharded optimizer (zero1, zero2) is not gathered: each rank writes its
  /// shard beside it (`optimizer_I.step-S.shard-R-of-N`, shard/shard_checkpoint.h), and load_state re-shards
  /// onto any world size. Collective: returns on every rank once the files are complete. Throws
  /// std::runtime_error naming the path when it cannot be written.
  void save_state(const std::string& dir);
  /// Restores what save_state wrote into the prepared objects (prepare the same models, optimizers and
  /// loaders, in the same order, first). Every rank reads the file. The CPU generator state is restored
  /// when the job has as many ranks as the saved one (each rank gets its own); otherwise it is left alone.
  /// Throws std::runtime_error naming the directory and the fix when it or the file is missing, damaged,
  /// or holds other models or a different number of objects.
  void load_state(const std::string& dir);

  /// Shuts the process group down (when the accelerator created it). Call at the end of a normal run.
  void end_training();

  /// elastic: goes on after a lost rank, in the same process (docs/elastic.md, "The Accelerator"). Call it
  /// on every surviving rank in a `catch (const lockstep::comm::CommError&)` around one micro-step (the
  /// accumulate() scope, forward, backward, the optimizer's step and zero_grad: keep the scope inside the
  /// try, it refers to the old DDP). It waits for the launcher's announcement and forms the next
  /// generation's group (comm::ElasticWorld::reform: it rethrows when no rank was lost, so the error was
  /// not one this can mend); drops what the last committed step did not cover (every prepared optimizer's
  /// gradients zeroed, the accumulation group restarted, step() back to the committed count); rebuilds
  /// every prepared model's DDP over the new group without a broadcast (every survivor holds the same
  /// parameters; the PreparedModel objects keep working); and re-shards each prepared loader's pass in
  /// progress: the batches committed on the old world count as a part of the epoch, and the rest of the
  /// epoch is dealt over the new world, so the range-for's next batch is the first of the new plan.
  /// process_index(), num_processes() and group() then describe the new world. Returns what changed
  /// (`change.describe()` for a log line). Throws std::logic_error without elastic.
  ///
  /// Example:
  ///   for (auto& batch : loader) {
  ///     try {
  ///       auto scope = accelerator.accumulate(model);
  ///       accelerator.backward(loss_of(model(batch.data), batch.target));
  ///       optimizer.step();  // votes first on a sync step
  ///       optimizer.zero_grad();
  ///     } catch (const lockstep::comm::CommError&) {
  ///       accelerator.print("membership change: ", accelerator.recover().describe());
  ///     }
  ///   }
  comm::MembershipChange recover();

  /// elastic: ranks that join the running job (a second `lockstep run` on its endpoint) are admitted at
  /// the step boundary the commit vote picks, before the prepared loaders' next batch: every prepared
  /// model's DDP is rebuilt with its broadcast (the joiners get the parameters), rank 0 sends the
  /// optimizers' state, step() and each loader's position in its epoch, and the passes in progress are
  /// re-sharded over the new world. A joining rank receives that state here: the epoch its loop starts at
  /// (the prepared loaders' epoch: 0 in a fresh run, what load_state restored, or for a joiner the epoch it
  /// was admitted in). Call it after prepare(): `for (auto e = accelerator.first_epoch(); e < n; ++e)`.
  int64_t first_epoch();
  /// elastic: every membership change so far (recover()'s and the admissions'), for the loop's log.
  const std::vector<comm::MembershipChange>& membership_changes() const { return changes_; }
  /// elastic: the in-place world (its members, this process's id for life); nullptr otherwise.
  comm::ElasticWorld* elastic_world() { return elastic_.get(); }

 private:
  static std::string optimizer_base(const std::string& dir, size_t i);
  void on_every_rank(const std::string& dir, const std::string& failure, const std::function<void()>& write);
  std::string open_state(const std::string& dir, torch::serialize::InputArchive& archive) const;
  std::vector<std::vector<std::string>> save_optimizer_shards(const std::string& dir);
  void load_optimizer_shards(const std::string& dir, size_t i, const std::vector<std::string>& names);
  void init(int local_rank, int local_world_size, comm::Backend backend);
  /// After the group exists: the mesh (tensor_parallel > 1), then the strategy over data_group().
  void make_strategy();
  /// The ranks that see different data: the mesh's dp() under tensor parallelism, else the world.
  comm::ProcessGroup& data_group() const { return mesh_ ? mesh_->dp() : *group_; }
  /// save_state's file `path` in `dir`, on rank 0 of the data-parallel group whose state it is.
  void write_state(const std::string& dir, const std::string& path, const at::Tensor& rng_states,
                   const std::vector<std::vector<std::string>>& shards, const std::string& save);
  std::shared_ptr<detail::PreparedLoaderState> prepare_loader_state(
      std::unique_ptr<data::detail::AnyShardLoader> loader);
  void move_to_device(torch::nn::Module& module) const;
  /// strategy fsdp: FSDP over `module` (one stage when it is not Staged).
  std::shared_ptr<detail::FsdpModel> shard_model(const std::shared_ptr<torch::nn::Module>& module);
  /// pipeline_parallel: `module` (`staged`, or null when it is not models::Staged) cut over mesh_->pp() by
  /// the strategy; returns its gradient sync (what accumulate() turns off).
  ddp::GradientSync& pipeline_model(const std::shared_ptr<torch::nn::Module>& module, models::Staged* staged);
  double pipeline_step(const at::Tensor& input, const at::Tensor& target,
                       const std::function<at::Tensor(const at::Tensor&)>& forward,
                       const std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>& loss);
  bool begin_micro_step();
  /// elastic: the commit vote of the current sync step (once, whatever the number of optimizers); throws
  /// comm::MembershipChanged when the world changed first. Records what the step commits.
  void vote_to_commit();
  /// elastic: before a prepared loader's next batch or pass: admits the joiners the last vote let in, or,
  /// on a joiner, receives the state once.
  void at_batch_boundary();
  /// elastic: the next generation's group in place of `old_world`'s: models, optimizers, loaders; the
  /// state sent when ranks joined. Records the change.
  void rejoin(const comm::MembershipChange& change, int old_world);
  void send_state();
  /// A joiner's side of send_state(), once (a no-op on other ranks and afterwards).
  void receive_state();
  void optimizer_step(PreparedOptimizer& optimizer);
  void optimizer_zero_grad(PreparedOptimizer& optimizer);
  friend class PreparedOptimizer;

  AcceleratorOptions options_;  // resolved (resolve_launch_environment)
  // mixed_precision came from ACCELERATE_MIXED_PRECISION, not the program (errors say so).
  bool precision_from_launcher_ = false;
  Precision precision_ = Precision::k32;
  std::unique_ptr<comm::ProcessGroup> owned_group_;
  std::unique_ptr<comm::ElasticWorld> elastic_;  // elastic: owns the group of each generation
  comm::ProcessGroup* group_ = nullptr;
  std::unique_ptr<comm::DeviceMesh> mesh_;  // tensor_parallel > 1
  int local_process_index_ = 0;
  c10::Device device_{c10::kCPU};
  GradScaler scaler_;
  std::shared_ptr<detail::GradientState> gradient_state_;
  std::unique_ptr<Strategy> strategy_;  // holds the prepared models and optimizers
  std::vector<std::weak_ptr<detail::PreparedLoaderState>> loaders_;
  // elastic: each prepared model's DDP made again over group_ into strategy_ (recover), and the optimizers
  // as prepared, wrapped again by the new strategy.
  std::vector<std::function<void(bool init_sync)>> remake_ddp_;
  std::vector<comm::MembershipChange> changes_;
  bool state_received_ = false;  // a joiner: receive_state() ran
  std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers_;
  int64_t backwards_ = 0;        // backward() calls: a step's vote is once per backward
  int64_t voted_backward_ = -1;  // backwards_ at the last vote
};

template <typename M>
PreparedModel<M> Accelerator::prepare_model(M model) {
  static_assert(detail::is_module<M>(),
                "Accelerator::prepare_model takes a module holder (TORCH_MODULE) or a std::shared_ptr to a "
                "torch::nn::Module subclass");
  std::shared_ptr<torch::nn::Module> module = detail::module_ptr(model);
  move_to_device(*module);
  if (mesh_ && mesh_->pipeline_parallel() > 1) {
    ddp::GradientSync& sync = pipeline_model(module, dynamic_cast<models::Staged*>(module.get()));
    return PreparedModel<M>(std::move(model), nullptr, nullptr, precision_, device_.type(), &sync);
  }
  if (strategy_->shards_parameters())
    return PreparedModel<M>(std::move(model), nullptr, shard_model(module), precision_, device_.type());
  auto slot = std::make_shared<detail::DdpSlot<M>>();
  slot->ddp =
      std::make_shared<ddp::DistributedDataParallel<M>>(model, data_group(), strategy_->ddp_options());
  strategy_->add_model(module, slot->ddp->gradient_sync(), slot->ddp);
  if (elastic_) {
    remake_ddp_.push_back([this, slot, model, module](bool init_sync) {
      slot->ddp.reset();  // its hooks off the parameters before the new DDP adds its own
      slot->ddp = std::make_shared<ddp::DistributedDataParallel<M>>(
          model, *group_, strategy_->ddp_options().init_sync(init_sync));
      strategy_->add_model(module, slot->ddp->gradient_sync(), slot->ddp);
    });
  }
  return PreparedModel<M>(std::move(model), std::move(slot), nullptr, precision_, device_.type());
}

template <typename T>
auto Accelerator::prepare(T&& item) {
  using D = std::decay_t<T>;
  if constexpr (detail::IsDataSource<D>::value) {
    return prepare_data_loader(item);
  } else if constexpr (std::is_base_of_v<torch::optim::Optimizer, D>) {
    if constexpr (std::is_lvalue_reference_v<T>) {
      return prepare_optimizer(static_cast<torch::optim::Optimizer&>(item));
    } else {
      return prepare_optimizer(
          std::shared_ptr<torch::optim::Optimizer>(std::make_shared<D>(std::move(item))));
    }
  } else if constexpr (detail::IsOptimizerPointer<D>::value) {
    return prepare_optimizer(std::shared_ptr<torch::optim::Optimizer>(std::forward<T>(item)));
  } else {
    static_assert(detail::is_module<D>(),
                  "Accelerator::prepare takes models (module holders or shared_ptrs to modules), optimizers "
                  "and data sources (DataLoaderSpec, data::DataSource<B>)");
    return prepare_model(D(item));
  }
}

template <typename T1, typename T2, typename... Ts>
auto Accelerator::prepare(T1&& first, T2&& second, Ts&&... rest) {
  // A braced list is evaluated left to right, so every rank runs the collectives of prepare (DDP's
  // broadcast) in the order written.
  using Tuple =
      std::tuple<decltype(prepare(std::forward<T1>(first))), decltype(prepare(std::forward<T2>(second))),
                 decltype(prepare(std::forward<Ts>(rest)))...>;
  return Tuple{prepare(std::forward<T1>(first)), prepare(std::forward<T2>(second)),
               prepare(std::forward<Ts>(rest))...};
}

}  // namespace lockstep::train
