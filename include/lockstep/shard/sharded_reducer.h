#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "lockstep/comm/process_group.h"
#include "lockstep/ddp/ddp_options.h"
#include "lockstep/ddp/grad_hooks.h"
#include "lockstep/ddp/gradient_sync.h"

namespace lockstep::shard {

namespace detail {
struct ShardedReducerState;
}

/*
 * ZeRO stage 2's gradient path: gradients reduce-scattered during backward, so that after it each rank
 * holds only its chunk (ChunkLayout::chunk) of every averaged gradient.
 *
 * Buckets are filled by DDP's gradient-ready hooks (ddp::GradHooks) and sent in one strict order, each as
 * soon as its last gradient has arrived, so the reduce-scatters overlap backward as DDP's all-reduces do.
 * What a bucket sends is a ChunkLayout of its parameters (chunk_layout.h): rank r's row holds chunk r of
 * each, so a reduce-scatter of the bucket leaves in each rank's output exactly its chunks of the averaged
 * gradients. A parameter whose size divides by the world is laid out so already: one of at least 64 KiB gets
 * a bucket of its own and its .grad is sent as it is, without a copy. The other parameters are packed (from
 * the last to the first, DDP's bucket caps: ddp/bucket.h) into a staging tensor made when the bucket goes
 * out.
 *
 * Full gradients do not outlive their reduction. At most kInFlight buckets are in flight: launching one
 * more first finishes the oldest, and finishing a bucket releases its parameters' .grad (undefined) and its
 * staging tensor. So backward holds few full gradients at once besides those autograd is still producing,
 * and between steps a rank holds, per fp32 parameter with Adam, 4 bytes of parameter, 4/N of gradient chunk
 * and 8/N of ZeroOptimizer's state: ZeRO-2's arithmetic (0.44x DDP's 16 bytes at N = 4).
 *
 * The chunk gradients live here; ZeroOptimizer (built with this reducer) steps them. A synchronised
 * backward writes them, or adds to them while they hold a value not yet consumed (two backward passes
 * without a step sum, as .grad does); ZeroOptimizer::step consumes them; clear() drops them (a skipped
 * step). Gradient clipping needs the global norm over every rank's chunks: clip_grad_norm_.
 *
 * no_sync: the hooks do nothing and gradients accumulate in .grad, full size, until the next synchronised
 * backward reduce-scatters the sum (DDP's gradient accumulation). A parameter in a narrower dtype than the
 * chunk gradients (mixed precision: bfloat16 over float32) sums them in the wider one instead, as a
 * float32 .grad does under autocast: each micro-batch's gradient is added into a full-size accumulator
 * and .grad released (between the micro-batches such a parameter has no .grad); the synchronised backward
 * adds its own and sends the sum. Every trainable parameter must get a
 * gradient in every synchronised backward (find_unused_parameters and comm hooks are not supported).
 */
class ShardedReducer : public ddp::GradientSync {
 public:
  /// Buckets in flight at once (see above).
  static constexpr size_t kInFlight = 2;

  /// `parameters` (one dtype, on one device) in registration order with their `names`; the bucket caps
  /// of `options`. The group must outlive the reducer. Collective (it allocates comm buffers).
  ShardedReducer(std::vector<at::Tensor> parameters, std::vector<std::string> names,
                 comm::ProcessGroup& group, const ddp::DdpOptions& options);
  /// FSDP's: the buckets are `buckets` (parameter indices, in the order backward completes them: one per
  /// unit).
  ShardedReducer(std::vector<at::Tensor> parameters, std::vector<std::string> names,
                 comm::ProcessGroup& group, std::vector<std::vector<size_t>> buckets);
  ~ShardedReducer() override;
  ShardedReducer(const ShardedReducer&) = delete;
  ShardedReducer& operator=(const ShardedReducer&) = delete;

  /// For DdpOptions::gradient_sync: DDP with this reducer instead of the all-reduce.
  static ddp::GradientSyncFactory factory();

  void set_sync(bool sync) override;
  bool sync() const override;
  /// The chunk gradients (whole chunks: ceil(numel / N) elements of each parameter).
  size_t bucket_bytes() const override;
  void reduce_zeros() override;
  size_t refresh_hooks() override;
  double exposed_seconds() const override;

  /// Index of `param` among the reducer's parameters; -1 when it is not one of them.
  int64_t index_of(const at::Tensor& param) const;
  /// This rank's chunk of parameter `index`'s averaged gradient from the synchronised backward passes
  /// since the last clear(); undefined when there is none.
  at::Tensor gradient(size_t index) const;
  /// Drops the chunk gradients (ZeroOptimizer::step has consumed them, or the step is skipped).
  void clear();
  /// torch::nn::utils::clip_grad_norm_ over the sharded gradients: the 2-norm of all of them, every rank's
  /// chunks together (an all-reduce: every rank calls it), and the chunks scaled by
  /// max_norm / (norm + 1e-6) when that is below 1. Returns the norm.
  double clip_grad_norm_(double max_norm);

  /// Parameter indices per bucket, in bucket (= launch) order.
  std::vector<std::vector<size_t>> bucket_indices() const;
  /// Synchronised backward passes completed.
  int64_t iterations() const;

 private:
  void init(std::vector<at::Tensor> parameters, std::vector<std::string> names, comm::ProcessGroup& group);
  void install_hooks();

  std::shared_ptr<detail::ShardedReducerState> state_;
  std::unique_ptr<ddp::GradHooks> hooks_;
};

}  // namespace lockstep::shard
