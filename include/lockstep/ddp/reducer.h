#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "lockstep/comm/process_group.h"
#include "lockstep/ddp/ddp_options.h"
#include "lockstep/ddp/grad_hooks.h"
#include "lockstep/ddp/gradient_sync.h"

namespace lockstep::ddp {

namespace detail {
struct ReducerState;
}

/*
 * The reducer: gradient averaging that overlaps with backward.
 *
 * At construction each parameter's AccumulateGrad node gets a post-hook (GradHooks). During backward,
 * when autograd has accumulated parameter p's gradient, the hook copies p.grad into
 * p's slice of its bucket (or, with gradient_as_bucket_view, p.grad already *is* that slice) and counts
 * the bucket down; a bucket whose last gradient arrived is handed to the comm hook — an asynchronous
 * all-reduce — while backward goes on computing earlier layers. Buckets go out strictly in bucket order
 * on every rank. The first hook of a backward also queues an engine callback, which runs when the
 * backward is over, before backward() returns: it reports the parameters that got no gradient, or with
 * find_unused_parameters marks them ready with their current .grad (zeros if none); launches what is
 * left, waits for every bucket in order, and writes the averaged gradients back into .grad. The user
 * calls nothing extra.
 *
 * Unused parameters follow PyTorch's reducer. Each rank records which parameters got a gradient since
 * the last reduction (no_sync passes included); with find_unused_parameters that map is summed over the
 * ranks after the last bucket. A parameter used on some rank gets the average like any other (ranks
 * that did not use it contribute zeros, or what their .grad held); a parameter no rank used keeps its
 * .grad untouched — undefined stays undefined, an old value stays as it was — so weight decay, momentum
 * and Adam leave it exactly as one process would.
 *
 * A parameter cast to another dtype after construction (ZeroOptimizer's bfloat16 parameters) is still
 * reduced in the dtype it had: its gradient is cast into the bucket, averaged there, and cast back into
 * .grad (never a view of the bucket then); bucket_gradient() gives the average before that cast. Under
 * no_sync its gradients sum in the bucket too, in the wider dtype (as a float32 .grad sums them under
 * autocast): each micro-batch's gradient is added into its slot and .grad released, so between the
 * micro-batches such a parameter has no .grad; the synchronised backward adds its own and reduces the sum.
 *
 * Inside a no_sync() scope the hooks do nothing (but sum a cast parameter's gradient, above): gradients
 * accumulate locally in .grad, and the next synchronised backward reduces the accumulated sum.
 *
 * Steady state allocates nothing per step: buckets, views and works are reused.
 */
class Reducer : public GradientSync {
 public:
  /// `parameters` in registration order with their `names`. The group must outlive the reducer.
  Reducer(std::vector<at::Tensor> parameters, std::vector<std::string> names, comm::ProcessGroup& group,
          DdpOptions options);
  ~Reducer() override;
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  /// When false (no_sync), backward passes leave gradients local.
  void set_sync(bool sync) override;
  bool sync() const override;

  /// Parameter indices per bucket, in bucket (= launch) order.
  std::vector<std::vector<size_t>> bucket_indices() const;
  /// Bytes held by the buckets (the reducer's extra gradient memory; shared with .grad in view mode).
  size_t bucket_bytes() const override;
  /// Synchronised backward passes completed.
  int64_t iterations() const;

  /// Index of `param` among the reducer's parameters; -1 when it is not one of them.
  int64_t index_of(const at::Tensor& param) const;
  /// Parameter `index`'s slot in its bucket, in the buckets' dtype (the parameters' when the reducer was
  /// built): after a synchronised backward it holds the averaged gradient, which .grad holds too (cast to
  /// the parameter's dtype where that changed since: ZeRO's mixed precision reads the float32 average
  /// here), until the next backward (a no_sync one sums a cast parameter's gradient into it).
  at::Tensor bucket_gradient(size_t index) const;

  /// For a rank that has joined (run out of inputs): takes part in one backward's bucket all-reduces
  /// with zero gradients, in bucket order, so the ranks still training are matched. Blocking.
  void reduce_zeros() override;

  /// Moves the gradient hooks to parameters' new gradient accumulators, if any were replaced (else a
  /// reloaded model would silently skip its all-reduce): GradHooks::refresh.
  size_t refresh_hooks() override;
  double exposed_seconds() const override;

 private:
  std::shared_ptr<detail::ReducerState> state_;
  std::unique_ptr<GradHooks> hooks_;
};

}  // namespace lockstep::ddp
