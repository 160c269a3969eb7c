// ZeRO stage 1: see the block comment in include/lockstep/shard/zero_optimizer.h.
#include "lockstep/shard/zero_optimizer.h"

#include "../optim/param_state_key.h"
#include "lockstep/ddp/reducer.h"
#include "lockstep/shard/shard_checkpoint.h"
#include "sent_directly.h"
#include "state_fields.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/nn/module.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace lockstep::shard {
namespace {

// A tensor of `length` elements at `begin` of `param`'s memory: the optimizer's view of a chunk. Not an
// autograd view (set_ on the storage), so the optimizer may treat it as a leaf of its own.
at::Tensor chunk_of(const at::Tensor& param, int64_t begin, int64_t length) {
  at::Tensor chunk = at::empty({0}, param.options().requires_grad(false));
  chunk.set_(param.storage(), param.storage_offset() + begin, {length}, {1});
  return chunk;
}

const torch::optim::Optimizer& checked(const std::shared_ptr<torch::optim::Optimizer>& optimizer) {
  if (!optimizer) throw std::invalid_argument("ZeroOptimizer: the optimizer is null");
  if (!optimizer->state().empty()) {
    throw std::invalid_argument(
        "ZeroOptimizer: the optimizer already has state (it has stepped): shard it before its first step");
  }
  return *optimizer;
}

std::vector<torch::optim::OptimizerParamGroup> groups_of(const torch::optim::Optimizer& optimizer) {
  std::vector<torch::optim::OptimizerParamGroup> out;
  for (const auto& group : optimizer.param_groups()) out.emplace_back(group);  // clones the options
  return out;
}

// The bytes `write` puts in an archive, read back as one.
void round_trip(const std::function<void(torch::serialize::OutputArchive&)>& write,
                torch::serialize::InputArchive& into) {
  torch::serialize::OutputArchive out;
  write(out);
  std::ostringstream bytes;
  out.save_to(bytes);
  std::istringstream input(bytes.str());
  into.load_from(input);
}

// Into `flat` (a parameter's elements), every rank's chunk of it but `skip`'s from `all`, the gathered
// packed buffers: rank r's at r * stride + offset.
void copy_chunks_out(at::Tensor& flat, const at::Tensor& all, int64_t stride, int64_t offset, int world,
                     int skip) {
  for (int r = 0; r < world; ++r) {
    const ZeroOptimizer::Range theirs = ZeroOptimizer::chunk(flat.numel(), r, world);
    if (r == skip || theirs.length == 0) continue;
    flat.narrow(0, theirs.begin, theirs.length).copy_(all.narrow(0, r * stride + offset, theirs.length));
  }
}

}  // namespace

std::vector<std::pair<std::string, at::Tensor>> state_tensors(
    const torch::optim::OptimizerParamState& state) {
  torch::serialize::InputArchive in;
  round_trip([&](torch::serialize::OutputArchive& out) { state.serialize(out); }, in);
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const std::string& key : in.keys()) {
    c10::IValue value;
    if (in.try_read(key, value) && value.isTensor()) tensors.emplace_back(key, value.toTensor());
  }
  return tensors;
}

bool holds_batch_norm(const torch::nn::Module& model) {
  for (const auto& module : model.modules(/*include_self=*/true)) {
    if (module->name().find("BatchNorm") != std::string::npos) return true;
  }
  return false;
}

ZeroOptimizer::ZeroOptimizer(std::shared_ptr<torch::optim::Optimizer> optimizer, comm::ProcessGroup& group,
                             ShardedReducer* gradients)
    : torch::optim::Optimizer(groups_of(checked(optimizer)), checked(optimizer).defaults().clone()),
      inner_(std::move(optimizer)),
      group_(&group),
      gradients_(gradients) {
  build(nullptr);
}

ZeroOptimizer::ZeroOptimizer(std::shared_ptr<torch::optim::Optimizer> optimizer, comm::ProcessGroup& group,
                             ShardedReducer& gradients, const ChunkSource& chunks)
    : torch::optim::Optimizer(groups_of(checked(optimizer)), checked(optimizer).defaults().clone()),
      inner_(std::move(optimizer)),
      group_(&group),
      gradients_(&gradients),
      gathers_(false) {
  build(chunks);
}

ZeroOptimizer::ZeroOptimizer(std::shared_ptr<torch::optim::Optimizer> optimizer, comm::ProcessGroup& group,
                             ddp::GradientSync& gradients, at::ScalarType param_dtype)
    : torch::optim::Optimizer(groups_of(checked(optimizer)), checked(optimizer).defaults().clone()),
      inner_(std::move(optimizer)),
      group_(&group),
      gradients_(dynamic_cast<ShardedReducer*>(&gradients)),
      averages_(dynamic_cast<const ddp::Reducer*>(&gradients)),
      param_dtype_(param_dtype) {
  if (gradients_ == nullptr && averages_ == nullptr) {
    throw std::invalid_argument(
        "ZeroOptimizer: mixed precision needs the gradients from DDP's Reducer (zero1) or a ShardedReducer "
        "(zero2): pass the DDP model's gradient_sync()");
  }
  build(nullptr);
  for (auto& group : slots_) {  // every master chunk is taken: the parameters may be cast
    for (Slot& slot : group) retype(slot, param_dtype, /*values=*/true);
  }
}

void ZeroOptimizer::build(const ChunkSource& chunk_source) {
  comm::ProcessGroup& group = *group_;
  const int world = group.size();
  const int rank = group.rank();
  at::TensorOptions buffer;
  bool first = true;
  for (auto& inner_group : inner_->param_groups()) {
    std::vector<Slot> slots;
    std::vector<at::Tensor> chunks;
    for (const at::Tensor& param : inner_group.params()) {
      if (!param.is_contiguous()) {
        throw std::invalid_argument("ZeroOptimizer: a parameter of shape " + c10::str(param.sizes()) +
                                    " is not contiguous: its chunks must be plain ranges of its memory");
      }
      const Range mine = chunk(param.numel(), rank, world);
      if (param_dtype_ && (!at::isFloatingType(*param_dtype_) ||
                           c10::elementSize(*param_dtype_) >= c10::elementSize(param.scalar_type()))) {
        throw std::invalid_argument(
            "ZeroOptimizer: param_dtype " + std::string(c10::toString(*param_dtype_)) +
            " is not a floating-point dtype narrower than the parameters' " +
            c10::toString(param.scalar_type()) + ": use bfloat16 (or float16) over float32 parameters");
      }
      at::Tensor local = chunk_source ? at::Tensor() : chunk_of(param, mine.begin, mine.length);
      at::Tensor stepped = chunk_source ? chunk_source(param) : param_dtype_ ? local.clone() : local;
      Slot slot{param, stepped, local.defined() ? local : stepped, (param.numel() + world - 1) / world,
                packed_};
      if (!slot.chunk.defined() || slot.chunk.numel() != mine.length) {
        throw std::invalid_argument("ZeroOptimizer: the chunk given for a parameter of shape " +
                                    c10::str(param.sizes()) + " does not hold its " +
                                    std::to_string(mine.length) + " elements of rank " +
                                    std::to_string(rank));
      }
      // The chunks' dtype (FSDP's master shards may be float32 under bfloat16 parameters).
      const at::Tensor& like = slot.chunk;
      if (first) {
        buffer = like.options().requires_grad(false);
        first = false;
      } else if (like.scalar_type() != buffer.dtype().toScalarType() || like.device() != buffer.device()) {
        throw std::invalid_argument("ZeroOptimizer: the parameters mix " + c10::str(buffer.dtype()) + " on " +
                                    buffer.device().str() + " with " + c10::str(like.scalar_type()) + " on " +
                                    like.device().str() + ": shard one dtype on one device");
      }
      if (gradients_ != nullptr || averages_ != nullptr) {
        slot.gradient = gradients_ != nullptr ? gradients_->index_of(param) : averages_->index_of(param);
        // ZeRO-1 under mixed precision: a parameter DDP leaves out (frozen) steps from its own .grad, if any.
        if (slot.gradient < 0 && gradients_ != nullptr) {
          throw std::invalid_argument(
              "ZeroOptimizer: a parameter of shape " + c10::str(param.sizes()) +
              " is not one the sharded reducer synchronises: build the optimizer over "
              "the trainable parameters of the model DDP or FSDP wraps");
        }
      }
      packed_ += slot.chunk_size;
      chunks.push_back(slot.chunk);
      slots.push_back(std::move(slot));
    }
    inner_group.params() = std::move(chunks);  // the inner optimizer steps the chunks from now on
    slots_.push_back(std::move(slots));
  }
  // shm, Gloo and NCCL read the input before writing the output; MPI forbids aliasing them (MPI_IN_PLACE).
  const comm::Backend backend = group.backend();
  in_place_ =
      backend == comm::Backend::kShm || backend == comm::Backend::kGloo || backend == comm::Backend::kNccl;
  if (gathers_) plan_gathers(param_dtype_ ? buffer.dtype(*param_dtype_) : buffer);  // gathered as computed
  options_ = buffer;
}

// As Module::to does, through set_data: autograd then makes a new gradient accumulator, which DDP's hook
// refresh before the next forward finds.
void ZeroOptimizer::retype(Slot& slot, at::ScalarType dtype, bool values) {
  torch::NoGradGuard no_grad;
  at::Tensor& param = slot.param;
  param.set_data(values ? param.detach().to(dtype)
                        : at::empty(param.sizes(), param.options().dtype(dtype).requires_grad(false)));
  if (param.grad().defined()) param.mutable_grad() = param.grad().to(dtype);  // between backward and step
  const Range mine = chunk(param.numel(), group_->rank(), group_->size());
  slot.local = chunk_of(param, mine.begin, mine.length);
}

void ZeroOptimizer::plan_gathers(const at::TensorOptions& buffer) {
  const int world = group_->size();
  const int64_t element = static_cast<int64_t>(c10::elementSize(buffer.dtype().toScalarType()));
  const int64_t bucket_cap = std::max<int64_t>(1, (int64_t{16} << 20) / (element * world));
  int64_t send = 0;
  for (auto& group : slots_) {
    for (Slot& slot : group) {
      if (detail::sent_directly(slot.param, world)) {
        if (!in_place_) send = std::max(send, slot.chunk_size);  // straight into the parameter
        continue;
      }
      if (buckets_.empty() || (buckets_.back() > 0 && buckets_.back() + slot.chunk_size > bucket_cap))
        buckets_.push_back(0);
      slot.bucket = static_cast<int>(buckets_.size()) - 1;
      slot.bucket_offset = buckets_.back();
      buckets_.back() += slot.chunk_size;
      send = std::max(send, buckets_.back());
    }
  }
  int64_t largest_bucket = 0;
  for (int64_t b : buckets_) largest_bucket = std::max(largest_bucket, b);
  send_ = at::empty({send}, buffer);
  receive_ = at::empty({largest_bucket * world}, buffer);
}

int64_t optimizer_state_bytes(const torch::optim::Optimizer& optimizer) {
  int64_t bytes = 0;
  for (const auto& entry : optimizer.state()) {
    for (const auto& named : state_tensors(*entry.second))
      bytes += static_cast<int64_t>(named.second.nbytes());
  }
  return bytes;
}

int64_t ZeroOptimizer::state_bytes() const {
  int64_t bytes = optimizer_state_bytes(*inner_);
  if (!param_dtype_) return bytes;
  for (const auto& group : slots_) {
    for (const Slot& slot : group) bytes += static_cast<int64_t>(slot.chunk.nbytes());  // the masters
  }
  return bytes;
}

at::Tensor ZeroOptimizer::step(LossClosure closure) {
  TORCH_CHECK(!closure,
              "ZeroOptimizer::step: a closure is not supported (its optimizer must be elementwise)");
  torch::NoGradGuard no_grad;
  for (size_t g = 0; g < slots_.size(); ++g) {
    auto& inner_group = inner_->param_groups()[g];
    inner_group.set_options(param_groups()[g].options().clone());  // a schedule changed the outer ones
    for (Slot& slot : slots_[g]) {
      if (gradients_ != nullptr) {  // ZeRO-2: the chunk's gradient is all there is
        slot.chunk.mutable_grad() = gradients_->gradient(static_cast<size_t>(slot.gradient));
        continue;
      }
      const at::Tensor& grad = slot.param.grad();
      if (!grad.defined()) {
        slot.chunk.mutable_grad() = at::Tensor();  // skipped, as the whole parameter would be
        continue;
      }
      const Range mine = chunk(slot.param.numel(), group_->rank(), group_->size());
      slot.chunk.mutable_grad() = averaged_gradient(slot).reshape({-1}).narrow(0, mine.begin, mine.length);
    }
  }
  inner_->step();
  for (auto& group : slots_) {
    for (Slot& slot : group) slot.chunk.mutable_grad() = at::Tensor();  // no hold on the gradients
  }
  if (gradients_ != nullptr) gradients_->clear();  // consumed
  if (gathers_) gather_chunks();
  return {};
}

at::Tensor ZeroOptimizer::averaged_gradient(const Slot& slot) const {
  // Mixed precision: the float32 average, not its bfloat16 copy in .grad.
  if (averages_ != nullptr && slot.gradient >= 0)
    return averages_->bucket_gradient(static_cast<size_t>(slot.gradient));
  return slot.param.grad().to(options_.dtype().toScalarType());  // no copy unless cast
}

double ZeroOptimizer::clip_grad_norm_(double max_norm, const std::vector<at::Tensor>& others) {
  if (gradients_ != nullptr) {
    TORCH_CHECK(others.empty(), "ZeroOptimizer::clip_grad_norm_: ZeRO-2 and FSDP clip their own chunks only");
    return gradients_->clip_grad_norm_(max_norm);  // every rank's chunks
  }
  std::vector<at::Tensor> clipped;  // what holds the gradients as .grad
  for (const auto& group : slots_) {
    for (const Slot& slot : group) {
      if (!slot.param.grad().defined()) continue;
      if (averages_ == nullptr || slot.gradient < 0) {
        clipped.push_back(slot.param);
        continue;
      }
      at::Tensor holder = at::empty({0}, options_);
      holder.mutable_grad() = averaged_gradient(slot);
      clipped.push_back(holder);
    }
  }
  clipped.insert(clipped.end(), others.begin(), others.end());
  const double norm = torch::nn::utils::clip_grad_norm_(clipped, max_norm);
  if (averages_ != nullptr) {  // the bfloat16 copies in .grad follow
    torch::NoGradGuard no_grad;
    for (const auto& group : slots_) {
      for (const Slot& slot : group) {
        if (slot.param.grad().defined() && slot.gradient >= 0)
          slot.param.mutable_grad().copy_(averaged_gradient(slot));
      }
    }
  }
  return norm;
}

void ZeroOptimizer::gather_all() {
  if (!param_dtype_) return;  // whole already
  if (holds_ > 0) {
    ++holds_;
    return;
  }
  torch::NoGradGuard no_grad;
  const int world = group_->size();
  for (auto& group : slots_) {
    for (Slot& slot : group) {
      retype(slot, options_.dtype().toScalarType(), /*values=*/false);
      if (slot.chunk_size == 0) continue;  // an empty parameter
      at::Tensor all = at::empty({slot.chunk_size * world}, options_);
      at::Tensor mine = at::zeros({slot.chunk_size}, options_);  // the last ranks' chunks may be short
      mine.narrow(0, 0, slot.chunk.numel()).copy_(slot.chunk);
      group_->all_gather_into(all, mine).wait();
      at::Tensor flat = slot.param.detach().view({-1});
      copy_chunks_out(flat, all, slot.chunk_size, 0, world, /*skip=*/-1);
    }
  }
  holds_ = 1;  // only once whole: a failed gather (the group failed) holds nothing
}

void ZeroOptimizer::reshard(bool from_parameters) {
  if (!param_dtype_) return;
  TORCH_CHECK(holds_ > 0, "ZeroOptimizer::reshard: the parameters are not whole: gather_all() first");
  if (holds_-- > 1) return;  // an outer gather_all still holds them; its reshard ends it
  torch::NoGradGuard no_grad;
  for (auto& group : slots_) {
    for (Slot& slot : group) {
      if (from_parameters) {
        const Range mine = chunk(slot.param.numel(), group_->rank(), group_->size());
        slot.chunk.copy_(slot.param.detach().view({-1}).narrow(0, mine.begin, mine.length));
      }
      retype(slot, *param_dtype_, /*values=*/true);
    }
  }
}

void ZeroOptimizer::gather_chunks() {
  const int world = group_->size();
  const int rank = group_->rank();
  if (param_dtype_) {  // the stepped masters into the parameters' memory, cast
    for (auto& group : slots_)
      for (Slot& slot : group) slot.local.copy_(slot.chunk);
  }
  for (auto& group : slots_) {  // straight into the parameters
    for (Slot& slot : group) {
      if (slot.bucket >= 0) continue;
      // detach(): a backend may write from a thread of its own, where grad mode is on, and an autograd view
      // of a parameter must not be written there.
      at::Tensor flat = slot.param.detach().view({-1});
      at::Tensor mine = slot.local;  // its own place in `flat`: gathered in place where the backend allows
      if (!in_place_) mine = send_.narrow(0, 0, slot.chunk_size).copy_(slot.local);
      group_->all_gather_into(flat, mine).wait();
    }
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {  // the others, packed
    at::Tensor mine = send_.narrow(0, 0, buckets_[b]);
    at::Tensor all = receive_.narrow(0, 0, buckets_[b] * world);
    for (const auto& group : slots_) {
      for (const Slot& slot : group) {
        if (slot.bucket == static_cast<int>(b) && slot.local.numel() > 0)
          mine.narrow(0, slot.bucket_offset, slot.local.numel()).copy_(slot.local);
      }
    }
    group_->all_gather_into(all, mine).wait();
    for (const auto& group : slots_) {
      for (const Slot& slot : group) {
        if (slot.bucket != static_cast<int>(b)) continue;
        at::Tensor flat = slot.param.view({-1});  // its own chunk was stepped in place
        copy_chunks_out(flat, all, buckets_[b], slot.bucket_offset, world, rank);
      }
    }
  }
}

namespace detail {

std::unique_ptr<torch::optim::OptimizerParamState> with_tensors(
    const torch::optim::OptimizerParamState& like, const std::map<std::string, at::Tensor>& tensors) {
  torch::serialize::InputArchive fields;
  round_trip([&](torch::serialize::OutputArchive& out) { like.serialize(out); }, fields);
  torch::serialize::InputArchive replaced;
  round_trip(
      [&](torch::serialize::OutputArchive& out) {
        for (const std::string& key : fields.keys()) {
          c10::IValue value;
          fields.try_read(key, value);
          const auto it = tensors.find(key);
          out.write(key, it != tensors.end() ? c10::IValue(it->second) : value);
        }
      },
      replaced);
  std::unique_ptr<torch::optim::OptimizerParamState> state = like.clone();
  state->serialize(replaced);
  return state;
}

}  // namespace detail

void ZeroOptimizer::with_whole_parameters(StateMap& whole, const std::function<void()>& fn) const {
  std::vector<std::vector<at::Tensor>> chunks;
  for (size_t g = 0; g < slots_.size(); ++g) {
    auto& params = inner_->param_groups()[g].params();
    chunks.push_back(params);
    params.clear();
    for (const Slot& slot : slots_[g]) params.push_back(slot.param);
  }
  std::swap(inner_->state(), whole);
  struct Restore {  // also when fn throws
    const ZeroOptimizer* self;
    StateMap& whole;
    std::vector<std::vector<at::Tensor>>& chunks;
    ~Restore() {
      std::swap(self->inner_->state(), whole);
      for (size_t g = 0; g < chunks.size(); ++g) self->inner_->param_groups()[g].params() = chunks[g];
    }
  } restore{this, whole, chunks};
  fn();
}

void ZeroOptimizer::consolidate(int root) {
  const int world = group_->size();
  const int rank = group_->rank();
  auto& state = inner_->state();
  // The state tensors' names: every rank steps the same parameters (DDP agrees on which have gradients),
  // so the first parameter with state is the same everywhere.
  std::vector<std::string> names;
  for (const auto& group : slots_) {
    for (const Slot& slot : group) {
      const auto it = state.find(optim::detail::param_state_key(slot.chunk));
      if (it == state.end() || !names.empty()) continue;
      for (const auto& [name, tensor] : state_tensors(*it->second))
        if (tensor.defined()) names.push_back(name);
    }
  }
  std::map<std::string, at::Tensor> gathered;        // name -> every rank's packed chunks
  at::Tensor send = at::zeros({packed_}, options_);  // whole-model temporaries, for the checkpoint only
  for (const std::string& name : names) {
    send.zero_();
    for (const auto& group : slots_) {
      for (const Slot& slot : group) {
        const auto it = state.find(optim::detail::param_state_key(slot.chunk));
        if (it == state.end()) continue;
        for (const auto& [field, tensor] : state_tensors(*it->second)) {
          if (field != name || !tensor.defined()) continue;
          if (tensor.numel() != slot.chunk.numel() || tensor.scalar_type() != send.scalar_type()) {
            throw std::runtime_error("ZeroOptimizer: the optimizer's state '" + name +
                                     "' of a parameter of shape " + c10::str(slot.param.sizes()) + " is " +
                                     c10::str(tensor.scalar_type()) + "[" + std::to_string(tensor.numel()) +
                                     "], not shaped like its chunk: this optimizer is not elementwise");
          }
          send.narrow(0, slot.offset, tensor.numel()).copy_(tensor.reshape({-1}));
        }
      }
    }
    at::Tensor all = at::empty({packed_ * world}, options_);
    group_->all_gather_into(all, send).wait();
    gathered[name] = all;
  }
  consolidated_.clear();
  consolidated_root_ = root;
  if (rank != root) return;
  for (const auto& group : slots_) {
    for (const Slot& slot : group) {
      const auto it = state.find(optim::detail::param_state_key(slot.chunk));
      if (it == state.end()) continue;  // never stepped: no state, as in one process
      std::map<std::string, at::Tensor> whole;
      for (const auto& [name, all] : gathered) {
        at::Tensor tensor = at::empty({slot.param.numel()}, all.options());
        copy_chunks_out(tensor, all, packed_, slot.offset, world, /*skip=*/-1);
        whole[name] = tensor.view(slot.param.sizes());
      }
      consolidated_[optim::detail::param_state_key(slot.param)] = detail::with_tensors(*it->second, whole);
    }
  }
}

void ZeroOptimizer::save(torch::serialize::OutputArchive& archive) const {
  if (consolidated_root_ != group_->rank()) {
    throw std::logic_error("ZeroOptimizer::save on rank " + std::to_string(group_->rank()) +
                           ", which holds no consolidated state: call consolidate(" +
                           std::to_string(group_->rank()) + ") on every rank first");
  }
  with_whole_parameters(consolidated_, [&] { inner_->save(archive); });
}

void ZeroOptimizer::load(torch::serialize::InputArchive& archive) {
  StateMap whole;
  with_whole_parameters(whole, [&] { inner_->load(archive); });
  // The options the archive held (the learning rates of each group...) are the outer ones from now on.
  for (size_t g = 0; g < slots_.size(); ++g)
    param_groups()[g].set_options(inner_->param_groups()[g].options().clone());
  auto& state = inner_->state();
  state.clear();
  const int world = group_->size();
  const int rank = group_->rank();
  for (const auto& group : slots_) {
    for (const Slot& slot : group) {
      const auto it = whole.find(optim::detail::param_state_key(slot.param));
      if (it == whole.end()) continue;
      const Range mine = chunk(slot.param.numel(), rank, world);
      std::map<std::string, at::Tensor> chunks;
      for (const auto& [name, tensor] : state_tensors(*it->second)) {
        if (tensor.defined() && tensor.numel() == slot.param.numel())
          chunks[name] = tensor.reshape({-1}).narrow(0, mine.begin, mine.length).clone();
      }
      state[optim::detail::param_state_key(slot.chunk)] = detail::with_tensors(*it->second, chunks);
    }
  }
  consolidated_.clear();
  consolidated_root_ = -1;
}

void ZeroOptimizer::save_shard(torch::serialize::OutputArchive& archive) const {
  std::vector<at::Tensor> chunks;
  for (const auto& group : slots_)
    for (const Slot& slot : group) chunks.push_back(slot.chunk);
  shard::save_shard(archive, chunks, *inner_);
}

void ZeroOptimizer::load_shards(int shards, const ShardReader& read) {
  const int world = group_->size();
  const int rank = group_->rank();
  std::vector<ShardTarget> targets;
  for (const auto& group : slots_) {
    for (const Slot& slot : group) {
      const int64_t numel = slot.param.numel();
      const Range mine = chunk(numel, rank, world);
      // zero1, zero2: the parameter lives whole here (its chunk shares its memory); FSDP: only the chunk.
      // Mixed precision: the parameter cast, its master chunk exact.
      if (!gathers_) {
        targets.push_back(ShardTarget{numel, slot.chunk, mine, slot.chunk, mine, {}, {}});
        continue;
      }
      ShardTarget target{numel, slot.param.detach().view({-1}), {0, numel}, slot.chunk, mine, {}, {}};
      if (param_dtype_) {
        target.master = slot.chunk;
        target.master_range = mine;
      }
      targets.push_back(std::move(target));
    }
  }
  load_from_shards(*inner_, targets, shards, read);
  for (size_t g = 0; g < slots_.size(); ++g)
    param_groups()[g].set_options(inner_->param_groups()[g].options().clone());
  consolidated_.clear();
  consolidated_root_ = -1;
}

}  // namespace lockstep::shard
