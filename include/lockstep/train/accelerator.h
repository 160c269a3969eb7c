#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/optim/optimizer.h>

#include "lockstep/comm/process_group.h"
#include "lockstep/data/distributed_sampler.h"
#include "lockstep/data/loader.h"
#include "lockstep/data/shard_loader.h"
#include "lockstep/data/tensor_dataset.h"
#include "lockstep/ddp/ddp_options.h"
#include "lockstep/ddp/distributed_data_parallel.h"
#include "lockstep/detail/option.h"
#include "lockstep/env/environment.h"
#include "lockstep/models/staged.h"
#include "lockstep/shard/fully_sharded_data_parallel.h"
#include "lockstep/shard/sharded_reducer.h"
#include "lockstep/train/device_choice.h"
#include "lockstep/train/precision.h"
#include "lockstep/train/strategy/strategy.h"
#include "lockstep/train/trainer_options.h"

namespace lockstep::train {

/// Options of an Accelerator; Hugging Face Accelerate's names and defaults.
///
/// mixed_precision, gradient_accumulation_steps and cpu remember whether the program set them: one left
/// unset is read from the variable Accelerate's launcher sets (`accelerate launch`, `lockstep launch`:
/// resolve_launch_environment below), so the launcher's `--mixed_precision fp16` reaches a program that
/// did not choose a precision, and a program that did keeps its own. Their getters return std::nullopt
/// while unset; Accelerator::options() returns them resolved.
///
/// Example:
///   Accelerator
///   accelerator(AcceleratorOptions().mixed_precision(Precision::kBf16Mixed).gradient_accumulation_steps(4));
class AcceleratorOptions {
 public:
  /// Precision::k32 (Accelerate's "no"), kBf16Mixed ("bf16") or k16Mixed ("fp16": CUDA, and the CPU with
  /// LibTorch >= 2.5; precision.h); parse_precision reads Accelerate's and Lightning's spellings. Unset:
  /// ACCELERATE_MIXED_PRECISION, else k32.
  LOCKSTEP_OPTION(AcceleratorOptions, Precision, mixed_precision)
  /// Micro-batches whose gradients are summed before each optimizer step, >= 1. Each rank's effective
  /// batch is batch_size * gradient_accumulation_steps; the job's is that times num_processes(). Unset:
  /// ACCELERATE_GRADIENT_ACCUMULATION_STEPS, else 1.
  LOCKSTEP_OPTION(AcceleratorOptions, int64_t, gradient_accumulation_steps)
  /// Collective backend (comm::Backend; comm::parse_backend reads "auto", "gloo", "shm", ...). Ignored by
  /// the constructor that takes an existing process group.
  LOCKSTEP_OPTION(AcceleratorOptions, comm::Backend, backend)
  /// Seeds the shuffle of every prepared data loader (DistributedSampler: seed + epoch).
  LOCKSTEP_OPTION(AcceleratorOptions, uint64_t, seed)
  /// Stay on the CPU even when LibTorch sees a GPU (Accelerate's `cpu=True`; the same as accelerator kCpu,
  /// and it wins over accelerator kGpu, as in Accelerate). Unset: ACCELERATE_USE_CPU, else false.
  LOCKSTEP_OPTION(AcceleratorOptions, bool, cpu)
  /// Where to train, as the Trainer's option (device_choice.h): kAuto (the default) is gpu when LibTorch
  /// sees one, one device per local rank.
  LOCKSTEP_OPTION(AcceleratorOptions, AcceleratorKind, accelerator)
  /// ddp (the default), zero1, zero2 or fsdp, with its options (strategy/strategy_options.h: DdpStrategy()
  /// .find_unused_parameters(true), FsdpStrategy().min_unit_params(n), ...): prepare_optimizer then shards
  /// the optimizer's state over the ranks (shard::ZeroOptimizer; step the prepared optimizer, not the one
  /// given); zero2 also reduce-scatters the gradients (shard::ShardedReducer: prepare the one model before
  /// its optimizer; clip_grad_norm_ clips the shards by the global 2-norm; not with fp16); fsdp shards the
  /// parameters too (shard::FullyShardedDataParallel; see prepare_model and full_parameters). save_state
  /// writes each rank's shard of a sharded optimizer's state. Under fsdp and mixed_precision bf16 the units
  /// compute in bfloat16 (float32 master shards) unless its param_dtype says otherwise.
  LOCKSTEP_OPTION(AcceleratorOptions, StrategyOptions, strategy)
  /// The loss scaler used with fp16 (ignored otherwise).
  LOCKSTEP_OPTION(AcceleratorOptions, GradScalerOptions, scaler)

  /// Throws std::invalid_argument naming the option, the bad value and what is accepted. Unset options
  /// count as their defaults.
  void validate() const;

 private:
  std::optional<Precision> mixed_precision_;
  std::optional<int64_t> gradient_accumulation_steps_;
  comm::Backend backend_ = comm::Backend::kAuto;
  uint64_t seed_ = 0;
  std::optional<bool> cpu_;
  AcceleratorKind accelerator_ = AcceleratorKind::kAuto;
  StrategyOptions strategy_;
  GradScalerOptions scaler_;
};

/// `options` as an Accelerator runs with them: each of mixed_precision, gradient_accumulation_steps and
/// cpu that the program left unset is read from the variable Accelerate's launcher gives its workers
/// (`accelerate launch`, `lockstep launch`; docs/accelerator.md), else set to its default; then
/// validated. What the program set wins, as Accelerate's constructor argument wins over
/// ACCELERATE_MIXED_PRECISION:
///
///   ACCELERATE_MIXED_PRECISION              no, fp16 or bf16 (--mixed_precision)      unset: k32
///   ACCELERATE_GRADIENT_ACCUMULATION_STEPS  an integer >= 1                           unset: 1
///   ACCELERATE_USE_CPU                      y yes t true on 1 / n no f false off 0    unset: false
///                                           (Accelerate's truth values, any case)
/// (An empty variable counts as unset.)
///
/// (Python Accelerate lets ACCELERATE_GRADIENT_ACCUMULATION_STEPS win over its constructor argument,
/// although its docstring calls the variable the default; lockstep follows the docstring, one rule for
/// all three. A cpu(false) set by the program, or accelerator(kGpu), also wins over ACCELERATE_USE_CPU=true,
/// which Python's `cpu=False` cannot say.) Throws std::invalid_argument naming the variable, its value and
/// what is accepted (fp8 is refused: lockstep has no float8 training), or a validate() error that names the
/// variables the resolved options came from.
///
/// Example:
///   // under `lockstep launch --mixed_precision fp16`:
///   auto a = resolve_launch_environment(AcceleratorOptions());  // a.mixed_precision() == k16Mixed
///   auto b = resolve_launch_environment(AcceleratorOptions().mixed_precision(Precision::k32));  // k32
AcceleratorOptions resolve_launch_environment(AcceleratorOptions options,
                                              const env::EnvLookup& lookup = env::process_env());

/// A dataset and how to batch it: what Accelerator::prepare turns into this rank's shard (the C++ form of
/// handing Accelerate a `DataLoader(dataset, batch_size=64, shuffle=True)`): a data::DataSource<B> of any
/// dataset (map-style, iterable, torch::data, or the image datasets). batch_size is per rank.
///
/// Example:
///   auto spec = DataLoaderSpec(dataset,
///   data::LoaderOptions(/*batch_size=*/64).num_workers(2)).shuffle(true);
template <typename B>
using BasicDataLoaderSpec = data::DataSource<B>;
/// The image datasets' (batches of data::Batch).
using DataLoaderSpec = data::DataSource<data::Batch>;

/// How Accelerator::reduce combines the ranks' tensors.
enum class Reduction { kSum, kMean };

class Accelerator;

namespace detail {
struct GradientState;
struct PreparedLoaderState;

template <typename T>
struct IsDataSource : std::false_type {};
template <typename B>
struct IsDataSource<data::DataSource<B>> : std::true_type {};

template <typename T>
struct IsSharedPtr : std::false_type {};
template <typename T>
struct IsSharedPtr<std::shared_ptr<T>> : std::true_type {};

/// A module holder (`Net` from TORCH_MODULE) or a std::shared_ptr to a torch::nn::Module subclass.
template <typename M>
constexpr bool is_module() {
  if constexpr (torch::detail::is_module_holder<M>::value) {
    return true;
  } else if constexpr (IsSharedPtr<M>::value) {
    return std::is_base_of_v<torch::nn::Module, typename M::element_type>;
  } else {
    return false;
  }
}

template <typename M>
std::shared_ptr<torch::nn::Module> module_ptr(const M& model) {
  if constexpr (IsSharedPtr<M>::value) {
    return model;
  } else {
    return model.ptr();
  }
}

/// A std::shared_ptr or std::unique_ptr to a torch::optim::Optimizer subclass.
template <typename P>
struct IsOptimizerPointer : std::false_type {};
template <typename O>
struct IsOptimizerPointer<std::shared_ptr<O>> : std::is_base_of<torch::optim::Optimizer, O> {};
template <typename O>
struct IsOptimizerPointer<std::unique_ptr<O>> : std::is_base_of<torch::optim::Optimizer, O> {};

/// Accelerate's convert_outputs_to_fp32: a forward run under autocast returns float32, so the loss and
/// metrics computed from it outside the scope are computed in float32. Other outputs pass through.
inline at::Tensor outputs_to_float32(at::Tensor output) {
  if (output.defined() && (output.scalar_type() == at::kBFloat16 || output.scalar_type() == at::kHalf)) {
    return output.to(at::kFloat);
  }
  return output;
}
template <typename T>
T outputs_to_float32(T output) {
  return output;
}
/// A model prepared under fsdp: FSDP over it, and the one stage it runs as when it is not Staged itself.
/// FSDP goes first (its destructor uninstalls itself from the stages).
struct FsdpModel {
  std::shared_ptr<models::SingleStage> single;  // null when the model is Staged
  std::shared_ptr<shard::FullyShardedDataParallel> fsdp;
};
}  // namespace detail

namespace detail {
/// The type-free part of a prepared loader (accelerator.cpp): its shard loader, epoch and position.
class PreparedLoaderCore {
 public:
  explicit PreparedLoaderCore(std::shared_ptr<PreparedLoaderState> state) : state_(std::move(state)) {}
  /// Starts a pass; false when it has no batch.
  bool begin_pass();
  /// The next batch of the pass; false (and the epoch advanced) after the last one.
  bool advance();
  /// The current batch (on the accelerator's device).
  void* current() const;
  void set_epoch(int64_t epoch);
  int64_t epoch() const;
  int64_t size() const;
  data::detail::AnyShardLoader& loader();

 private:
  std::shared_ptr<PreparedLoaderState> state_;
};
}  // namespace detail

/// This rank's shard of a dataset, batched, iterated with a range-for: a data::ShardLoader (the
/// DistributedSampler's indices of a map-style dataset, or this rank's positions of a stream). Each full
/// pass advances the epoch by one (so every epoch shuffles differently even without set_epoch, as in
/// Accelerate); set_epoch(e) picks the epoch of the next pass. Batches are moved to the accelerator's
/// device (data::BatchTraits). Not thread-safe; one pass at a time.
///
/// Example:
///   for (int64_t epoch = 0; epoch < 10; ++epoch) {
///     loader.set_epoch(epoch);
///     for (auto& batch : loader) train_step(batch.data, batch.target);
///   }
template <typename B>
class BasicPreparedLoader {
 public:
  /// An input iterator over one pass; dereferences to the current batch.
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = B;
    using difference_type = std::ptrdiff_t;
    using pointer = B*;
    using reference = B&;

    Iterator() = default;
    B& operator*() const { return *static_cast<B*>(core_->current()); }
    B* operator->() const { return &**this; }
    Iterator& operator++() {
      if (core_ != nullptr && !core_->advance()) core_ = nullptr;
      return *this;
    }
    bool operator==(const Iterator& other) const { return core_ == other.core_; }
    bool operator!=(const Iterator& other) const { return core_ != other.core_; }

   private:
    friend class BasicPreparedLoader;
    explicit Iterator(detail::PreparedLoaderCore* core) : core_(core) {}
    detail::PreparedLoaderCore* core_ = nullptr;  // null: the end
  };

  /// Starts a pass over the current epoch's shard (cancelling an unfinished one).
  Iterator begin() { return core_->begin_pass() ? Iterator(core_.get()) : Iterator(); }
  Iterator end() { return Iterator(); }
  /// The epoch of the next pass (its shuffle).
  void set_epoch(int64_t epoch) { core_->set_epoch(epoch); }
  int64_t epoch() const { return core_->epoch(); }
  /// Batches per pass on this rank (the same on every rank); -1 for a stream of unknown length.
  int64_t size() const { return core_->size(); }
  /// The shard loader underneath.
  data::detail::AnyShardLoader& loader() { return core_->loader(); }

 private:
  friend class Accelerator;
  explicit BasicPreparedLoader(std::shared_ptr<detail::PreparedLoaderState> state)
      : core_(std::make_unique<detail::PreparedLoaderCore>(std::move(state))) {}
  std::unique_ptr<detail::PreparedLoaderCore> core_;
};

/// The image datasets' prepared loader (batches of data::Batch).
using PreparedLoader = BasicPreparedLoader<data::Batch>;

/// An optimizer whose step() and zero_grad() act only when the accelerator synchronises gradients (every
/// gradient_accumulation_steps-th micro-step of accumulate(), and the last batch of a pass), and whose
/// step() goes through the GradScaler under fp16. Must not outlive its Accelerator.
///
/// Example:
///   auto optimizer = accelerator.prepare(torch::optim::Adam(net->parameters(), 1e-3));
///   ... accelerator.backward(loss); optimizer.step(); optimizer.zero_grad();
class PreparedOptimizer {
 public:
  /// On a sync step: the optimizer's step (fp16: the GradScaler's step and update, which skips the step
  /// when a gradient is inf/NaN). Otherwise nothing.
  void step();
  /// On a sync step: the optimizer's zero_grad. Otherwise nothing (the gradients keep accumulating).
  void zero_grad();
  /// The last sync step's update was skipped (fp16 found an inf/NaN gradient).
  bool step_was_skipped() const { return step_was_skipped_; }

  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  torch::optim::Optimizer* operator->() { return optimizer_.get(); }

 private:
  friend class Accelerator;
  PreparedOptimizer(std::shared_ptr<torch::optim::Optimizer> optimizer, Accelerator& accelerator)
      : optimizer_(std::move(optimizer)), accelerator_(&accelerator) {}
  std::shared_ptr<torch::optim::Optimizer> optimizer_;
  Accelerator* accelerator_;
  bool step_was_skipped_ = false;
};

/// A model wrapped in DistributedDataParallel (or, under strategy fsdp, sharded by FullyShardedDataParallel)
/// whose forward runs under autocast for the accelerator's precision and returns float32 outputs.
/// `model->...` reaches the user's module (train(), eval(), ...). Must not outlive its Accelerator.
template <typename M>
class PreparedModel {
 public:
  template <typename... Args>
  auto forward(Args&&... args) {
    AutocastScope autocast(precision_, device_type_);
    if (!fsdp_) return detail::outputs_to_float32(ddp_->forward(std::forward<Args>(args)...));
    if (!fsdp_->single) return detail::outputs_to_float32(model_->forward(std::forward<Args>(args)...));
    return detail::outputs_to_float32(forward_as_one_stage(std::forward<Args>(args)...));
  }
  template <typename... Args>
  auto operator()(Args&&... args) {
    return forward(std::forward<Args>(args)...);
  }
  auto* operator->() const { return model_.get(); }
  /// The user's model (the same one prepare() was given). Under fsdp its parameters hold no memory
  /// between passes: Accelerator::full_parameters() makes them whole.
  M& module() const { return model_; }
  /// The DDP wrapper; std::logic_error under fsdp.
  ddp::DistributedDataParallel<M>& ddp() const {
    if (!ddp_) throw std::logic_error("PreparedModel::ddp(): the model is sharded by FSDP (strategy fsdp)");
    return *ddp_;
  }
  /// The FSDP wrapper under strategy fsdp, else null.
  shard::FullyShardedDataParallel* fsdp() const { return fsdp_ ? fsdp_->fsdp.get() : nullptr; }
  /// What synchronises the model's gradients (DDP's reducer or FSDP's).
  ddp::GradientSync& gradient_sync() const {
    return fsdp_ ? static_cast<ddp::GradientSync&>(fsdp_->fsdp->reducer()) : ddp_->gradient_sync();
  }

 private:
  friend class Accelerator;
  PreparedModel(M model, std::shared_ptr<ddp::DistributedDataParallel<M>> ddp,
                std::shared_ptr<detail::FsdpModel> fsdp, Precision precision, c10::DeviceType device)
      : model_(std::move(model)),
        ddp_(std::move(ddp)),
        fsdp_(std::move(fsdp)),
        precision_(precision),
        device_type_(device) {}
  // A model not built in stages is one stage: its forward runs through it (FSDP gathers the whole model
  // around it). Its forward must take a tensor first and return a tensor. Declared to return what the
  // model's forward returns, so that forward() has one return type whatever the model returns (a tuple is
  // fine under the other strategies).
  template <typename X, typename... Rest>
  auto forward_as_one_stage(X&& x, Rest&&... rest)
      -> decltype(std::declval<M&>()->forward(std::forward<X>(x), std::forward<Rest>(rest)...)) {
    using Out = decltype(std::declval<M&>()->forward(std::forward<X>(x), std::forward<Rest>(rest)...));
    if constexpr (std::is_convertible_v<X, at::Tensor> && std::is_same_v<std::decay_t<Out>, at::Tensor>) {
      return fsdp_->single->forward(at::Tensor(std::forward<X>(x)), [&](at::Tensor in) -> at::Tensor {
        return model_->forward(std::move(in), std::forward<Rest>(rest)...);
      });
    } else {
      throw std::logic_error(
          "PreparedModel: under strategy fsdp a model not built in stages (models::Staged) runs as one "
          "stage, "
          "which needs forward(tensor, ...) -> tensor: make the model Staged (models/staged.h)");
    }
  }
  mutable M model_;
  std::shared_ptr<ddp::DistributedDataParallel<M>> ddp_;  // ddp, zero1, zero2
  std::shared_ptr<detail::FsdpModel> fsdp_;               // fsdp
  Precision precision_;
  c10::DeviceType device_type_;
};

/// Every fsdp-prepared model's parameters whole, and under bf16 zero1/zero2 the float32 masters in the
/// parameters, for a scope (Accelerator::full_parameters; the shard layer's scope, shard::FullParameters).
using FullParameters = shard::FullParameters;

/// The scope of one micro-step under gradient accumulation (Accelerate's `with
/// accelerator.accumulate(model):`). Gradient synchronisation is off for the scope unless this micro-step is
/// a sync step.
class AccumulateGuard {
 public:
  AccumulateGuard(bool sync, ddp::GradientSync& reducer) {
    if (!sync) no_sync_.emplace(reducer);
  }
  AccumulateGuard(const AccumulateGuard&) = delete;
  AccumulateGuard& operator=(const AccumulateGuard&) = delete;
  /// Whether this micro-step synchronises gradients (and steps the optimizer).
  bool sync_gradients() const { return !no_sync_.has_value(); }

 private:
  std::optional<ddp::NoSyncGuard> no_sync_;
};

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
  /// CPU with LibTorch < 2.5), env::EnvError / comm::CommError from setup.
  explicit Accelerator(AcceleratorOptions options = AcceleratorOptions());
  /// Uses an existing process group (tests with thread ranks, programs with their own group); the options
  /// are resolved as above. The group must outlive the accelerator; end_training() leaves it open (its owner
  /// shuts it down). is_local_main_process() assumes torchrun's rank layout (rank = node * local_world_size +
  /// local rank).
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
  /// order. Collective; the same shape on every rank.
  at::Tensor gather(const at::Tensor& tensor);
  /// The sum or mean of every rank's `tensor` (a new tensor; the mean is floating point). Collective.
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

 private:
  static std::string optimizer_base(const std::string& dir, size_t i);
  void on_every_rank(const std::string& dir, const std::string& failure, const std::function<void()>& write);
  std::vector<std::vector<std::string>> save_optimizer_shards(const std::string& dir);
  void load_optimizer_shards(const std::string& dir, size_t i, const std::vector<std::string>& names);
  void init(int local_rank, int local_world_size, comm::Backend backend);
  std::shared_ptr<detail::PreparedLoaderState> prepare_loader_state(
      std::unique_ptr<data::detail::AnyShardLoader> loader);
  void move_to_device(torch::nn::Module& module) const;
  /// strategy fsdp: FSDP over `module` (one stage when it is not Staged).
  std::shared_ptr<detail::FsdpModel> shard_model(const std::shared_ptr<torch::nn::Module>& module);
  bool begin_micro_step();
  void optimizer_step(PreparedOptimizer& optimizer);
  void optimizer_zero_grad(PreparedOptimizer& optimizer);
  friend class PreparedOptimizer;

  AcceleratorOptions options_;  // resolved (resolve_launch_environment)
  // mixed_precision came from ACCELERATE_MIXED_PRECISION, not the program (errors say so).
  bool precision_from_launcher_ = false;
  Precision precision_ = Precision::k32;
  std::unique_ptr<comm::ProcessGroup> owned_group_;
  comm::ProcessGroup* group_ = nullptr;
  int local_process_index_ = 0;
  c10::Device device_{c10::kCPU};
  GradScaler scaler_;
  std::shared_ptr<detail::GradientState> gradient_state_;
  std::unique_ptr<Strategy> strategy_;  // holds the prepared models and optimizers
  std::vector<std::weak_ptr<detail::PreparedLoaderState>> loaders_;
};

template <typename M>
PreparedModel<M> Accelerator::prepare_model(M model) {
  static_assert(detail::is_module<M>(),
                "Accelerator::prepare_model takes a module holder (TORCH_MODULE) or a std::shared_ptr to a "
                "torch::nn::Module subclass");
  std::shared_ptr<torch::nn::Module> module = detail::module_ptr(model);
  move_to_device(*module);
  if (strategy_->shards_parameters())
    return PreparedModel<M>(std::move(model), nullptr, shard_model(module), precision_, device_.type());
  auto wrapped = std::make_shared<ddp::DistributedDataParallel<M>>(model, *group_, strategy_->ddp_options());
  strategy_->add_model(std::move(module), wrapped->gradient_sync(), wrapped);
  return PreparedModel<M>(std::move(model), std::move(wrapped), nullptr, precision_, device_.type());
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
