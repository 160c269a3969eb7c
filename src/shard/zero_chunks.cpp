// Where ZeroOptimizer's chunks live: see zero_chunks.h.
#include "zero_chunks.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "sent_directly.h"

namespace lockstep::shard::detail {
namespace {

// A tensor of `mine` of `param`'s memory: the optimizer's view of a chunk. Not an autograd view (set_ on
// the storage), so the optimizer may treat it as a leaf of its own.
at::Tensor chunk_of(const at::Tensor& param, ChunkRange mine) {
  at::Tensor chunk = at::empty({0}, param.options().requires_grad(false));
  chunk.set_(param.storage(), param.storage_offset() + mine.begin, {mine.length}, {1});
  return chunk;
}

void check_narrower(at::ScalarType param_dtype, const at::Tensor& param) {
  if (!at::isFloatingType(param_dtype) ||
      c10::elementSize(param_dtype) >= c10::elementSize(param.scalar_type())) {
    throw std::invalid_argument("ZeroOptimizer: param_dtype " + std::string(c10::toString(param_dtype)) +
                                " is not a floating-point dtype narrower than the parameters' " +
                                c10::toString(param.scalar_type()) +
                                ": use bfloat16 (or float16) over float32 parameters");
  }
}

}  // namespace

ChunkStore::ChunkStore(const std::vector<at::Tensor>& params, comm::ProcessGroup& group,
                       const MakeChunk& make_chunk)
    : group_(group) {
  std::vector<int64_t> numels;
  for (const at::Tensor& param : params) {
    if (!param.is_contiguous()) {
      throw std::invalid_argument("ZeroOptimizer: a parameter of shape " + c10::str(param.sizes()) +
                                  " is not contiguous: its chunks must be plain ranges of its memory");
    }
    const ChunkRange mine = ChunkLayout::chunk(param.numel(), group.rank(), group.size());
    at::Tensor chunk = make_chunk(param, mine);
    if (!chunk.defined() || chunk.numel() != mine.length) {
      throw std::invalid_argument("ZeroOptimizer: the chunk given for a parameter of shape " +
                                  c10::str(param.sizes()) + " does not hold its " +
                                  std::to_string(mine.length) + " elements of rank " +
                                  std::to_string(group.rank()));
    }
    // The chunks' dtype (FSDP's master shards may be float32 under bfloat16 parameters).
    if (slots_.empty()) {
      options_ = chunk.options().requires_grad(false);
    } else if (chunk.scalar_type() != options_.dtype().toScalarType() ||
               chunk.device() != options_.device()) {
      throw std::invalid_argument("ZeroOptimizer: the parameters mix " + c10::str(options_.dtype()) + " on " +
                                  options_.device().str() + " with " + c10::str(chunk.scalar_type()) +
                                  " on " + chunk.device().str() + ": shard one dtype on one device");
    }
    slots_.push_back(Slot{param, chunk});
    numels.push_back(param.numel());
  }
  layout_ = ChunkLayout(std::move(numels), group.size());
}

ParameterChunks::ParameterChunks(const std::vector<at::Tensor>& params, comm::ProcessGroup& group)
    : ParameterChunks(params, group, chunk_of, params.empty() ? at::kFloat : params.front().scalar_type()) {}

ParameterChunks::ParameterChunks(const std::vector<at::Tensor>& params, comm::ProcessGroup& group,
                                 const MakeChunk& make_chunk, at::ScalarType gathered)
    : ChunkStore(params, group, make_chunk) {
  for (const Slot& slot : slots_) locals_.push_back(slot.chunk);
  // shm, Gloo and NCCL read the input before writing the output; MPI forbids aliasing them (MPI_IN_PLACE).
  const comm::Backend backend = group.backend();
  in_place_ =
      backend == comm::Backend::kShm || backend == comm::Backend::kGloo || backend == comm::Backend::kNccl;
  plan(options_.dtype(gathered));
}

// A parameter of at least kDirectBytes whose size divides by the world is gathered straight into its own
// memory; the others are packed, in order, into buckets whose gathered size stays under 16 MiB.
void ParameterChunks::plan(const at::TensorOptions& gathered) {
  const int world = group_.size();
  const int64_t element = static_cast<int64_t>(c10::elementSize(gathered.dtype().toScalarType()));
  const int64_t bucket_cap = std::max<int64_t>(1, (int64_t{16} << 20) / (element * world));
  std::vector<std::vector<size_t>> members;
  std::vector<int64_t> parts;
  int64_t send = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const int64_t stride = layout_.stride(i);
    if (sent_directly(slots_[i].param, world)) {
      direct_.push_back(i);
      if (!in_place_) send = std::max(send, stride);  // straight into the parameter
      continue;
    }
    if (parts.empty() || (parts.back() > 0 && parts.back() + stride > bucket_cap)) {
      members.emplace_back();
      parts.push_back(0);
    }
    members.back().push_back(i);
    parts.back() += stride;
    send = std::max(send, parts.back());
  }
  int64_t largest_bucket = 0;
  for (auto& slots : members) {
    std::vector<int64_t> numels;
    for (size_t i : slots) numels.push_back(layout_.numel(i));
    buckets_.push_back(Bucket{ChunkLayout(std::move(numels), world), std::move(slots)});
    largest_bucket = std::max(largest_bucket, buckets_.back().layout.part());
  }
  send_ = at::empty({send}, gathered);
  receive_ = at::empty({largest_bucket * world}, gathered);
}

void ParameterChunks::gather() {
  const int world = group_.size();
  const int rank = group_.rank();
  for (size_t i : direct_) {
    // detach(): a backend may write from a thread of its own, where grad mode is on, and an autograd view
    // of a parameter must not be written there.
    at::Tensor flat = slots_[i].param.detach().view({-1});
    at::Tensor mine = locals_[i];  // its own place in `flat`: gathered in place where the backend allows
    if (!in_place_) mine = send_.narrow(0, 0, layout_.stride(i)).copy_(locals_[i]);
    group_.all_gather_into(flat, mine).wait();
  }
  for (const Bucket& bucket : buckets_) {
    at::Tensor mine = send_.narrow(0, 0, bucket.layout.part());
    at::Tensor all = receive_.narrow(0, 0, bucket.layout.part() * world);
    for (size_t j = 0; j < bucket.slots.size(); ++j)
      bucket.layout.chunk_in(mine, j, rank).copy_(locals_[bucket.slots[j]]);
    group_.all_gather_into(all, mine).wait();
    for (size_t j = 0; j < bucket.slots.size(); ++j)
      bucket.layout.unpack(all, j, slots_[bucket.slots[j]].param.detach().view({-1}));
  }
}

ShardTarget ParameterChunks::target(size_t i) const {
  // The parameter lives whole here (its chunk shares its memory).
  const Slot& slot = slots_[i];
  const int64_t numel = layout_.numel(i);
  return ShardTarget{
      numel, slot.param.detach().view({-1}), {0, numel}, slot.chunk, layout_.chunk(i, group_.rank()), {}, {}};
}

MasterChunks::MasterChunks(const std::vector<at::Tensor>& params, comm::ProcessGroup& group,
                           at::ScalarType param_dtype)
    : ParameterChunks(
          params, group,
          [param_dtype](const at::Tensor& param, ChunkRange mine) {
            check_narrower(param_dtype, param);
            return chunk_of(param, mine).clone();
          },
          param_dtype),  // gathered as computed
      param_dtype_(param_dtype) {
  // Every master chunk is taken: the parameters may be cast.
  for (size_t i = 0; i < slots_.size(); ++i) retype(i, param_dtype, /*values=*/true);
}

// As Module::to does, through set_data: autograd then makes a new gradient accumulator, which DDP's hook
// refresh before the next forward finds.
void MasterChunks::retype(size_t i, at::ScalarType dtype, bool values) {
  torch::NoGradGuard no_grad;
  at::Tensor param = slots_[i].param;
  param.set_data(values ? param.detach().to(dtype)
                        : at::empty(param.sizes(), param.options().dtype(dtype).requires_grad(false)));
  if (param.grad().defined()) param.mutable_grad() = param.grad().to(dtype);  // between backward and step
  locals_[i] = chunk_of(param, layout_.chunk(i, group_.rank()));
}

void MasterChunks::after_step() {
  for (size_t i = 0; i < slots_.size(); ++i) locals_[i].copy_(slots_[i].chunk);  // cast into the parameters
  gather();
}

void MasterChunks::gather_all() {
  if (holds_ > 0) {
    ++holds_;
    return;
  }
  torch::NoGradGuard no_grad;
  const int world = group_.size();
  for (size_t i = 0; i < slots_.size(); ++i) {
    retype(i, options_.dtype().toScalarType(), /*values=*/false);
    const ChunkLayout one({layout_.numel(i)}, world);
    if (one.part() == 0) continue;  // an empty parameter
    at::Tensor all = at::empty({one.part() * world}, options_);
    at::Tensor mine = at::zeros({one.part()}, options_);  // the last ranks' chunks may be short
    mine.narrow(0, 0, slots_[i].chunk.numel()).copy_(slots_[i].chunk);
    group_.all_gather_into(all, mine).wait();
    one.unpack(all, 0, slots_[i].param.detach().view({-1}));
  }
  holds_ = 1;  // only once whole: a failed gather (the group failed) holds nothing
}

void MasterChunks::reshard(bool from_parameters) {
  TORCH_CHECK(holds_ > 0, "ZeroOptimizer::reshard: the parameters are not whole: gather_all() first");
  if (holds_-- > 1) return;  // an outer gather_all still holds them; its reshard ends it
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (from_parameters) {
      const ChunkRange mine = layout_.chunk(i, group_.rank());
      slots_[i].chunk.copy_(slots_[i].param.detach().view({-1}).narrow(0, mine.begin, mine.length));
    }
    retype(i, param_dtype_, /*values=*/true);
  }
}

ShardTarget MasterChunks::target(size_t i) const {
  // The parameter cast, its master chunk exact.
  ShardTarget target = ParameterChunks::target(i);
  target.master = slots_[i].chunk;
  target.master_range = layout_.chunk(i, group_.rank());
  return target;
}

int64_t MasterChunks::bytes() const {
  int64_t bytes = 0;
  for (const Slot& slot : slots_) bytes += static_cast<int64_t>(slot.chunk.nbytes());
  return bytes;
}

HeldChunks::HeldChunks(const std::vector<at::Tensor>& params, comm::ProcessGroup& group,
                       const std::function<at::Tensor(const at::Tensor& param)>& chunks)
    : ChunkStore(params, group, [&chunks](const at::Tensor& param, ChunkRange) { return chunks(param); }) {}

ShardTarget HeldChunks::target(size_t i) const {
  // Only the chunk lives here.
  const ChunkRange mine = layout_.chunk(i, group_.rank());
  return ShardTarget{layout_.numel(i), slots_[i].chunk, mine, slots_[i].chunk, mine, {}, {}};
}

}  // namespace lockstep::shard::detail
