#pragma once

#include <utility>
#include <vector>

namespace lockstep::shard {

/// What keeps a model's parameters other than whole and in their master dtype between steps, and can make
/// them so for a while: FSDP (sharded parameters) and ZeroOptimizer under mixed precision (bfloat16
/// parameters over float32 master chunks).
class ShardedParameters {
 public:
  virtual ~ShardedParameters() = default;
  /// Every parameter whole and in the master dtype (the exact values the optimizer steps) until reshard(): a
  /// collective, every rank calls it between steps. Nested calls count: only the matching outermost
  /// reshard() ends it.
  virtual void gather_all() = 0;
  /// Ends gather_all(); with `from_parameters`, first this rank's chunks are taken from the whole
  /// parameters (weights were loaded into them). Local: no collective.
  virtual void reshard(bool from_parameters = false) = 0;
};

/// Every parameter of each of `models` whole for a scope: gather_all() (a collective: every rank, between
/// steps), then, when the scope ends, reshard(true), so what was loaded into the whole parameters is kept
/// (otherwise the chunks are taken back unchanged). Under FSDP forward passes inside gather nothing
/// (evaluation under torch::NoGradGuard, each rank its own number of them); scopes nest. Nothing for an
/// empty list (a strategy that keeps the parameters whole). The Trainer's validation, final weights and
/// resume, and the Accelerator's full_parameters() use it.
class FullParameters {
 public:
  explicit FullParameters(std::vector<ShardedParameters*> models);
  template <typename Model>
  explicit FullParameters(const std::vector<Model*>& models)
      : FullParameters(std::vector<ShardedParameters*>(models.begin(), models.end())) {}
  /// Never throws: a failing reshard is reported on stderr.
  ~FullParameters();
  FullParameters(FullParameters&& other) noexcept : models_(std::move(other.models_)) {
    other.models_.clear();
  }
  FullParameters(const FullParameters&) = delete;
  FullParameters& operator=(const FullParameters&) = delete;
  FullParameters& operator=(FullParameters&&) = delete;

 private:
  std::vector<ShardedParameters*> models_;
};

}  // namespace lockstep::shard
