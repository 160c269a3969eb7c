// ZeRO-2's gradient path: see the block comment in include/lockstep/shard/sharded_reducer.h.
#include "lockstep/shard/sharded_reducer.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/engine.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include "lockstep/ddp/bucket.h"
#include "lockstep/detail/join.h"
#include "lockstep/shard/chunk_layout.h"

namespace lockstep::shard {
namespace detail {

std::string bucket_label(size_t b, int64_t elements, const at::Tensor& like) {
  std::ostringstream label;
  label << "bucket " << b << " ("
        << static_cast<double>(elements) * static_cast<double>(like.element_size()) / (1024.0 * 1024.0)
        << " MiB)";
  return label.str();
}

struct ShardBucket {
  std::vector<size_t> params;  // its members' indices, in `layout`'s order
  ChunkLayout layout;          // what it sends: a row of layout.part() elements per rank
  int64_t shard_offset = 0;    // where this rank's row sits in the chunk gradients
  bool direct = false;         // one parameter whose size divides by the world: its .grad is sent
  std::string label;           // "bucket 3 (1.00 MiB)"
  size_t pending = 0;          // gradients still to arrive this iteration
  // While in flight:
  comm::Work work;
  at::Tensor input;   // the .grad sent, or a staging buffer
  at::Tensor output;  // this rank's part of the chunk gradients, or scratch to add to them
  bool accumulate = false;
};

struct ShardedReducerState {
  std::vector<at::Tensor> params;
  std::vector<std::string> names;
  std::unordered_map<const void*, size_t> index;  // TensorImpl -> parameter index
  comm::ProcessGroup* group = nullptr;
  std::vector<ShardBucket> buckets;
  std::vector<size_t> locate;           // param -> bucket
  at::Tensor shards;                    // this rank's part of every bucket, bucket after bucket
  std::vector<at::Tensor> chunk_grads;  // per param: its chunk within `shards`
  std::vector<at::Tensor> accumulated;  // per cast param: its no_sync gradients' sum in the shards' dtype

  std::mutex mutex;
  bool sync = true;
  bool in_backward = false;
  bool holds_value = false;  // chunk_grads hold gradients not yet consumed
  std::vector<char> ready;
  size_t next_launch = 0;
  size_t next_finish = 0;
  int64_t iterations = 0;
  double blocked_seconds = 0.0;              // this backward's thread in launch_ready_buckets so far
  std::atomic<double> exposed_seconds{0.0};  // the last finalize's wait for its reduce-scatters

  void on_gradient(size_t index, const std::shared_ptr<ShardedReducerState>& self);
  /// no_sync, a parameter cast to a narrower dtype than the shards' (mixed precision): its gradient added
  /// into its accumulator, in the shards' dtype, and released.
  void accumulate_local(size_t index);
  /// What is sent for parameter `index`: its .grad, plus what no_sync accumulated.
  at::Tensor sent_gradient(size_t index);
  void launch_ready_buckets();
  void launch_ready_buckets_untimed();
  void launch(size_t b);
  void pack(ShardBucket& bucket, at::Tensor& staging);
  /// DDP-like buckets for `options`' caps (the parameters' indices per bucket, in launch order).
  std::vector<std::vector<size_t>> plan_buckets(const ddp::DdpOptions& options) const;
  void lay_out(const std::vector<std::vector<size_t>>& planned);
  void finish(size_t b);
  void finalize();
  void reset_iteration();
};

void ShardedReducerState::reset_iteration() {
  std::fill(ready.begin(), ready.end(), 0);
  for (auto& b : buckets) {
    b.pending = b.params.size();
    b.work = comm::Work();
    b.input = b.output = at::Tensor();
  }
  next_launch = next_finish = 0;
  in_backward = false;
  // Sent and released by the buckets that finished; after a failed backward, dropped with the rest.
  for (auto& sum : accumulated) sum = at::Tensor();
}

void ShardedReducerState::accumulate_local(size_t index) {
  at::Tensor& param = params[index];
  if (param.scalar_type() == shards.scalar_type() || !param.grad().defined()) return;
  at::Tensor& sum = accumulated[index];
  if (sum.defined()) {
    sum.add_(param.grad());
  } else {
    sum = param.grad().to(shards.scalar_type(), /*non_blocking=*/false, /*copy=*/true);
  }
  param.mutable_grad() = at::Tensor();  // the next micro-batch's gradient arrives alone
}

at::Tensor ShardedReducerState::sent_gradient(size_t index) {
  const at::Tensor& grad = params[index].grad();
  at::Tensor& sum = accumulated[index];
  return sum.defined() ? sum.add_(grad) : grad;
}

void ShardedReducerState::on_gradient(size_t index, const std::shared_ptr<ShardedReducerState>& self) {
  std::lock_guard<std::mutex> lock(mutex);
  if (!sync) {
    accumulate_local(index);
    return;
  }
  if (!in_backward) {
    in_backward = true;
    blocked_seconds = 0.0;
    // Runs once this backward is over, before backward() returns.
    torch::autograd::Engine::get_default_engine().queue_callback([self] { self->finalize(); });
  }
  if (ready[index]) return;  // the hook fired twice in one backward (see ddp::Reducer)
  ready[index] = 1;
  if (--buckets[locate[index]].pending == 0) launch_ready_buckets();
}

// Timed: a backend may run a collective in the calling thread (shm when idle) or block until a peer
// arrives, and ZeRO-2 finishes the oldest bucket here: backward's thread is not computing meanwhile.
void ShardedReducerState::launch_ready_buckets() {
  const auto start = std::chrono::steady_clock::now();
  launch_ready_buckets_untimed();
  blocked_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void ShardedReducerState::launch_ready_buckets_untimed() {
  while (next_launch < buckets.size() && buckets[next_launch].pending == 0) {
    while (next_launch - next_finish >= ShardedReducer::kInFlight) finish(next_finish++);
    launch(next_launch++);
  }
}

// Rank r's row of `staging` receives chunk r of each member's gradient.
void ShardedReducerState::pack(ShardBucket& bucket, at::Tensor& staging) {
  for (size_t j = 0; j < bucket.params.size(); ++j)
    bucket.layout.pack(staging, j, sent_gradient(bucket.params[j]).reshape({-1}));
}

void ShardedReducerState::launch(size_t b) {
  ShardBucket& bucket = buckets[b];
  if (bucket.direct) {
    const at::Tensor grad = sent_gradient(bucket.params.front());
    if (grad.scalar_type() != shards.scalar_type()) {  // FSDP's mixed precision: reduced in the shards' dtype
      bucket.input = grad.to(shards.scalar_type()).view({-1});
    } else {
      bucket.input = grad.is_contiguous() ? grad.view({-1}) : grad.contiguous().view({-1});
    }
  } else {
    bucket.input = at::empty({group->size() * bucket.layout.part()}, shards.options());
    pack(bucket, bucket.input);
  }
  bucket.accumulate = holds_value;
  bucket.output = bucket.accumulate ? at::empty({bucket.layout.part()}, shards.options())
                                    : shards.narrow(0, bucket.shard_offset, bucket.layout.part());
  bucket.work = group->reduce_scatter(bucket.output, bucket.input, comm::ReduceOp::kAvg)
                    .then({}, " of ZeRO-2's " + bucket.label);  // errors name the bucket
}

void ShardedReducerState::finish(size_t b) {
  ShardBucket& bucket = buckets[b];
  bucket.work.wait();
  if (bucket.accumulate) shards.narrow(0, bucket.shard_offset, bucket.layout.part()).add_(bucket.output);
  for (size_t i : bucket.params) {  // reduced: the full ones go
    params[i].mutable_grad() = at::Tensor();
    accumulated[i] = at::Tensor();
  }
  bucket.input = bucket.output = at::Tensor();
  bucket.work = comm::Work();
}

// A parameter this large whose size divides by the world is a bucket of its own, sent from its .grad: a
// smaller one costs less packed with others (a copy) than in a collective of its own (measured on W1,
// docs/benchmarks.md: with kDirectBytes here zero2 ran 3 reduce-scatters a step where DDP runs 1 all-reduce).
constexpr int64_t kOwnBucketBytes = int64_t{1} << 20;

// From the last parameter to the first (the order autograd produces gradients in): a parameter of at least
// kOwnBucketBytes whose size divides by the world gets a bucket of its own, sent straight from its .grad;
// the others are packed, up to the first bucket's cap, then the later buckets' (DDP's caps, bucket.h).
std::vector<std::vector<size_t>> ShardedReducerState::plan_buckets(const ddp::DdpOptions& options) const {
  const int world = group->size();
  size_t gradient_bytes = 0;
  for (const at::Tensor& p : params) gradient_bytes += p.nbytes();
  const auto mib = [](double m) { return std::max<size_t>(1, static_cast<size_t>(m * 1024.0 * 1024.0)); };
  const size_t cap =
      options.bucket_cap_mb() ? mib(*options.bucket_cap_mb()) : ddp::auto_bucket_cap_bytes(gradient_bytes);
  const size_t first_cap = mib(options.first_bucket_cap_mb());
  std::vector<std::vector<size_t>> planned;
  size_t open_bytes = 0;
  bool open = false;  // the last planned bucket takes more parameters
  for (size_t k = params.size(); k-- > 0;) {
    const at::Tensor& p = params[k];
    if (p.numel() % world == 0 && static_cast<int64_t>(p.nbytes()) >= kOwnBucketBytes) {
      planned.push_back({k});
      open = false;
      continue;
    }
    const size_t bucket_cap = planned.empty() || (planned.size() == 1 && open) ? first_cap : cap;
    if (!open || (open_bytes > 0 && open_bytes + p.nbytes() > bucket_cap)) {
      planned.emplace_back();
      open = true;
      open_bytes = 0;
    }
    planned.back().push_back(k);
    open_bytes += p.nbytes();
  }
  return planned;
}

// Each bucket is a ChunkLayout of its parameters; this rank's rows of all the buckets lie one after the other
// in `shards`.
void ShardedReducerState::lay_out(const std::vector<std::vector<size_t>>& planned) {
  const int world = group->size();
  std::vector<char> placed(params.size(), 0);
  for (const auto& bucket : planned) {
    TORCH_CHECK(!bucket.empty(), "ShardedReducer: an empty bucket");
    for (size_t i : bucket) {
      TORCH_CHECK(i < params.size() && !placed[i], "ShardedReducer: parameter #", i,
                  " is not one of the parameters, or in two buckets");
      placed[i] = 1;
    }
  }
  TORCH_CHECK(std::count(placed.begin(), placed.end(), 1) == static_cast<std::ptrdiff_t>(params.size()),
              "ShardedReducer: the buckets leave parameters out");
  locate.resize(params.size());
  int64_t shard_elements = 0;
  for (size_t b = 0; b < planned.size(); ++b) {
    ShardBucket bucket;
    bucket.params = planned[b];
    std::vector<int64_t> numels;
    for (size_t i : bucket.params) {
      numels.push_back(params[i].numel());
      locate[i] = b;
    }
    bucket.layout = ChunkLayout(std::move(numels), world);
    const at::Tensor& first = params[bucket.params.front()];
    bucket.direct = bucket.params.size() == 1 && first.numel() % world == 0;
    bucket.shard_offset = shard_elements;
    shard_elements += bucket.layout.part();
    bucket.label = bucket_label(b, bucket.layout.part() * world, first);
    buckets.push_back(std::move(bucket));
  }
  const at::TensorOptions like =
      params.empty() ? at::TensorOptions().dtype(at::kFloat) : params.front().options().requires_grad(false);
  shards = at::zeros({shard_elements}, like);
}

void ShardedReducerState::finalize() {
  std::lock_guard<std::mutex> lock(mutex);
  std::vector<size_t> missing;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!ready[i]) missing.push_back(i);
  }
  if (!missing.empty()) {
    const std::string names_list =
        lockstep::detail::join_first(missing, 10, ", ", [&](size_t i) { return names[i]; });
    for (size_t b = next_finish; b < next_launch; ++b) {  // leave the group usable
      try {
        buckets[b].work.wait();
      } catch (...) {
      }
    }
    reset_iteration();
    // A message for the user, not a LibTorch error: no C++ stack trace in it.
    throw std::runtime_error(
        "lockstep ZeRO-2 (rank " + std::to_string(group->rank()) +
        "): these parameters received no gradient in this backward pass: " + names_list +
        ". Every trainable parameter must take part in the loss on every rank with a sharded strategy "
        "(freeze the others: requires_grad false), or train with strategy ddp and find_unused_parameters.");
  }
  TORCH_INTERNAL_ASSERT(next_launch == buckets.size(), "ZeRO-2 reducer: not every bucket was launched");
  const auto wait_start = std::chrono::steady_clock::now();
  while (next_finish < buckets.size()) finish(next_finish++);
  exposed_seconds =
      blocked_seconds + std::chrono::duration<double>(std::chrono::steady_clock::now() - wait_start).count();
  holds_value = true;
  ++iterations;
  reset_iteration();
}

}  // namespace detail

namespace {

void check_options(const ddp::DdpOptions& options) {
  if (options.find_unused_parameters()) {
    throw std::invalid_argument(
        "ZeRO-2 (ShardedReducer): find_unused_parameters is not supported: every trainable parameter must "
        "get "
        "a gradient in every step; use strategy ddp or zero1 for a model with unused parameters");
  }
  if (options.comm_hook()) {
    throw std::invalid_argument(
        std::string("ZeRO-2 (ShardedReducer): the comm hook '") + options.comm_hook()->name() +
        "' is not supported (gradients are reduce-scattered, not all-reduced): drop it, "
        "or use strategy ddp or zero1");
  }
}

}  // namespace

ShardedReducer::ShardedReducer(std::vector<at::Tensor> parameters, std::vector<std::string> names,
                               comm::ProcessGroup& group, const ddp::DdpOptions& options)
    : state_(std::make_shared<detail::ShardedReducerState>()) {
  options.validate();
  check_options(options);
  init(std::move(parameters), std::move(names), group);
  state_->lay_out(state_->plan_buckets(options));
  install_hooks();
}

ShardedReducer::ShardedReducer(std::vector<at::Tensor> parameters, std::vector<std::string> names,
                               comm::ProcessGroup& group, std::vector<std::vector<size_t>> buckets)
    : state_(std::make_shared<detail::ShardedReducerState>()) {
  init(std::move(parameters), std::move(names), group);
  state_->lay_out(buckets);
  install_hooks();
}

void ShardedReducer::init(std::vector<at::Tensor> parameters, std::vector<std::string> names,
                          comm::ProcessGroup& group) {
  auto& s = *state_;
  TORCH_CHECK(parameters.size() == names.size(), "ShardedReducer: ", parameters.size(), " parameters but ",
              names.size(), " names");
  s.params = std::move(parameters);
  s.names = std::move(names);
  s.group = &group;
  for (size_t i = 0; i < s.params.size(); ++i) {
    const at::Tensor& p = s.params[i];
    TORCH_CHECK(p.requires_grad() && p.is_leaf(), "ShardedReducer: parameter '", s.names[i],
                "' must be a leaf that requires grad");
    const at::Tensor& first = s.params.front();
    if (p.scalar_type() != first.scalar_type() || p.device() != first.device()) {
      throw std::invalid_argument("ShardedReducer: parameter '" + s.names[i] + "' is " +
                                  c10::toString(p.scalar_type()) + " on " + p.device().str() + ", '" +
                                  s.names.front() + "' " + c10::toString(first.scalar_type()) + " on " +
                                  first.device().str() + ": shard one dtype on one device");
    }
    s.index[p.unsafeGetTensorImpl()] = i;
  }
}

void ShardedReducer::install_hooks() {
  auto& s = *state_;
  s.chunk_grads.resize(s.params.size());
  s.accumulated.resize(s.params.size());
  for (const detail::ShardBucket& bucket : s.buckets) {
    const at::Tensor row = s.shards.narrow(0, bucket.shard_offset, bucket.layout.part());
    for (size_t j = 0; j < bucket.params.size(); ++j)
      s.chunk_grads[bucket.params[j]] = bucket.layout.chunk_in(row, j, s.group->rank());
  }
  s.ready.assign(s.params.size(), 0);
  s.reset_iteration();
  // Hooks last: nothing can fire before the buckets exist.
  hooks_ = std::make_unique<ddp::GradHooks>(s.params, [weak = std::weak_ptr(state_)](size_t index) {
    if (auto state = weak.lock()) state->on_gradient(index, state);
  });
}

ShardedReducer::~ShardedReducer() = default;

ddp::GradientSyncFactory ShardedReducer::factory() {
  return [](std::vector<at::Tensor> parameters, std::vector<std::string> names, comm::ProcessGroup& group,
            const ddp::DdpOptions& options) -> std::unique_ptr<ddp::GradientSync> {
    return std::make_unique<ShardedReducer>(std::move(parameters), std::move(names), group, options);
  };
}

void ShardedReducer::set_sync(bool sync) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->sync = sync;
}

bool ShardedReducer::sync() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->sync;
}

size_t ShardedReducer::bucket_bytes() const {
  return state_->shards.nbytes();
}

void ShardedReducer::reduce_zeros() {
  auto& s = *state_;
  std::lock_guard<std::mutex> lock(s.mutex);
  TORCH_CHECK(!s.in_backward, "ShardedReducer::reduce_zeros() called during a backward pass");
  for (auto& sum : s.accumulated) sum = at::Tensor();  // a joined rank sends zeros, not what it summed
  for (auto& bucket : s.buckets) {
    at::Tensor zeros = at::zeros({bucket.layout.part() * s.group->size()}, s.shards.options());
    at::Tensor discard =
        at::empty({bucket.layout.part()}, s.shards.options());  // a joined rank does not step
    s.group->reduce_scatter(discard, zeros, comm::ReduceOp::kAvg)
        .then({}, " of ZeRO-2's " + bucket.label)
        .wait();
  }
}

size_t ShardedReducer::refresh_hooks() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return hooks_->refresh();
}

int64_t ShardedReducer::index_of(const at::Tensor& param) const {
  const auto found = state_->index.find(param.unsafeGetTensorImpl());
  return found == state_->index.end() ? -1 : static_cast<int64_t>(found->second);
}

at::Tensor ShardedReducer::gradient(size_t index) const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->holds_value ? state_->chunk_grads.at(index) : at::Tensor();
}

void ShardedReducer::clear() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->holds_value = false;
}

double ShardedReducer::clip_grad_norm_(double max_norm) {
  auto& s = *state_;
  std::lock_guard<std::mutex> lock(s.mutex);
  at::Tensor squares = at::zeros({1}, s.shards.options().dtype(at::kDouble));
  if (s.holds_value) {
    for (const at::Tensor& chunk : s.chunk_grads) {
      if (chunk.numel() > 0) squares.add_(chunk.to(at::kDouble).pow(2).sum());
    }
  }
  s.group->all_reduce(squares).then({}, " of ZeRO-2's gradient norm").wait();
  const double norm = std::sqrt(squares.item<double>());
  const double coefficient = max_norm / (norm + 1e-6);
  if (coefficient < 1.0 && s.holds_value) s.shards.mul_(coefficient);
  return norm;
}

std::vector<std::vector<size_t>> ShardedReducer::bucket_indices() const {
  std::vector<std::vector<size_t>> out;
  for (const auto& b : state_->buckets) out.push_back(b.params);
  return out;
}

int64_t ShardedReducer::iterations() const {
  return state_->iterations;
}

double ShardedReducer::exposed_seconds() const {
  return state_->exposed_seconds;
}

}  // namespace lockstep::shard
