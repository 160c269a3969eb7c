// ZeRO stage 1: see the block comment in include/lockstep/shard/zero_optimizer.h.
#include "lockstep/shard/zero_optimizer.h"

#include "../optim/param_state_key.h"
#include "lockstep/ddp/reducer.h"
#include "lockstep/shard/shard_checkpoint.h"
#include "state_fields.h"
#include "zero_chunks.h"
#include "zero_gradients.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/nn/module.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace lockstep::shard {
namespace {

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

// The chunks' dtype where they are views of the parameters' memory (or masters in the parameters' dtype).
at::ScalarType dtype_of(const std::vector<at::Tensor>& params) {
  return params.empty() ? at::kFloat : params.front().scalar_type();
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
      group_(&group) {
  const std::vector<at::Tensor> params = optimizer_parameters(*inner_);
  std::unique_ptr<detail::GradientSource> source;
  if (gradients != nullptr) {
    source = std::make_unique<detail::ShardedGradients>(params, *gradients);
  } else {
    source = std::make_unique<detail::ReplicatedGradients>(params, dtype_of(params));
  }
  shard(std::move(source), std::make_unique<detail::ParameterChunks>(params, group));
}

ZeroOptimizer::ZeroOptimizer(std::shared_ptr<torch::optim::Optimizer> optimizer, comm::ProcessGroup& group,
                             ShardedReducer& gradients, const ChunkSource& chunks)
    : torch::optim::Optimizer(groups_of(checked(optimizer)), checked(optimizer).defaults().clone()),
      inner_(std::move(optimizer)),
      group_(&group) {
  const std::vector<at::Tensor> params = optimizer_parameters(*inner_);
  shard(std::make_unique<detail::ShardedGradients>(params, gradients),
        std::make_unique<detail::HeldChunks>(params, group, chunks));
}

ZeroOptimizer::ZeroOptimizer(std::shared_ptr<torch::optim::Optimizer> optimizer, comm::ProcessGroup& group,
                             ddp::GradientSync& gradients, at::ScalarType param_dtype)
    : torch::optim::Optimizer(groups_of(checked(optimizer)), checked(optimizer).defaults().clone()),
      inner_(std::move(optimizer)),
      group_(&group) {
  const std::vector<at::Tensor> params = optimizer_parameters(*inner_);
  std::unique_ptr<detail::GradientSource> source;
  if (auto* sharded = dynamic_cast<ShardedReducer*>(&gradients)) {
    source = std::make_unique<detail::ShardedGradients>(params, *sharded);
  } else if (auto* averages = dynamic_cast<const ddp::Reducer*>(&gradients)) {
    source = std::make_unique<detail::BucketAverages>(params, dtype_of(params), *averages);
  } else {
    throw std::invalid_argument(
        "ZeroOptimizer: mixed precision needs the gradients from DDP's Reducer (zero1) or a ShardedReducer "
        "(zero2): pass the DDP model's gradient_sync()");
  }
  shard(std::move(source), std::make_unique<detail::MasterChunks>(params, group, param_dtype));
}

ZeroOptimizer::~ZeroOptimizer() = default;

void ZeroOptimizer::shard(std::unique_ptr<detail::GradientSource> gradients,
                          std::unique_ptr<detail::ChunkStore> chunks) {
  gradients_ = std::move(gradients);
  chunks_ = std::move(chunks);
  size_t i = 0;
  for (auto& group : inner_->param_groups()) {
    for (at::Tensor& param : group.params()) param = chunks_->slots()[i++].chunk;
  }
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
  return optimizer_state_bytes(*inner_) + chunks_->bytes();  // and the masters under mixed precision
}

std::optional<at::ScalarType> ZeroOptimizer::param_dtype() const {
  return chunks_->param_dtype();
}

at::Tensor ZeroOptimizer::step(LossClosure closure) {
  TORCH_CHECK(!closure,
              "ZeroOptimizer::step: a closure is not supported (its optimizer must be elementwise)");
  torch::NoGradGuard no_grad;
  for (size_t g = 0; g < param_groups().size(); ++g)  // a schedule changed the outer options
    inner_->param_groups()[g].set_options(param_groups()[g].options().clone());
  const auto& slots = chunks_->slots();
  for (size_t i = 0; i < slots.size(); ++i)
    slots[i].chunk.mutable_grad() = gradients_->chunk_gradient(i, chunks_->layout().chunk(i, group_->rank()));
  inner_->step();
  for (const detail::Slot& slot : slots)
    slot.chunk.mutable_grad() = at::Tensor();  // no hold on the gradients
  gradients_->consumed();
  chunks_->after_step();
  return {};
}

double ZeroOptimizer::clip_grad_norm_(double max_norm, const std::vector<at::Tensor>& others) {
  return gradients_->clip_grad_norm_(max_norm, others);
}

void ZeroOptimizer::gather_all() {
  chunks_->gather_all();
}

void ZeroOptimizer::reshard(bool from_parameters) {
  chunks_->reshard(from_parameters);
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
  size_t i = 0;
  for (auto& group : inner_->param_groups()) {
    chunks.push_back(group.params());
    for (at::Tensor& param : group.params()) param = chunks_->slots()[i++].param;
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

void ZeroOptimizer::take_inner_options() {
  for (size_t g = 0; g < param_groups().size(); ++g)
    param_groups()[g].set_options(inner_->param_groups()[g].options().clone());
  consolidated_.clear();
  consolidated_root_ = -1;
}

void ZeroOptimizer::consolidate(int root) {
  const int world = group_->size();
  const int rank = group_->rank();
  const auto& slots = chunks_->slots();
  const ChunkLayout& layout = chunks_->layout();  // a rank's row: its chunks of every parameter
  auto& state = inner_->state();
  // The state tensors' names: every rank steps the same parameters (DDP agrees on which have gradients),
  // so the first parameter with state is the same everywhere.
  std::vector<std::string> names;
  for (const detail::Slot& slot : slots) {
    const auto it = state.find(optim::detail::param_state_key(slot.chunk));
    if (it == state.end() || !names.empty()) continue;
    for (const auto& [name, tensor] : state_tensors(*it->second))
      if (tensor.defined()) names.push_back(name);
  }
  // Whole-model temporaries, for the checkpoint only.
  std::map<std::string, at::Tensor> gathered;  // name -> every rank's row
  at::Tensor send = at::zeros({layout.part()}, chunks_->options());
  for (const std::string& name : names) {
    send.zero_();
    for (size_t i = 0; i < slots.size(); ++i) {
      const auto it = state.find(optim::detail::param_state_key(slots[i].chunk));
      if (it == state.end()) continue;
      for (const auto& [field, tensor] : state_tensors(*it->second)) {
        if (field != name || !tensor.defined()) continue;
        if (tensor.numel() != slots[i].chunk.numel() || tensor.scalar_type() != send.scalar_type()) {
          throw std::runtime_error("ZeroOptimizer: the optimizer's state '" + name +
                                   "' of a parameter of shape " + c10::str(slots[i].param.sizes()) + " is " +
                                   c10::str(tensor.scalar_type()) + "[" + std::to_string(tensor.numel()) +
                                   "], not shaped like its chunk: this optimizer is not elementwise");
        }
        layout.chunk_in(send, i, rank).copy_(tensor.reshape({-1}));
      }
    }
    at::Tensor all = at::empty({layout.part() * world}, chunks_->options());
    group_->all_gather_into(all, send).wait();
    gathered[name] = all;
  }
  consolidated_.clear();
  consolidated_root_ = root;
  if (rank != root) return;
  for (size_t i = 0; i < slots.size(); ++i) {
    const auto it = state.find(optim::detail::param_state_key(slots[i].chunk));
    if (it == state.end()) continue;  // never stepped: no state, as in one process
    std::map<std::string, at::Tensor> whole;
    for (const auto& [name, all] : gathered) {
      at::Tensor tensor = at::empty({layout.numel(i)}, all.options());
      layout.unpack(all, i, tensor);
      whole[name] = tensor.view(slots[i].param.sizes());
    }
    consolidated_[optim::detail::param_state_key(slots[i].param)] = detail::with_tensors(*it->second, whole);
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
  take_inner_options();
  auto& state = inner_->state();
  state.clear();
  const auto& slots = chunks_->slots();
  for (size_t i = 0; i < slots.size(); ++i) {
    const auto it = whole.find(optim::detail::param_state_key(slots[i].param));
    if (it == whole.end()) continue;
    const ChunkRange mine = chunks_->layout().chunk(i, group_->rank());
    std::map<std::string, at::Tensor> chunks;
    for (const auto& [name, tensor] : state_tensors(*it->second)) {
      if (tensor.defined() && tensor.numel() == slots[i].param.numel())
        chunks[name] = tensor.reshape({-1}).narrow(0, mine.begin, mine.length).clone();
    }
    state[optim::detail::param_state_key(slots[i].chunk)] = detail::with_tensors(*it->second, chunks);
  }
}

void ZeroOptimizer::save_shard(torch::serialize::OutputArchive& archive) const {
  std::vector<at::Tensor> chunks;
  for (const detail::Slot& slot : chunks_->slots()) chunks.push_back(slot.chunk);
  shard::save_shard(archive, chunks, *inner_);
}

void ZeroOptimizer::load_shards(int shards, const ShardReader& read) {
  std::vector<ShardTarget> targets;
  for (size_t i = 0; i < chunks_->slots().size(); ++i) targets.push_back(chunks_->target(i));
  load_from_shards(*inner_, targets, shards, read);
  take_inner_options();
}

}  // namespace lockstep::shard
