#include "lockstep/ddp/distributed_data_parallel.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cstring>
#include <map>
#include <sstream>
#include <stdexcept>

namespace lockstep::ddp {
namespace {

std::string describe(const std::string& name, const at::Tensor& t) {
  std::ostringstream out;
  out << "'" << name << "' " << t.scalar_type() << t.sizes();
  return out.str();
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Same parameters (count, names, dtypes, shapes) on every rank, or an error naming the first difference
// and the ranks — raised identically on every rank, so none is left waiting.
void check_consistency(comm::ProcessGroup& group,
                       const std::vector<std::pair<std::string, at::Tensor>>& params) {
  std::ostringstream signature;
  for (const auto& [name, t] : params) signature << describe(name, t) << "\n";
  const auto all = group.all_gather_strings(signature.str());
  const auto reference = split_lines(all[0]);
  for (int r = 1; r < group.size(); ++r) {
    if (all[r] == all[0]) continue;
    const auto theirs = split_lines(all[r]);
    const size_t common = std::min(reference.size(), theirs.size());
    std::ostringstream msg;
    msg << "DistributedDataParallel: the model differs across ranks: ";
    size_t i = 0;
    while (i < common && reference[i] == theirs[i]) ++i;
    if (i < common) {
      msg << "parameter #" << i << " is " << reference[i] << " on rank 0 but " << theirs[i] << " on rank "
          << r;
    } else {
      msg << "rank 0 has " << reference.size() << " parameters but rank " << r << " has " << theirs.size()
          << " (first extra: " << (reference.size() > theirs.size() ? reference[i] : theirs[i]) << " on rank "
          << (reference.size() > theirs.size() ? 0 : r) << ")";
    }
    msg << ". Every rank must build the same model (same layers, sizes and dtypes) before wrapping it.";
    TORCH_CHECK(false, msg.str());
  }
}

}  // namespace

DdpCore::DdpCore(std::vector<std::pair<std::string, at::Tensor>> named_parameters,
                 std::vector<std::pair<std::string, at::Tensor>> named_buffers, comm::ProcessGroup& group,
                 DdpOptions options)
    : group_(group), options_(std::move(options)) {
  options_.validate();
  if (options_.check_model_consistency() && group_.size() > 1) check_consistency(group_, named_parameters);
  std::vector<at::Tensor> trainable;
  std::vector<std::string> trainable_names;
  for (auto& [name, t] : named_parameters) {
    parameters_.push_back(t);
    if (t.requires_grad()) {
      trainable.push_back(t);
      trainable_names.push_back(name);
    }
  }
  std::vector<at::Tensor> buffers;
  for (auto& b : named_buffers) buffers.push_back(b.second);
  if (group_.size() > 1) {
    buffer_groups_ = flat_groups(buffers);
    if (options_.init_sync()) {
      auto parameter_groups = flat_groups(parameters_);
      broadcast_flat(parameter_groups, 0);
      broadcast_flat(buffer_groups_, 0);
    }
  }
  if (options_.gradient_sync()) {
    sync_ = options_.gradient_sync()(std::move(trainable), std::move(trainable_names), group_, options_);
    TORCH_CHECK(sync_, "DdpOptions::gradient_sync returned no synchroniser");
  } else {
    sync_ = std::make_unique<Reducer>(std::move(trainable), std::move(trainable_names), group_, options_);
  }
}

Reducer& DdpCore::reducer() {
  auto* reducer = dynamic_cast<Reducer*>(sync_.get());
  if (reducer == nullptr) {
    throw std::logic_error(
        "DistributedDataParallel::reducer(): this model synchronises gradients with "
        "DdpOptions::gradient_sync, "
        "not the Reducer: use gradient_sync()");
  }
  return *reducer;
}

DdpCore::~DdpCore() = default;

void DdpCore::before_forward() {
  sync_->refresh_hooks();  // weights loaded into the wrapped model since the last forward
  if (joining_) {
    // [ranks still training, ranks that will synchronise this backward]; joined ranks add zeros.
    join_flags_[0] = 1;
    join_flags_[1] = sync_->sync() ? 1 : 0;
    group_.all_reduce(join_flags_).wait();
    ++join_iterations_;
  }
  sync_buffers();
}

void DdpCore::begin_join() {
  TORCH_CHECK(!joining_, "DistributedDataParallel::join(): already in join mode");
  joining_ = true;
  join_iterations_ = 0;
  join_flags_ = at::zeros({2}, at::kLong);
}

void DdpCore::finish_join() {
  TORCH_CHECK(joining_, "JoinGuard::finish(): not in join mode");
  joining_ = false;
  // Shadow the ranks still training: mirror their before_forward and backward collectives.
  while (true) {
    join_flags_.zero_();
    group_.all_reduce(join_flags_).wait();
    if (join_flags_[0].item<int64_t>() == 0) break;  // everyone has joined
    sync_buffers();
    if (join_flags_[1].item<int64_t>() > 0) sync_->reduce_zeros();
  }
  // The rank that trained the most iterations (highest rank on ties) holds the final model.
  auto key = at::full({1}, join_iterations_ * group_.size() + group_.rank(), at::kLong);
  group_.all_reduce(key, comm::ReduceOp::kMax).wait();
  const int authority = static_cast<int>(key.item<int64_t>() % group_.size());
  if (group_.size() > 1) {
    auto parameter_groups = flat_groups(parameters_);
    broadcast_flat(parameter_groups, authority);
  }
}

std::vector<DdpCore::FlatGroup> DdpCore::flat_groups(const std::vector<at::Tensor>& tensors) {
  std::map<at::ScalarType, std::vector<at::Tensor>> by_dtype;
  for (const auto& t : tensors) {
    if (t.defined() && t.numel() > 0) by_dtype[t.scalar_type()].push_back(t.detach());
  }
  std::vector<FlatGroup> groups;
  const auto close = [&groups](std::vector<at::Tensor>& members, int64_t total) {
    if (members.empty()) return;
    // One contiguous tensor travels as it is; several are packed into a flat copy.
    at::Tensor flat = members.size() == 1 && members.front().is_contiguous()
                          ? members.front().view({-1})
                          : at::empty({total}, members.front().options());
    groups.push_back({flat, std::move(members)});
    members.clear();
  };
  for (auto& [dtype, members] : by_dtype) {
    std::vector<at::Tensor> open;
    int64_t total = 0;
    for (auto& t : members) {
      if (!open.empty() && (total + t.numel()) * t.element_size() > kFlatGroupBytes) {
        close(open, total);
        total = 0;
      }
      open.push_back(t);
      total += t.numel();
    }
    close(open, total);
  }
  return groups;
}

void DdpCore::sync_buffers() {
  // buffer_groups_ is empty on one rank or without buffers.
  if (options_.broadcast_buffers() && !buffer_groups_.empty()) broadcast_flat(buffer_groups_, 0);
}

void DdpCore::broadcast_flat(std::vector<FlatGroup>& groups, int root) {
  at::NoGradGuard no_grad;
  for (auto& [flat, tensors] : groups) {
    if (tensors.size() == 1 && flat.data_ptr() == tensors.front().data_ptr()) {  // travels as it is
      group_.broadcast(flat, root).wait();
      continue;
    }
    int64_t offset = 0;
    if (group_.rank() == root) {
      for (auto& t : tensors) {
        flat.narrow(0, offset, t.numel()).copy_(t.reshape({-1}));
        offset += t.numel();
      }
    }
    group_.broadcast(flat, root).wait();
    if (group_.rank() == root) continue;
    offset = 0;
    for (auto& t : tensors) {
      t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
}

}  // namespace lockstep::ddp
