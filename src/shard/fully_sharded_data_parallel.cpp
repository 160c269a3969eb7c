// FSDP: see the block comment in include/lockstep/shard/fully_sharded_data_parallel.h.
#include "lockstep/shard/fully_sharded_data_parallel.h"

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>

#include "sent_directly.h"

namespace lockstep::shard {
namespace {

size_t bytes_of(const at::Tensor& param) {
  return static_cast<size_t>(param.numel()) * param.element_size();
}

// The parameter's memory taken from it: its storage holds nothing until materialized; its shape stays.
at::DataPtr take_memory(const at::Tensor& param) {
  c10::StorageImpl* storage = param.storage().unsafeGetStorageImpl();
  at::DataPtr memory = storage->set_data_ptr(at::DataPtr(nullptr, param.device()));
  storage->set_nbytes(0);
  return memory;
}

// The parameter's elements as a flat tensor of its own: writing to it does not count as an in-place change
// of the parameter (autograd saved the parameter for backward and checks its version).
at::Tensor own_alias(const at::Tensor& param) {
  at::Tensor flat = at::empty({0}, param.options().requires_grad(false));
  flat.set_(param.storage(), 0, {param.numel()}, {1});
  return flat;
}

}  // namespace

void FsdpOptions::validate() const {
  if (min_unit_params_ < 1) {
    throw std::invalid_argument("FsdpOptions::min_unit_params must be >= 1, got " +
                                std::to_string(min_unit_params_));
  }
  for (size_t k = 0; k < unit_starts_.size(); ++k) {
    if ((k == 0 && unit_starts_[0] != 0) || (k > 0 && unit_starts_[k] <= unit_starts_[k - 1])) {
      throw std::invalid_argument(
          "FsdpOptions::unit_starts must start at stage 0 and ascend (the first stage of each unit), got " +
          std::to_string(unit_starts_[k]) + " at position " + std::to_string(k));
    }
  }
  if (param_dtype_ && !at::isFloatingType(*param_dtype_)) {
    throw std::invalid_argument(
        "FsdpOptions::param_dtype must be a floating-point dtype (bfloat16, float16), got " +
        std::string(c10::toString(*param_dtype_)));
  }
}

FullyShardedDataParallel::FullyShardedDataParallel(std::shared_ptr<torch::nn::Module> root,
                                                   comm::ProcessGroup& group, FsdpOptions options,
                                                   models::Staged* staged)
    : root_(std::move(root)), staged_(staged), group_(group), options_(std::move(options)) {
  options_.validate();
  if (!root_) throw std::invalid_argument("FullyShardedDataParallel: the model is null");
  for (const auto& module : root_->modules(/*include_self=*/true)) {
    if (staged != nullptr) break;
    if (auto* staged = dynamic_cast<models::Staged*>(module.get())) {
      if (staged_ != nullptr) {
        throw std::invalid_argument("FullyShardedDataParallel: the model holds two Staged modules (" +
                                    module->name() + " and another): wrap the one that is the model");
      }
      staged_ = staged;
    }
  }
  if (staged_ == nullptr) {
    throw std::invalid_argument(
        "FullyShardedDataParallel: the model " + root_->name() +
        " is not Staged: LibTorch modules have no forward hooks, so FSDP needs a model that runs its stages "
        "through models::Staged::run_stage (lockstep's Mlp does; see models/staged.h), or strategy zero2");
  }
  std::vector<std::pair<std::string, at::Tensor>> named;
  std::vector<std::string> names;
  for (const auto& item : root_->named_parameters(/*recurse=*/true)) {
    named.emplace_back(item.key(), item.value());
    if (!item.value().requires_grad()) continue;
    params_.push_back(item.value());
    names.push_back(item.key());
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor& p = params_[i];
    if (!p.is_contiguous() || p.storage_offset() != 0 || p.storage().nbytes() != bytes_of(p)) {
      throw std::invalid_argument("FullyShardedDataParallel: parameter '" + names[i] +
                                  "' does not have memory of its own (a view, or sharing a storage): "
                                  "FSDP releases each parameter's memory between uses");
    }
  }
  plan_units(staged_->stage_modules());
  // Backward completes the units last to first. A unit's packed members are reduced together, each direct
  // one alone, straight from its .grad (as ZeRO-2's reducer would plan them).
  std::vector<std::vector<size_t>> buckets;
  for (size_t u = units_.size(); u-- > 0;) {
    const Unit& unit = units_[u];
    const auto direct = unit.params.begin() + static_cast<std::ptrdiff_t>(unit.packed);
    if (unit.packed > 0) buckets.emplace_back(unit.params.begin(), direct);
    for (auto it = direct; it != unit.params.end(); ++it) buckets.push_back({*it});
  }
  std::vector<std::pair<std::string, at::Tensor>> buffers;
  for (const auto& item : root_->named_buffers(/*recurse=*/true))
    buffers.emplace_back(item.key(), item.value());
  core_ = std::make_unique<ddp::DdpCore>(
      named, buffers, group_,
      ddp::DdpOptions().gradient_sync([buckets](std::vector<at::Tensor> parameters,
                                                std::vector<std::string> n, comm::ProcessGroup& g,
                                                const ddp::DdpOptions&) {
        return std::make_unique<ShardedReducer>(std::move(parameters), std::move(n), g, buckets);
      }));
  // Rank 0's weights are everywhere now: keep this rank's chunks, give the rest back.
  for (Unit& unit : units_) {
    unit.shard = at::zeros({unit.layout.part()}, params_[unit.params.front()].options().requires_grad(false));
    unit.gathered = true;
    keep_chunks(unit);
    release(unit);
  }
  if (options_.param_dtype()) {
    keep_batch_norm_units();
    retype_all(*options_.param_dtype());
  }
  hooks_ = std::make_unique<ddp::GradHooks>(params_, [this](size_t index) { on_gradient(index); });
  staged_->set_stage_runner(this);
}

FullyShardedDataParallel::~FullyShardedDataParallel() {
  staged_->set_stage_runner(nullptr);
}

// Units of consecutive stages: the user's starts, or closed as soon as one holds min_unit_params (the rest
// after the last such unit joins it... or forms the last unit).
void FullyShardedDataParallel::plan_units(const std::vector<std::shared_ptr<torch::nn::Module>>& stages) {
  if (stages.empty()) throw std::invalid_argument("FullyShardedDataParallel: the model has no stages");
  std::unordered_map<const void*, size_t> index;
  for (size_t i = 0; i < params_.size(); ++i) index[params_[i].unsafeGetTensorImpl()] = i;
  std::vector<std::vector<size_t>> stage_params(stages.size());
  std::vector<int64_t> stage_size(stages.size(), 0);
  std::vector<char> placed(params_.size(), 0);
  for (size_t s = 0; s < stages.size(); ++s) {
    for (const auto& p : stages[s]->parameters(/*recurse=*/true)) {
      const auto found = index.find(p.unsafeGetTensorImpl());
      if (found == index.end() || placed[found->second]) continue;  // frozen, or counted already
      placed[found->second] = 1;
      stage_params[s].push_back(found->second);
      stage_size[s] += p.numel();
    }
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!placed[i]) {
      std::ostringstream names;
      for (const auto& item : root_->named_parameters(true))
        if (item.value().unsafeGetTensorImpl() == params_[i].unsafeGetTensorImpl()) names << item.key();
      throw std::invalid_argument("FullyShardedDataParallel: parameter '" + names.str() +
                                  "' belongs to no stage of the model: every trainable parameter must be in "
                                  "one of Staged::stage_modules()");
    }
  }
  std::vector<size_t> starts = options_.unit_starts();
  if (starts.empty()) {
    int64_t open = 0;
    for (size_t s = 0; s < stages.size(); ++s) {
      if (s == 0 || open >= options_.min_unit_params()) {
        starts.push_back(s);
        open = 0;
      }
      open += stage_size[s];
    }
  } else if (starts.back() >= stages.size()) {
    throw std::invalid_argument("FsdpOptions::unit_starts names stage " + std::to_string(starts.back()) +
                                ", and the model has " + std::to_string(stages.size()) + " stages");
  }
  const int world = group_.size();
  unit_of_stage_.assign(stages.size(), 0);
  unit_of_param_.assign(params_.size(), 0);
  for (size_t k = 0; k < starts.size(); ++k) {
    Unit unit;
    const size_t end = k + 1 < starts.size() ? starts[k + 1] : stages.size();
    std::vector<size_t> members;
    for (size_t s = starts[k]; s < end; ++s) {
      unit.stages.push_back(s);
      unit_of_stage_[s] = units_.size();
      members.insert(members.end(), stage_params[s].begin(), stage_params[s].end());
    }
    const auto is_direct = [&](size_t i) { return detail::sent_directly(params_[i], world); };
    // The packed members first (their chunks are gathered together), then the direct ones.
    std::stable_partition(members.begin(), members.end(), [&](size_t i) { return !is_direct(i); });
    size_t unit_bytes = 0;
    std::vector<int64_t> numels;
    for (size_t i : members) {
      unit.params.push_back(i);
      unit.packed += is_direct(i) ? 0 : 1;
      numels.push_back(params_[i].numel());
      unit_of_param_[i] = units_.size();
      unit_bytes += bytes_of(params_[i]);
    }
    unit.layout = ChunkLayout(std::move(numels), world);
    spare_cap_ = std::max(spare_cap_, 2 * unit_bytes);
    if (unit.params.empty()) {
      throw std::invalid_argument("FullyShardedDataParallel: unit " + std::to_string(units_.size()) +
                                  " (stages " + std::to_string(starts[k]) + "-" + std::to_string(end - 1) +
                                  ") has no trainable parameter: start units at stages that have some");
    }
    units_.push_back(std::move(unit));
  }
}

void FullyShardedDataParallel::materialize(const at::Tensor& param) {
  c10::StorageImpl* storage = param.storage().unsafeGetStorageImpl();
  const size_t bytes = bytes_of(param);
  if (storage->nbytes() == bytes) return;
  at::DataPtr memory;
  for (auto it = spare_.begin(); it != spare_.end(); ++it) {
    if (it->first != bytes) continue;
    memory = std::move(it->second);
    spare_bytes_ -= bytes;
    spare_.erase(it);
    break;
  }
  if (!memory) {
    c10::Allocator* allocator = storage->allocator();
    if (allocator == nullptr) allocator = c10::GetAllocator(param.device().type());
    memory = allocator->allocate(bytes);
  }
  storage->set_data_ptr_noswap(std::move(memory));
  storage->set_nbytes(bytes);
}

// LibTorch's BatchNorm modules are named torch::nn::BatchNorm1d/2d/3d (and SyncBatchNorm in Python).
void FullyShardedDataParallel::keep_batch_norm_units() {
  std::unordered_map<const void*, size_t> index;
  for (size_t i = 0; i < params_.size(); ++i) index[params_[i].unsafeGetTensorImpl()] = i;
  for (const auto& module : root_->modules(/*include_self=*/true)) {
    if (module->name().find("BatchNorm") == std::string::npos) continue;
    for (const auto& p : module->parameters(/*recurse=*/false)) {
      const auto found = index.find(p.unsafeGetTensorImpl());
      if (found != index.end()) units_[unit_of_param_[found->second]].master_dtype = true;
    }
  }
}

// A released parameter keeps its shape and takes the new dtype (as Module::to does, through set_data:
// autograd then makes a new gradient accumulator, which the next forward's hook refresh finds).
void FullyShardedDataParallel::retype_all(at::ScalarType dtype) {
  release_all();
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& param = params_[i];
    if (param.scalar_type() == dtype || units_[unit_of_param_[i]].master_dtype) continue;
    at::Tensor shell = at::empty({0}, param.options().dtype(dtype).requires_grad(false));
    shell.unsafeGetTensorImpl()->set_sizes_contiguous(param.sizes());
    param.set_data(shell);
    if (param.grad().defined()) param.mutable_grad() = param.grad().to(dtype);  // one left in .grad
  }
}

// A member of at least detail::kDirectBytes whose size divides by the world is gathered straight into its own
// memory, its chunk (in the shard) as the input: no second copy of it. The others' chunks lie first in the
// shard and are gathered together into `receive`, then copied out.
// Timed: a backend may run the gather in the calling thread (shm when idle) or block until the peers arrive.
void FullyShardedDataParallel::start_gather(Unit& unit) {
  if (unit.gathered || unit.in_flight) return;
  const auto start = std::chrono::steady_clock::now();
  start_gather_untimed(unit);
  count_gather_wait(start);
}

void FullyShardedDataParallel::count_gather_wait(std::chrono::steady_clock::time_point start) {
  gather_wait_s_[in_backward_ ? 1 : 0] +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void FullyShardedDataParallel::start_gather_untimed(Unit& unit) {
  for (size_t i : unit.params) materialize(params_[i]);
  const std::string what = " of an FSDP unit's parameters";
  const at::ScalarType compute = params_[unit.params.front()].scalar_type();
  const at::Tensor& source =
      unit.shard.scalar_type() == compute ? unit.shard : (unit.send = unit.shard.to(compute));
  const int64_t packed_part = unit.layout.first(unit.packed).part();
  if (packed_part > 0) {
    unit.receive = at::empty({packed_part * group_.size()}, source.options());
    at::Tensor mine = source.narrow(0, 0, packed_part);
    unit.pending.push_back(group_.all_gather_into(unit.receive, mine).then({}, what));
  }
  for (size_t j = unit.packed; j < unit.params.size(); ++j) {
    at::Tensor whole = own_alias(params_[unit.params[j]]);
    at::Tensor mine = source.narrow(0, unit.layout.offset(j), unit.layout.stride(j));
    unit.pending.push_back(group_.all_gather_into(whole, mine).then({}, what));
  }
  unit.in_flight = true;
}

void FullyShardedDataParallel::finish_gather(Unit& unit) {
  if (unit.gathered) return;
  start_gather(unit);
  const auto start = std::chrono::steady_clock::now();
  for (comm::Work& work : unit.pending) work.wait();
  count_gather_wait(start);
  unit.pending.clear();
  unit.in_flight = false;
  if (unit.receive.defined()) {
    const ChunkLayout packed = unit.layout.first(unit.packed);
    at::NoGradGuard no_grad;
    for (size_t j = 0; j < unit.packed; ++j)
      packed.unpack(unit.receive, j, own_alias(params_[unit.params[j]]));
  }
  unit.receive = unit.send = at::Tensor();
  unit.gathered = true;
  peak_gathered_ = std::max(peak_gathered_, gathered_units());
}

void FullyShardedDataParallel::release(Unit& unit) {
  if (unit.in_flight) {  // prefetched, not used: let it land
    for (comm::Work& work : unit.pending) work.wait();
    unit.pending.clear();
    unit.in_flight = false;
    unit.receive = unit.send = at::Tensor();
    unit.gathered = true;  // its memory is given back below
  }
  if (!unit.gathered) return;
  for (size_t i : unit.params) {
    const size_t bytes = bytes_of(params_[i]);
    at::DataPtr memory = take_memory(params_[i]);
    if (bytes > 0 && spare_bytes_ + bytes <= spare_cap_) {
      spare_.emplace_back(bytes, std::move(memory));
      spare_bytes_ += bytes;
    }
  }
  unit.gathered = false;
}

// This rank's chunk of each whole parameter of `unit` into its shard.
void FullyShardedDataParallel::keep_chunks(Unit& unit) {
  at::NoGradGuard no_grad;
  for (size_t j = 0; j < unit.params.size(); ++j) {
    const ChunkRange mine = unit.layout.chunk(j, group_.rank());
    unit.layout.chunk_in(unit.shard, j, group_.rank())
        .copy_(own_alias(params_[unit.params[j]]).narrow(0, mine.begin, mine.length));
  }
}

void FullyShardedDataParallel::release_all() {
  for (Unit& unit : units_) release(unit);
}

at::Tensor FullyShardedDataParallel::run_stage(size_t index,
                                               const std::function<at::Tensor(at::Tensor)>& stage,
                                               at::Tensor x) {
  TORCH_CHECK(index < unit_of_stage_.size(), "FullyShardedDataParallel: stage ", index, " of a model with ",
              unit_of_stage_.size(), " stages");
  if (holds_ > 0) {  // whole until reshard(): no gathers, no hooks, so no backward through it
    TORCH_CHECK(!at::GradMode::is_enabled(),
                "FullyShardedDataParallel: a forward with gradients while the parameters are held whole "
                "(gather_all, or the Accelerator's full_parameters): evaluate under torch::NoGradGuard, or "
                "end the scope (reshard) before training");
    return stage(std::move(x));
  }
  const size_t u = unit_of_stage_[index];
  Unit& unit = units_[u];
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (index == 0) {
      core_->before_forward();  // buffers from rank 0; gradient hooks moved to replaced accumulators
      hooks_->refresh();
      release_all();  // each forward starts from the shards, which a step may have changed
    }
    if (index == unit.stages.front()) {
      finish_gather(unit);
      if (options_.prefetch() && u + 1 < units_.size()) start_gather(units_[u + 1]);
    }
  }
  at::Tensor out = stage(std::move(x));
  if (index == unit.stages.back()) {
    const bool backward_follows = at::GradMode::is_enabled() && out.defined() && out.requires_grad();
    if (backward_follows) out.register_hook([this, u](const auto&) { before_backward(u); });
    std::lock_guard<std::mutex> lock(mutex_);
    if (!backward_follows || u + 1 < units_.size()) release(unit);  // backward starts with the last unit
  }
  return out;
}

// The gradient of unit u's output is complete: u's own backward comes next.
void FullyShardedDataParallel::before_backward(size_t u) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!in_backward_) {
    in_backward_ = true;
    for (Unit& unit : units_) unit.waiting = unit.params.size();
    // Runs when this backward is over, before backward() returns.
    torch::autograd::Engine::get_default_engine().queue_callback([this] {
      std::lock_guard<std::mutex> end(mutex_);
      if (holds_ == 0) release_all();
      in_backward_ = false;
    });
  }
  finish_gather(units_[u]);
  if (options_.prefetch() && u > 0) start_gather(units_[u - 1]);
}

// A parameter's gradient is in: the unit is released with its last one (its backward used it last then).
void FullyShardedDataParallel::on_gradient(size_t index) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!in_backward_ || holds_ > 0) return;
  Unit& unit = units_[unit_of_param_[index]];
  if (unit.waiting > 0 && --unit.waiting == 0) release(unit);
}

std::unique_ptr<ZeroOptimizer> FullyShardedDataParallel::make_optimizer(
    std::shared_ptr<torch::optim::Optimizer> optimizer) {
  ShardedReducer& gradients = reducer();
  return std::make_unique<ZeroOptimizer>(std::move(optimizer), group_, gradients,
                                         [this, &gradients](const at::Tensor& param) {
                                           const int64_t i = gradients.index_of(param);
                                           if (i < 0) return at::Tensor();
                                           const Unit& unit = units_[unit_of_param_[static_cast<size_t>(i)]];
                                           size_t j = 0;
                                           while (unit.params[j] != static_cast<size_t>(i)) ++j;
                                           return unit.layout.chunk_in(unit.shard, j, group_.rank());
                                         });
}

ShardedReducer& FullyShardedDataParallel::reducer() {
  return dynamic_cast<ShardedReducer&>(core_->gradient_sync());
}

ddp::NoSyncGuard FullyShardedDataParallel::no_sync() {
  return ddp::NoSyncGuard(core_->gradient_sync());
}

void FullyShardedDataParallel::gather_all() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (holds_++ > 0) return;  // whole already: an outer scope holds them
  if (options_.param_dtype()) retype_all(units_.front().shard.scalar_type());  // whole in the master dtype
  for (Unit& unit : units_) start_gather(unit);
  for (Unit& unit : units_) finish_gather(unit);
}

void FullyShardedDataParallel::reshard(bool from_parameters) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (holds_ > 1) {  // an outer gather_all still holds them whole; its reshard releases them
    --holds_;
    return;
  }
  holds_ = 0;
  for (Unit& unit : units_) {
    if (from_parameters) {
      TORCH_CHECK(unit.gathered,
                  "FullyShardedDataParallel::reshard: the parameters are not whole: "
                  "gather_all() before loading weights into them");
      keep_chunks(unit);
    }
    release(unit);
  }
  if (options_.param_dtype()) retype_all(*options_.param_dtype());
}

std::vector<std::vector<size_t>> FullyShardedDataParallel::units() const {
  std::vector<std::vector<size_t>> out;
  for (const Unit& unit : units_) out.push_back(unit.stages);
  return out;
}

size_t FullyShardedDataParallel::shard_bytes() const {
  size_t bytes = 0;
  for (const Unit& unit : units_) bytes += unit.shard.nbytes();
  return bytes;
}

FullyShardedDataParallel::GatherWaits FullyShardedDataParallel::take_gather_waits() {
  std::lock_guard<std::mutex> lock(mutex_);
  const GatherWaits out{gather_wait_s_[0], gather_wait_s_[1]};
  gather_wait_s_[0] = gather_wait_s_[1] = 0.0;
  return out;
}

size_t FullyShardedDataParallel::gathered_units() const {
  size_t count = 0;
  for (const Unit& unit : units_) count += unit.gathered ? 1 : 0;
  return count;
}

}  // namespace lockstep::shard
