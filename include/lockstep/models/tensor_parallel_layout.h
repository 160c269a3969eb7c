#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

namespace lockstep::comm {
class ProcessGroup;
}

namespace lockstep::models {

/// How one parameter of a tensor-parallel model lies over its group of T ranks (Megatron marks the same
/// with `tensor_model_parallel`): whole and equal on every rank (replicated: a LayerNorm, a row-parallel
/// bias), or split along `dim` into T slices, rank r holding the r-th. A fused parameter (attention's
/// q, k, v in one c_attn) is `chunks` equal blocks along `dim`, each split so: rank r holds the r-th slice
/// of every block, in block order.
struct ParameterSplit {
  int64_t dim = -1;  ///< -1: replicated
  int64_t chunks = 1;
  bool replicated() const { return dim < 0; }
};

/// A module whose parameters lie over a tensor-parallel group says how (models::TensorParallelGpt). The
/// Trainer and the Accelerator find such modules among a model's submodules (parameter_splits), to clip
/// by the whole model's norm: register the split model as a submodule, or, where its layers are
/// registered on a module of your own under their names, make that module a TensorParallelModule that
/// forwards split_of (as `lockstep fit`'s module does).
class TensorParallelModule {
 public:
  virtual ~TensorParallelModule() = default;
  /// Parameter `name`, as this module's named_parameters() names it.
  virtual ParameterSplit split_of(const std::string& name) const = 0;
  /// The group the split parameters lie over.
  virtual comm::ProcessGroup& tensor_parallel_group() const = 0;
};

/// A parameter whole from its T slices (`slices[r]`: rank r's), as `split` describes them: the slices
/// concatenated along dim, blocks put back in order for chunks > 1; slices[0] for a replicated one.
at::Tensor whole_tensor(const ParameterSplit& split, const std::vector<at::Tensor>& slices);
/// This rank's slice `local` of a parameter split over `group`, whole: an all-gather of the group (every
/// rank calls it, in the same order), then whole_tensor. A replicated one is `local` itself, no collective.
at::Tensor gather_whole(const ParameterSplit& split, const at::Tensor& local, comm::ProcessGroup& group);

/// The split of each of `model`'s parameters, in parameters() order: a parameter inside a
/// TensorParallelModule as the outermost such module says, any other replicated.
std::vector<ParameterSplit> parameter_splits(const torch::nn::Module& model);

}  // namespace lockstep::models
