#include "lockstep/models/tensor_parallel_layout.h"

#include <unordered_map>

#include <ATen/ATen.h>

#include "lockstep/comm/process_group.h"

namespace lockstep::models {

at::Tensor whole_tensor(const ParameterSplit& split, const std::vector<at::Tensor>& slices) {
  if (split.replicated()) return slices.at(0);
  const at::Tensor whole = at::cat(slices, split.dim);
  if (split.chunks == 1) return whole;
  // Rank-major [b0_r0 b1_r0 .. | b0_r1 b1_r1 .. | ..] along dim, to block-major [b0_r0 b0_r1 .. | b1_r0 ..].
  const at::Tensor front = whole.movedim(split.dim, 0);
  const auto ranks = static_cast<int64_t>(slices.size());
  std::vector<int64_t> shape{ranks, split.chunks, front.size(0) / (ranks * split.chunks)};
  for (int64_t d = 1; d < front.dim(); ++d) shape.push_back(front.size(d));
  return front.reshape(shape).transpose(0, 1).reshape(front.sizes()).movedim(0, split.dim);
}

at::Tensor gather_whole(const ParameterSplit& split, const at::Tensor& local, comm::ProcessGroup& group) {
  if (split.replicated()) return local;
  return whole_tensor(split, group.all_gather_stacked(local.detach().contiguous()).unbind(0));
}

std::vector<ParameterSplit> parameter_splits(const torch::nn::Module& model) {
  // Each parameter's split, keyed by its storage: the outermost TensorParallelModule names it first.
  std::unordered_map<const void*, ParameterSplit> splits;
  for (const auto& item : model.named_modules(/*name_prefix=*/"", /*include_self=*/true)) {
    const auto* split = dynamic_cast<const TensorParallelModule*>(item.value().get());
    if (split == nullptr) continue;
    for (const auto& parameter : item.value()->named_parameters())
      splits.emplace(parameter.value().unsafeGetTensorImpl(), split->split_of(parameter.key()));
  }
  std::vector<ParameterSplit> out;
  for (const auto& parameter : model.parameters()) {
    const auto found = splits.find(parameter.unsafeGetTensorImpl());
    out.push_back(found == splits.end() ? ParameterSplit{} : found->second);
  }
  return out;
}

}  // namespace lockstep::models
