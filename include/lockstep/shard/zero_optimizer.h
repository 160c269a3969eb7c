#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include "lockstep/comm/process_group.h"
#include "lockstep/ddp/gradient_sync.h"
#include "lockstep/shard/chunk_layout.h"
#include "lockstep/shard/full_parameters.h"
#include "lockstep/shard/sharded_reducer.h"

namespace torch::nn {
class Module;
}

namespace lockstep::shard {
namespace detail {
class GradientSource;
class ChunkStore;
}  // namespace detail

/// Loads shard `shard` of a sharded checkpoint (shard_checkpoint.h) into `archive`.
using ShardReader = std::function<void(int shard, torch::serialize::InputArchive& archive)>;

/*
 * ZeRO stage 1: the optimizer's state sharded over the ranks.
 *
 * Every parameter is cut into world-size chunks of ceil(numel / world) elements (the last ones shorter,
 * or empty: ChunkLayout, chunk_layout.h); rank r keeps chunk r of every parameter, as a tensor sharing the
 * parameter's memory, and the user's optimizer is re-targeted from the parameters to these chunks. So its
 * state — Adam's two moments, 8 of DDP's 16 bytes a parameter — is 1/world per rank.
 *
 * Why it is exact: an elementwise optimizer (SGD with momentum, Adam, AdamW, lockstep's FusedAdam,
 * RMSprop, Adagrad) updates each element from that element's gradient and state alone, so the chunks step
 * exactly as the whole parameters would. A parameter without a gradient leaves its chunks without one, and
 * the optimizer skips them as it skips the parameter. Per-parameter chunks (not one flat vector cut in N)
 * keep this true for any mix of used and unused parameters, and keep each parameter group's options.
 *
 * A step: each chunk's gradient is a view of the averaged gradient DDP left in the parameter's .grad; the
 * optimizer steps the chunks (in place, in the parameters' memory); then the chunks are all-gathered back
 * into the parameters. A parameter of at least 64 KiB whose size divides by the world is gathered straight
 * into its own memory (its own chunk as the input, where the backend allows it); the others are packed, rank
 * by rank, into buckets whose gathered size stays under 16 MiB, and copied out. So the gathers need at most
 * 16 MiB besides the largest chunk, not a second copy of the model (which would take back much of what
 * sharding saved). The optimizer's options live in this object's param_groups (so a learning-rate schedule or
 * the GradScaler sees the parameters and their full gradients, as with DDP) and are handed to the inner
 * optimizer before each step.
 *
 * FSDP (fully_sharded_data_parallel.h) keeps the chunks itself and frees the parameters between uses:
 * the chunks step where it keeps them, and nothing is gathered after the step.
 *
 * ZeRO stage 2 (built with a ShardedReducer): the gradients arrive already sharded (the reducer
 * reduce-scatters them during backward and releases the full ones), and the chunks step from the reducer's
 * chunk gradients, which step() consumes (ShardedReducer::clear). Everything else is as above.
 *
 * Mixed precision (DeepSpeed's bf16 ZeRO; Lightning's deepspeed strategies under bf16-mixed), the
 * constructor with a param_dtype: the parameters are cast to it (bfloat16) for forward and backward, and
 * this rank's chunks become master copies of their own in the dtype the parameters had (float32), which
 * the optimizer steps. Gradients reach them in the master dtype: DDP's reducer, built before the cast,
 * reduces the bfloat16 gradients in its float32 buckets (ZeRO-1: the chunks step from the buckets'
 * averages, ddp::Reducer::bucket_gradient, not from their bfloat16 copies in .grad); the sharded reducer
 * reduce-scatters them into float32 chunk gradients (ZeRO-2). After the step each master chunk is cast
 * into the parameter's memory and the parameters are all-gathered in bfloat16 (half the bytes). So the
 * chunks step exactly as ddp's float32 parameters under autocast do (autocast computes with bfloat16
 * copies of the same values). gather_all() gives the parameters whole in float32, the master values
 * (validation, checkpoints of the whole model, final weights); reshard() casts them back. Clip with
 * clip_grad_norm_ (the float32 gradients): under ZeRO-1 the step reads the averages, so a change made to
 * .grad in another way is not seen.
 *
 * Checkpoints hold the state whole, in the inner optimizer's own format: consolidate() (every rank) gathers
 * each state tensor's chunks into whole tensors on one rank, whose save() then writes exactly what that
 * optimizer writes in a DDP run; load() (every rank) reads such a state and keeps this rank's chunks of it.
 * So a checkpoint resumes with ddp or zero1 on any world size.
 *
 * The modes above are two choices made by the constructors, and step, clipping, checkpoints are written
 * once against them: where the chunk gradients come from (src/shard/zero_gradients.h: the all-reduced .grad,
 * DDP's float32 bucket averages, the ShardedReducer's chunks) and where the chunks live
 * (src/shard/zero_chunks.h: in the parameters' memory, gathered after a step; float32 masters over bfloat16
 * parameters; FSDP's shards).
 */
class ZeroOptimizer : public torch::optim::Optimizer, public ShardedParameters {
 public:
  /// `optimizer` was built over the model's parameters (configure_optimizers) and has no state yet. It is
  /// re-targeted to this rank's chunks (step this object from now on, not it). Every rank calls this with the
  /// same parameters, in the same order. With `gradients` (ZeRO-2; it must outlive this object) the chunks
  /// step from its chunk gradients instead of views of .grad. Throws std::invalid_argument naming the
  /// problem when the optimizer is null, already has state, or a parameter is not contiguous (or not one
  /// of the reducer's).
  ZeroOptimizer(std::shared_ptr<torch::optim::Optimizer> optimizer, comm::ProcessGroup& group,
                ShardedReducer* gradients = nullptr);
  /// Mixed precision (see above): the parameters are cast to `param_dtype` (narrower than their own dtype,
  /// which the master chunks keep). `gradients` is the DDP model's gradient_sync(), built before this call:
  /// its Reducer (ZeRO-1) or ShardedReducer (ZeRO-2); it must outlive this object. Throws
  /// std::invalid_argument naming the problem as the constructor above, and when param_dtype is not a
  /// floating-point dtype narrower than the parameters'.
  ZeroOptimizer(std::shared_ptr<torch::optim::Optimizer> optimizer, comm::ProcessGroup& group,
                ddp::GradientSync& gradients, at::ScalarType param_dtype);
  /// Where a parameter's chunk lives when the parameter's own memory does not hold it between steps.
  using ChunkSource = std::function<at::Tensor(const at::Tensor& param)>;
  /// FSDP's: the chunks are `chunks(param)` (this rank's Range of each parameter, kept by FSDP), their
  /// gradients come from `gradients`, and step() gathers nothing (FSDP gathers the parameters when they
  /// are used).
  ZeroOptimizer(std::shared_ptr<torch::optim::Optimizer> optimizer, comm::ProcessGroup& group,
                ShardedReducer& gradients, const ChunkSource& chunks);
  ~ZeroOptimizer() override;

  /// Steps this rank's chunks, then all-gathers every rank's (a collective: every rank steps together).
  /// A closure is not supported (LBFGS-style optimizers are not elementwise).
  at::Tensor step(LossClosure closure = nullptr) override;

  /// torch::nn::utils::clip_grad_norm_ (2-norm) over the gradients this optimizer steps from: under ZeRO-2
  /// and FSDP the chunk gradients (ShardedReducer::clip_grad_norm_: an all-reduce, every rank calls it),
  /// under ZeRO-1 with mixed precision the float32 averages (and their copies in .grad follow: changing .grad
  /// otherwise is not seen, as the step reads the averages), otherwise the parameters' .grad. Returns the
  /// norm.
  /// `others`: more parameters whose .grad counts in the norm and is clipped alike (an Accelerator's other
  /// models; not with ZeRO-2 or FSDP).
  double clip_grad_norm_(double max_norm, const std::vector<at::Tensor>& others = {});
  /// Mixed precision: the parameters whole in the master dtype (ShardedParameters; a collective). Without
  /// it the parameters are whole and in their dtype already: nothing to do.
  void gather_all() override;
  void reshard(bool from_parameters = false) override;
  /// The dtype the parameters compute in under mixed precision; nullopt without it.
  std::optional<at::ScalarType> param_dtype() const;

  /// Gathers the whole optimizer state onto rank `root` for save() (a collective: every rank calls it,
  /// between steps). Throws std::runtime_error naming the parameter when an optimizer's state is not
  /// elementwise (a state tensor not shaped like its chunk).
  void consolidate(int root = 0);
  /// On the rank that consolidate() gathered onto: the inner optimizer's own save() of the whole state.
  /// Elsewhere, or before consolidate(): std::logic_error.
  void save(torch::serialize::OutputArchive& archive) const override;
  /// Every rank: the inner optimizer's load() of a whole state (written by save(), or by the same optimizer
  /// in a DDP run), of which this rank keeps its chunks.
  void load(torch::serialize::InputArchive& archive) override;

  /// This rank's shard of a sharded checkpoint (shard_checkpoint.h): its chunks of the parameters and the
  /// inner optimizer's state. No collective, nothing gathered.
  void save_shard(torch::serialize::OutputArchive& archive) const;
  /// From the `shards` shards of a sharded checkpoint (written on any world size, read one at a time):
  /// this rank's chunks of the state, and the parameters whole (zero1, zero2: each rank reads every
  /// shard) or this rank's chunks of them (FSDP). No collective.
  void load_shards(int shards, const ShardReader& read);

  /// The optimizer stepping this rank's chunks.
  const torch::optim::Optimizer& inner() const { return *inner_; }
  /// Bytes of the inner optimizer's state tensors on this rank (optimizer_state_bytes), and under mixed
  /// precision of the master chunks.
  int64_t state_bytes() const;
  /// The elements of `numel` that chunk `rank` of `world` covers: [begin, begin + length) (ChunkLayout's).
  using Range = ChunkRange;
  static Range chunk(int64_t numel, int rank, int world) { return ChunkLayout::chunk(numel, rank, world); }

 private:
  /// The inner optimizer steps the chunks from now on.
  void shard(std::unique_ptr<detail::GradientSource> gradients, std::unique_ptr<detail::ChunkStore> chunks);
  /// The inner optimizer's options (what an archive held) become the outer param groups'.
  void take_inner_options();
  using StateMap = std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>;
  /// Runs `fn` with the inner optimizer pointed at the whole parameters and holding `whole` as its state
  /// (then puts the chunks and their state back).
  void with_whole_parameters(StateMap& whole, const std::function<void()>& fn) const;

  std::shared_ptr<torch::optim::Optimizer> inner_;
  comm::ProcessGroup* group_;
  std::unique_ptr<detail::GradientSource> gradients_;
  std::unique_ptr<detail::ChunkStore> chunks_;
  mutable StateMap consolidated_;  // the whole state, on the root of the last consolidate()
  int consolidated_root_ = -1;
};

/// Whether `model` is or holds a BatchNorm (LibTorch's BatchNorm1d/2d/3d). Its parameters stay float32 under
/// mixed precision, as its running statistics are (PyTorch's FSDP keeps BatchNorm in full precision): the
/// Trainer and the Accelerator give such a model no param_dtype under zero1/zero2, as FSDP keeps a unit
/// holding one in the master dtype.
bool holds_batch_norm(const torch::nn::Module& model);

/// The tensors an optimizer's per-parameter state holds, by the names its serialize() gives them (Adam:
/// exp_avg, exp_avg_sq, ...; OptimizerParamState has no other generic accessor).
std::vector<std::pair<std::string, at::Tensor>> state_tensors(const torch::optim::OptimizerParamState& state);
/// Bytes of every state tensor `optimizer` holds (state_tensors of each parameter's state).
int64_t optimizer_state_bytes(const torch::optim::Optimizer& optimizer);

}  // namespace lockstep::shard
