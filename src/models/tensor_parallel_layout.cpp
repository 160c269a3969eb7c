#include "lockstep/models/tensor_parallel_layout.h"

#include <unordered_map>

namespace lockstep::models {

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
