#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include "lockstep/comm/process_group.h"
#include "lockstep/ddp/distributed_data_parallel.h"
#include "lockstep/ddp/grad_hooks.h"
#include "lockstep/detail/option.h"
#include "lockstep/models/staged.h"
#include "lockstep/shard/chunk_layout.h"
#include "lockstep/shard/full_parameters.h"
#include "lockstep/shard/sharded_reducer.h"
#include "lockstep/shard/zero_optimizer.h"

namespace lockstep::shard {

/// Options of FullyShardedDataParallel; names follow PyTorch's FSDP where it has them.
class FsdpOptions {
 public:
  /// Auto-wrap (PyTorch's size_based_auto_wrap_policy): consecutive stages join one unit until it holds at
  /// least this many parameters (> 0). Default 1M: with lockstep's Mlp every Linear of 1M parameters or
  /// more is a unit of its own.
  LOCKSTEP_OPTION(FsdpOptions, int64_t, min_unit_params)
  /// The user's override: the first stage of each unit, ascending, starting at 0 (e.g. {0, 2, 3}: stages
  /// 0-1, 2, 3-last). Empty (the default): auto-wrap.
  LOCKSTEP_OPTION(FsdpOptions, std::vector<size_t>, unit_starts)
  /// Start gathering the next unit (forward) or the previous one (backward) while this one computes
  /// (PyTorch's forward_prefetch and backward_prefetch=BACKWARD_PRE).
  LOCKSTEP_OPTION(FsdpOptions, bool, prefetch)
  /// Mixed precision (PyTorch's MixedPrecision.param_dtype): the dtype the parameters are gathered in and
  /// computed with (bfloat16, or float16 on a GPU), while the shards stay in the model's dtype as the master
  /// copy the optimizer steps. Unset (the default): the model's dtype throughout. Forward must then run
  /// under autocast (the Trainer's bf16-mixed), which casts what the layers are given to the same dtype.
  LOCKSTEP_OPTION(FsdpOptions, std::optional<at::ScalarType>, param_dtype)

  /// Throws std::invalid_argument naming the option and the value.
  void validate() const;

 private:
  int64_t min_unit_params_ = int64_t{1} << 20;
  std::vector<size_t> unit_starts_;
  bool prefetch_ = true;
  std::optional<at::ScalarType> param_dtype_;
};

/*
 * Fully sharded data parallel (FSDP, ZeRO stage 3): parameters, gradients and optimizer state all
 * sharded over the ranks.
 *
 * The model is Staged (models/staged.h: LibTorch modules have no forward hooks, so the model runs each stage
 * through a runner, and this object is it). Its stages are grouped into units: by size (min_unit_params) or
 * as the user says (unit_starts). Each rank keeps, for every parameter, chunk r (ChunkLayout::chunk) in
 * its unit's shard (its row of the unit's ChunkLayout); between uses the parameters hold no memory at all
 * (their storage is released; their shapes stay).
 *
 * Forward: before a unit's first stage its parameters are all-gathered from the shards into their own
 * memory (with prefetch, the next unit's gather is already under way while this one computes); after its
 * last stage they are released again — except the last unit's, which backward needs first — and a hook is
 * put on the unit's output. Backward: that hook fires when the gradient of the unit's output is complete,
 * just before the unit's own backward: the unit is gathered again (and the previous one prefetched). When
 * every parameter of the unit has its gradient, the unit is released, and the ShardedReducer (one bucket per
 * unit, in backward order) reduce-scatters the gradients into this rank's chunk gradients and releases the
 * full ones. So at any time only about two units are whole, and between steps a rank holds 16/N bytes per
 * fp32 parameter with Adam: 4/N of parameter, 4/N of gradient, 8/N of optimizer state (0.25x DDP's at N = 4).
 *
 * make_optimizer() re-targets the user's optimizer to the chunks (ZeroOptimizer in its FSDP form: it steps
 * the chunks where this object keeps them, from the reducer's chunk gradients, and gathers nothing). Each
 * forward starts from the shards, so it sees the step. no_sync() accumulates full gradients locally (each
 * unit still released after its backward) until the next synchronised backward; clipping is the reducer's
 * clip_grad_norm_ (the global norm over the shards).
 *
 * Mixed precision (FsdpOptions::param_dtype, e.g. bfloat16): the shards stay float32, the master copy
 * the optimizer steps; the parameters themselves are retyped to bfloat16, so a gather sends each rank's
 * chunks cast to bfloat16 (half the bytes) into bfloat16 parameters (half the memory; not in a unit that
 * keeps float32 for a BatchNorm, below), and forward and
 * backward compute with them. Their bfloat16 gradients are reduce-scattered in float32 (cast as they are
 * packed), so the averaging and the chunk gradients the optimizer steps from keep float32's precision;
 * under no_sync they sum in float32 too (the reducer's accumulators: sharded_reducer.h).
 * A unit holding a BatchNorm's parameters keeps the master dtype (PyTorch's FSDP keeps BatchNorm in full
 * precision too, as its running statistics are; here the whole unit does, as units gather in one dtype).
 * Between steps a rank holds 16/N bytes a parameter with Adam as without it (master shard, float32 chunk
 * gradients, state): what halves is the memory of the whole units during a pass and the bytes gathered.
 *
 * Whole parameters are needed to save or load a model: gather_all() (a collective) makes every parameter
 * whole, in the master dtype (the exact values the optimizer steps, whatever param_dtype is); reshard()
 * releases them again (and retypes them to param_dtype), first taking this rank's chunks from them when
 * they were loaded.
 * Every rank must run the same forward and backward passes (the gathers are collectives). Parameters and
 * buffers are broadcast from rank 0 at construction, buffers before every forward (as DDP).
 */
class FullyShardedDataParallel : public models::StageRunner, public ShardedParameters {
 public:
  /// `root`: the model (or the module holding it: the one Staged module among root's modules is used, or
  /// `staged` when given). Every trainable parameter of root must belong to one of its stages, all of one
  /// dtype on one device, each with memory of its own. Collective: every rank constructs it with the same
  /// model.
  FullyShardedDataParallel(std::shared_ptr<torch::nn::Module> root, comm::ProcessGroup& group,
                           FsdpOptions options = FsdpOptions(), models::Staged* staged = nullptr);
  /// Uninstalls the runner. The parameters stay released: gather_all() first to use the model afterwards.
  ~FullyShardedDataParallel() override;
  FullyShardedDataParallel(const FullyShardedDataParallel&) = delete;
  FullyShardedDataParallel& operator=(const FullyShardedDataParallel&) = delete;

  at::Tensor run_stage(size_t index, const std::function<at::Tensor(at::Tensor)>& stage,
                       at::Tensor x) override;

  /// The user's optimizer (built over root's parameters, no state yet) stepping this rank's chunks.
  std::unique_ptr<ZeroOptimizer> make_optimizer(std::shared_ptr<torch::optim::Optimizer> optimizer);
  /// The gradient path (chunk gradients, clip_grad_norm_, clear).
  ShardedReducer& reducer();
  /// Gradient synchronisation off until the guard is destroyed (gradient accumulation).
  [[nodiscard]] ddp::NoSyncGuard no_sync();

  /// Every parameter whole, from the shards (a collective; every rank calls it, between steps), and held
  /// so until reshard(): forward passes then gather and release nothing and run no collective (each rank
  /// may run its own number of them, as validation does); a forward with gradients is refused (no
  /// backward can reduce them). Nested calls count: only the matching outermost reshard() releases.
  void gather_all() override;
  /// Releases every parameter; with `from_parameters`, first this rank's chunks are taken from the whole
  /// parameters (after loading weights into them). Local: no collective. Inside nested gather_all()s it
  /// only ends the innermost (the outermost reshard takes the chunks).
  void reshard(bool from_parameters = false) override;
  /// Seconds this rank waited for parameter gathers (the communication not hidden by computing), in
  /// forward and in backward, since the last call (the Trainer's step breakdown).
  struct GatherWaits {
    double forward_s = 0.0;
    double backward_s = 0.0;
  };
  GatherWaits take_gather_waits();

  /// The stage indices of each unit, in forward order.
  std::vector<std::vector<size_t>> units() const;
  /// Bytes of this rank's parameter chunks.
  size_t shard_bytes() const;
  /// How many units hold whole parameters now (for tests: at most about two during a pass).
  size_t gathered_units() const;
  /// The most units that held whole parameters at once since construction.
  size_t peak_gathered_units() const { return peak_gathered_; }

 private:
  struct Unit {
    std::vector<size_t> stages;
    std::vector<size_t> params;  // indices into params_, in `layout`'s order
    ChunkLayout layout;          // of its members: this rank's row is `shard`
    // The first `packed` members are gathered together, each later one straight into its memory.
    size_t packed = 0;
    at::Tensor shard;  // this rank's row, persistent
    bool gathered = false;
    std::vector<comm::Work> pending;  // the gathers under way (prefetch), when in_flight
    bool in_flight = false;
    bool master_dtype = false;  // computes in the shards' dtype under param_dtype (holds a BatchNorm)
    at::Tensor send;            // the shard cast to param_dtype for the gathers under way
    at::Tensor receive;         // the packed members' gather
    size_t waiting = 0;         // parameters whose gradient has not arrived in this backward
  };
  void plan_units(const std::vector<std::shared_ptr<torch::nn::Module>>& stages);
  void start_gather(Unit& unit);
  void start_gather_untimed(Unit& unit);
  /// Adds the time since `start` to this pass's gather waits (forward or backward).
  void count_gather_wait(std::chrono::steady_clock::time_point start);
  void finish_gather(Unit& unit);
  void release(Unit& unit);
  void keep_chunks(Unit& unit);
  /// Memory for a released parameter: a block released before of the same size, or a fresh one.
  void materialize(const at::Tensor& param);
  /// Every parameter released and retyped to `dtype` (param_dtype, or the shards' dtype), except those
  /// of units that keep the master dtype.
  void retype_all(at::ScalarType dtype);
  /// Marks the units holding a BatchNorm's parameters to keep the master dtype.
  void keep_batch_norm_units();
  void release_all();
  void before_backward(size_t u);
  void on_gradient(size_t index);

  std::shared_ptr<torch::nn::Module> root_;
  models::Staged* staged_;
  comm::ProcessGroup& group_;
  FsdpOptions options_;
  std::vector<at::Tensor> params_;     // root's trainable parameters, registration order
  std::vector<size_t> unit_of_param_;  // per parameter
  std::vector<size_t> unit_of_stage_;  // per stage
  std::vector<Unit> units_;
  std::unique_ptr<ddp::DdpCore> core_;     // broadcasts, buffers, and the ShardedReducer (one bucket a unit)
  std::unique_ptr<ddp::GradHooks> hooks_;  // a unit is released once all its gradients are in
  std::mutex mutex_;
  bool in_backward_ = false;
  int holds_ = 0;                         // gather_all()s not yet ended by reshard(): whole while > 0
  double gather_wait_s_[2] = {0.0, 0.0};  // finish_gather's time, in forward [0] and backward [1]
  // Released parameters' memory kept for the next gather (up to two units' worth: about what a pass holds
  // at once anyway), so that a gather does not fault in fresh pages each time.
  std::vector<std::pair<size_t, at::DataPtr>> spare_;
  size_t spare_bytes_ = 0;
  size_t spare_cap_ = 0;
  size_t peak_gathered_ = 0;
};

}  // namespace lockstep::shard
