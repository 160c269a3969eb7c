// The reducer: see the block comment in include/lockstep/ddp/reducer.h.
#include "lockstep/ddp/reducer.h"

#include <ATen/ATen.h>
#include <ATen/TensorUtils.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Optional.h>
#include <torch/csrc/autograd/engine.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "lockstep/ddp/bucket.h"
#include "lockstep/ddp/timeline.h"
#include "lockstep/detail/join.h"

namespace lockstep::ddp {
namespace detail {

struct Bucket {
  at::Tensor buffer;              // flat, one dtype
  std::vector<size_t> params;     // parameter indices
  std::vector<at::Tensor> views;  // views[j]: buffer slice shaped like parameter params[j]
  size_t pending = 0;             // gradients still to arrive this iteration
  comm::Work work;
  bool launched = false;
  std::string label;  // "bucket 3 (1.00 MiB)"
};

struct ReducerState {
  std::vector<at::Tensor> params;
  std::vector<std::string> names;
  comm::ProcessGroup* group = nullptr;
  DdpOptions options;
  std::shared_ptr<CommHook> hook;
  std::vector<Bucket> buckets;
  std::vector<std::pair<size_t, size_t>> locate;  // param -> (bucket, slot)

  std::mutex mutex;
  bool sync = true;
  bool in_backward = false;  // a finalize callback is queued
  std::vector<char> ready;
  // Unused parameters (find_unused_parameters): which parameters got a gradient on this rank since the
  // last synchronised backward (no_sync passes included), summed over the ranks into used_map.
  std::vector<char> locally_used;
  at::Tensor used_host;               // kInt, one entry per parameter, on the CPU
  at::Tensor used_map;                // the same on the parameters' device (used_host itself on the CPU)
  std::vector<char> used;             // after the reduction: used on some rank
  std::vector<at::Tensor> kept_grad;  // view mode: an unused .grad's value, restored if unused everywhere
  std::vector<char> kept;             // kept_grad[i] holds this iteration's value
  std::vector<char> accumulated;      // a cast parameter's slot holds its no_sync gradients' sum
  size_t next_launch = 0;
  int64_t iterations = 0;
  double blocked_seconds = 0.0;              // this backward's thread in launch_ready_buckets so far
  std::atomic<double> exposed_seconds{0.0};  // the last finalize's wait for its collectives
  std::shared_ptr<Timeline> timeline;        // null unless LOCKSTEP_TIMELINE is set
  // The stream backward computes the gradients on (the forward's: a GPU's, a CUDA graph's capture stream),
  // seen in the first hook. The finalize callback may run in a thread whose current stream is another:
  // it waits for the collectives and writes .grad on this one, before which the optimizer runs.
  c10::optional<c10::Stream> backward_stream;

  void on_gradient(size_t index, const std::shared_ptr<ReducerState>& self);
  void launch_ready_buckets();
  void launch_ready_buckets_untimed();
  void finalize();
  void reset_iteration();
  void copy_into_bucket(size_t index);
  /// Whether parameter `index`'s .grad is its bucket slot (view mode, once aliased).
  bool grad_is_slot(size_t index) const;
  /// Whether parameter `index`'s .grad may be its bucket slot: view mode, and the parameter still has the
  /// buckets' dtype (a parameter cast after construction, e.g. to bfloat16 under ZeRO's mixed precision,
  /// is reduced in the dtype it had: its gradient is cast into the bucket and the average cast back).
  bool may_alias(size_t index) const;
  /// Whether parameter `index` was cast to another dtype than its bucket's since construction.
  bool is_cast(size_t index) const;
  /// no_sync, a cast parameter: its gradient added into its slot, in the bucket's dtype, and released.
  void accumulate_local(size_t index);
  void mark_unused_ready(const std::vector<size_t>& missing);
  /// Whether backward passes all-reduce the used-parameter map (find_unused_parameters, with parameters).
  bool reduces_used_map() const { return options.find_unused_parameters() && !params.empty(); }
  comm::Work launch_used_map(bool contribute);
  void read_used_map(comm::Work& used_work);
  void write_back(size_t index, bool used_somewhere);
};

void ReducerState::reset_iteration() {
  std::fill(ready.begin(), ready.end(), 0);
  for (auto& b : buckets) {
    b.pending = b.params.size();
    b.launched = false;
    b.work = comm::Work();
  }
  next_launch = 0;
  in_backward = false;
  std::fill(locally_used.begin(), locally_used.end(), 0);
  std::fill(kept.begin(), kept.end(), 0);
  std::fill(accumulated.begin(), accumulated.end(), 0);
}

bool ReducerState::grad_is_slot(size_t index) const {
  const at::Tensor& grad = params[index].grad();
  const auto [bucket, slot] = locate[index];
  return options.gradient_as_bucket_view() && grad.defined() &&
         grad.data_ptr() == buckets[bucket].views[slot].data_ptr();
}

bool ReducerState::may_alias(size_t index) const {
  return options.gradient_as_bucket_view() && !is_cast(index);
}

bool ReducerState::is_cast(size_t index) const {
  const auto [bucket, slot] = locate[index];
  return params[index].scalar_type() != buckets[bucket].views[slot].scalar_type();
}

void ReducerState::accumulate_local(size_t index) {
  at::Tensor& param = params[index];
  if (!param.grad().defined()) return;
  const auto [bucket, slot] = locate[index];
  at::Tensor& view = buckets[bucket].views[slot];
  if (accumulated[index]) {
    view.add_(param.grad());
  } else {
    view.copy_(param.grad());
    accumulated[index] = 1;
  }
  param.mutable_grad() = at::Tensor();  // the next micro-batch's gradient arrives alone
}

void ReducerState::copy_into_bucket(size_t index) {
  const auto [bucket, slot] = locate[index];
  at::Tensor& view = buckets[bucket].views[slot];
  at::Tensor& param = params[index];
  if (accumulated[index]) {  // the no_sync sum is in the slot already
    if (param.grad().defined()) view.add_(param.grad());
    return;
  }
  if (!param.grad().defined()) {
    view.zero_();  // contributes zeros; .grad stays undefined unless some rank used the parameter
    return;
  }
  if (grad_is_slot(index)) return;  // already in place
  view.copy_(param.grad());         // cast where the parameter's dtype is no longer the bucket's
  // In view mode .grad was replaced (e.g. set to none, then accumulated afresh): point it back at its slot.
  if (may_alias(index)) param.mutable_grad() = view;
}

// Timed: a backend may run a collective in the calling thread (shm when idle) or block until a peer
// arrives, and ZeRO-2 finishes the oldest bucket here: backward's thread is not computing meanwhile.
void ReducerState::launch_ready_buckets() {
  const auto start = std::chrono::steady_clock::now();
  launch_ready_buckets_untimed();
  blocked_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void ReducerState::launch_ready_buckets_untimed() {
  while (next_launch < buckets.size() && buckets[next_launch].pending == 0) {
    Bucket& b = buckets[next_launch];
    if (timeline) timeline->begin(b.label + " allreduce", 1);
    b.work = hook->run(*group, b.buffer).then({}, " of DDP's " + b.label);  // errors name the bucket
    if (timeline) {
      const std::string name = b.label + " allreduce";
      auto native = b.work.native();
      if (native) {
        std::shared_ptr<Timeline> t = timeline;
        native->getFuture()->addCallback([t, name](c10::ivalue::Future&) { t->end(name, 1); });
      }
    }
    b.launched = true;
    ++next_launch;
  }
}

void ReducerState::on_gradient(size_t index, const std::shared_ptr<ReducerState>& self) {
  std::lock_guard<std::mutex> lock(mutex);
  // Used on this rank since the last reduction, whether or not this backward synchronises (PyTorch's
  // local_used_map): a gradient accumulated under no_sync is reduced by the next synchronised backward.
  if (params[index].grad().defined()) locally_used[index] = 1;
  if (!sync) {
    if (is_cast(index)) accumulate_local(index);
    return;
  }
  if (!in_backward) {
    in_backward = true;
    blocked_seconds = 0.0;
    const c10::Device device = params[index].device();
    backward_stream.reset();
    if (!device.is_cpu()) backward_stream = c10::impl::VirtualGuardImpl(device.type()).getStream(device);
    if (timeline) timeline->begin("backward", 0);
    // Runs once this backward is over, before backward() returns.
    torch::autograd::Engine::get_default_engine().queue_callback([self] { self->finalize(); });
  }
  if (ready[index]) {
    // The same parameter's hook fired twice in one backward (the parameter is used by two graph
    // paths that autograd accumulates separately, or backward ran twice before the callback).
    return;
  }
  ready[index] = 1;
  copy_into_bucket(index);
  Bucket& b = buckets[locate[index].first];
  if (--b.pending == 0) {
    if (timeline) timeline->instant(b.label + " ready", 0);
    launch_ready_buckets();
  }
}

void ReducerState::mark_unused_ready(const std::vector<size_t>& missing) {
  for (size_t i : missing) {
    // Contributes its current .grad (zeros if none): what no_sync accumulated, or what the user left.
    // In view mode .grad is the bucket slot the all-reduce overwrites: keep its value, in case no rank
    // used the parameter and .grad must stay as it was.
    if (grad_is_slot(i)) {
      const at::Tensor& grad = params[i].grad();
      if (!kept_grad[i].defined()) kept_grad[i] = at::empty_like(grad);  // once per parameter
      kept_grad[i].copy_(grad);
      kept[i] = 1;
    }
    copy_into_bucket(i);
    ready[i] = 1;
    --buckets[locate[i].first].pending;
  }
}

comm::Work ReducerState::launch_used_map(bool contribute) {
  if (!reduces_used_map()) return comm::Work();
  int32_t* flags = used_host.data_ptr<int32_t>();
  for (size_t i = 0; i < locally_used.size(); ++i) flags[i] = contribute ? locally_used[i] : 0;
  if (!used_map.is_same(used_host)) used_map.copy_(used_host);
  return group->all_reduce(used_map).then({}, " of DDP's used-parameter map");
}

void ReducerState::read_used_map(comm::Work& used_work) {
  if (!reduces_used_map()) {
    std::fill(used.begin(), used.end(), 1);  // every parameter had a gradient on every rank
    return;
  }
  used_work.wait();
  if (!used_map.is_same(used_host)) used_host.copy_(used_map);
  const int32_t* counts = used_host.data_ptr<int32_t>();
  for (size_t i = 0; i < used.size(); ++i) used[i] = counts[i] > 0 ? 1 : 0;
}

void ReducerState::write_back(size_t index, bool used_somewhere) {
  const auto [bucket, slot] = locate[index];
  at::Tensor& view = buckets[bucket].views[slot];
  at::Tensor& param = params[index];
  if (!used_somewhere) {
    // No rank used it: .grad stays untouched (undefined stays undefined, an old value stays as it was).
    if (kept[index]) param.mutable_grad().copy_(kept_grad[index]);
    return;
  }
  if (may_alias(index)) {
    if (!param.grad().defined()) param.mutable_grad() = view;  // used elsewhere only
  } else if (param.grad().defined()) {
    param.mutable_grad().copy_(view);
  } else {
    param.mutable_grad() = view.to(param.scalar_type(), /*non_blocking=*/false, /*copy=*/true);
  }
}

void ReducerState::finalize() {
  std::lock_guard<std::mutex> lock(mutex);
  const c10::OptionalStreamGuard on_backward_stream(backward_stream);
  if (timeline) timeline->end("backward", 0);
  std::vector<size_t> missing;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!ready[i]) missing.push_back(i);
  }
  if (!missing.empty() && !options.find_unused_parameters()) {
    const std::string names_list =
        lockstep::detail::join_first(missing, 10, ", ", [&](size_t i) { return names[i]; });
    // Wait for what was launched so the group stays usable, then report.
    for (auto& b : buckets) {
      if (b.launched) {
        try {
          b.work.wait();
        } catch (...) {
        }
      }
    }
    reset_iteration();
    // A message for the user, not a LibTorch error: no C++ stack trace in it.
    throw std::runtime_error("lockstep DDP (rank " + std::to_string(group->rank()) +
                             "): these parameters received no gradient in this backward pass: " + names_list +
                             ". Every parameter must take part in the loss on every rank, or " +
                             options.unused_parameters_advice() + " to let a parameter go unused.");
  }
  mark_unused_ready(missing);
  launch_ready_buckets();
  TORCH_INTERNAL_ASSERT(next_launch == buckets.size(), "reducer: not every bucket was launched");
  comm::Work used_work = launch_used_map(/*contribute=*/true);  // after the buckets, on every rank
  const auto wait_start = std::chrono::steady_clock::now();
  for (auto& b : buckets) b.work.wait();
  read_used_map(used_work);
  exposed_seconds =
      blocked_seconds + std::chrono::duration<double>(std::chrono::steady_clock::now() - wait_start).count();
  for (size_t i = 0; i < params.size(); ++i) write_back(i, used[i] != 0);
  ++iterations;
  reset_iteration();
}

}  // namespace detail

Reducer::Reducer(std::vector<at::Tensor> parameters, std::vector<std::string> names,
                 comm::ProcessGroup& group, DdpOptions options)
    : state_(std::make_shared<detail::ReducerState>()) {
  options.validate();
  auto& s = *state_;
  TORCH_CHECK(parameters.size() == names.size(), "Reducer: ", parameters.size(), " parameters but ",
              names.size(), " names");
  s.params = std::move(parameters);
  s.names = std::move(names);
  s.group = &group;
  s.options = std::move(options);
  s.hook = s.options.comm_hook() ? s.options.comm_hook() : std::make_shared<AllReduceHook>();
  // By world rank: DDPs over the data-parallel groups of a DeviceMesh share their group ranks.
  const std::string timeline_path = Timeline::path_from_env(group.world_rank());
  if (!timeline_path.empty()) s.timeline = std::make_shared<Timeline>(timeline_path, group.world_rank());

  std::vector<int64_t> numels;
  std::vector<c10::ScalarType> dtypes;
  size_t gradient_bytes = 0;
  for (size_t i = 0; i < s.params.size(); ++i) {
    const auto& p = s.params[i];
    TORCH_CHECK(p.requires_grad(), "Reducer: parameter '", s.names[i], "' does not require grad");
    TORCH_CHECK(p.is_leaf(), "Reducer: parameter '", s.names[i], "' is not a leaf tensor");
    numels.push_back(p.numel());
    dtypes.push_back(p.scalar_type());
    gradient_bytes += p.nbytes();
  }
  // At least one byte, so that a tiny cap means "every parameter its own bucket".
  const auto mib = [](double m) { return std::max<size_t>(1, static_cast<size_t>(m * 1024.0 * 1024.0)); };
  const size_t cap_bytes =
      s.options.bucket_cap_mb() ? mib(*s.options.bucket_cap_mb()) : auto_bucket_cap_bytes(gradient_bytes);
  const auto assignment = assign_buckets(numels, dtypes, mib(s.options.first_bucket_cap_mb()), cap_bytes);

  s.locate.resize(s.params.size());
  for (size_t b = 0; b < assignment.buckets.size(); ++b) {
    detail::Bucket bucket;
    bucket.params = assignment.buckets[b];
    int64_t total = 0;
    for (size_t i : bucket.params) total += s.params[i].numel();
    const auto& first = s.params[bucket.params.front()];
    // Shared memory with the shm backend: the all-reduce then reads and writes the buckets in place.
    bucket.buffer = group.new_comm_buffer(total, first.options().requires_grad(false));
    int64_t offset = 0;
    for (size_t j = 0; j < bucket.params.size(); ++j) {
      const size_t i = bucket.params[j];
      const int64_t n = s.params[i].numel();
      // Shares the bucket's storage without being an autograd view, so that .grad can be this tensor
      // (gradient_as_bucket_view) and the optimizer's zero_grad() may still detach_() it.
      at::Tensor slot = at::empty({0}, bucket.buffer.options());
      const std::vector<int64_t> strides = at::detail::defaultStrides(s.params[i].sizes());
      slot.set_(bucket.buffer.storage(), bucket.buffer.storage_offset() + offset, s.params[i].sizes(),
                strides);
      bucket.views.push_back(slot);
      s.locate[i] = {b, j};
      offset += n;
    }
    std::ostringstream label;
    label << "bucket " << b << " (" << static_cast<double>(bucket.buffer.nbytes()) / (1024.0 * 1024.0)
          << " MiB)";
    bucket.label = label.str();
    s.buckets.push_back(std::move(bucket));
  }
  if (s.options.gradient_as_bucket_view()) {
    // Only gradients that exist become views: an undefined .grad stays undefined, as in one process
    // (SGD's weight decay and Adam skip a parameter without a gradient).
    for (size_t i = 0; i < s.params.size(); ++i) {
      if (!s.params[i].grad().defined()) continue;
      const auto [b, j] = s.locate[i];
      auto& view = s.buckets[b].views[j];
      view.copy_(s.params[i].grad());
      s.params[i].mutable_grad() = view;
    }
  }
  s.ready.assign(s.params.size(), 0);
  s.locally_used.assign(s.params.size(), 0);
  s.used.assign(s.params.size(), 1);
  s.kept_grad.resize(s.params.size());
  s.kept.assign(s.params.size(), 0);
  s.accumulated.assign(s.params.size(), 0);
  if (s.reduces_used_map()) {
    const auto count = static_cast<int64_t>(s.params.size());
    s.used_host = at::zeros({count}, at::TensorOptions().dtype(at::kInt));
    const auto device = s.params.front().device();
    s.used_map = device.is_cpu() ? s.used_host
                                 : at::zeros({count}, at::TensorOptions().dtype(at::kInt).device(device));
  }
  s.reset_iteration();

  // Hooks last: nothing can fire before the buckets exist.
  hooks_ = std::make_unique<GradHooks>(s.params, [weak = std::weak_ptr(state_)](size_t index) {
    if (auto state = weak.lock()) state->on_gradient(index, state);
  });
}

Reducer::~Reducer() = default;  // the hooks go first: the timeline flushes when its last owner lets go

size_t Reducer::refresh_hooks() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return hooks_->refresh();
}

void Reducer::set_sync(bool sync) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->sync = sync;
}

bool Reducer::sync() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->sync;
}

std::vector<std::vector<size_t>> Reducer::bucket_indices() const {
  std::vector<std::vector<size_t>> out;
  for (const auto& b : state_->buckets) out.push_back(b.params);
  return out;
}

size_t Reducer::bucket_bytes() const {
  size_t total = 0;
  for (const auto& b : state_->buckets) total += b.buffer.nbytes();
  return total;
}

int64_t Reducer::iterations() const {
  return state_->iterations;
}

int64_t Reducer::index_of(const at::Tensor& param) const {
  const auto& params = state_->params;
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].unsafeGetTensorImpl() == param.unsafeGetTensorImpl()) return static_cast<int64_t>(i);
  }
  return -1;
}

at::Tensor Reducer::bucket_gradient(size_t index) const {
  TORCH_CHECK(index < state_->params.size(), "Reducer::bucket_gradient: no parameter ", index, " (",
              state_->params.size(), " in all)");
  const auto [bucket, slot] = state_->locate[index];
  return state_->buckets[bucket].views[slot];
}

double Reducer::exposed_seconds() const {
  return state_->exposed_seconds;
}

void Reducer::reduce_zeros() {
  auto& s = *state_;
  std::lock_guard<std::mutex> lock(s.mutex);
  TORCH_CHECK(!s.in_backward, "Reducer::reduce_zeros() called during a backward pass");
  for (auto& b : s.buckets) {
    b.buffer.zero_();
    s.hook->run(*s.group, b.buffer).wait();
  }
  if (s.reduces_used_map()) s.launch_used_map(/*contribute=*/false).wait();  // used by none here
  // The result (the others' mean) is discarded: a joined rank does not step. With
  // gradient_as_bucket_view the buffers are .grad, so clear them again.
  for (auto& b : s.buckets) b.buffer.zero_();
  std::fill(s.accumulated.begin(), s.accumulated.end(), 0);  // no no_sync sum survives in them
}

}  // namespace lockstep::ddp
