#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include <ATen/core/Tensor.h>

#include "lockstep/train/train_module.h"

namespace lockstep::train::detail {

/// What the Trainer does to a TrainModuleBase beyond its public API, and the only way it does it (the
/// module's one friend). The step state the module reads is the Trainer's (StepState, attached once per
/// fit); the logged table is the module's own, since log() writes it, and the Trainer reaches it here.
struct TrainModuleAccess {
  /// From now on `module` reads `state` (current_epoch(), global_step(), plan(), log()): at a fit's start.
  static void attach(TrainModuleBase& module, std::shared_ptr<const StepState> state) {
    module.state_ = std::move(state);
  }
  /// What log() has added to this epoch: the Trainer clears it, counts the samples, restores and reduces it.
  static LoggedMetrics& logged(TrainModuleBase& module) { return module.logged_; }
  /// The module's training_step / validation_step on a batch of its (erased) type.
  static at::Tensor training_step(TrainModuleBase& module, const void* batch, int64_t batch_idx) {
    return module.erased_training_step(batch, batch_idx);
  }
  static void validation_step(TrainModuleBase& module, const void* batch, int64_t batch_idx) {
    module.erased_validation_step(batch, batch_idx);
  }
  /// Under pipeline parallelism: the batch's model input and loss target (BasicTrainModule::pipeline_input).
  static std::pair<at::Tensor, at::Tensor> pipeline_input(TrainModuleBase& module, const void* batch) {
    return module.erased_pipeline_input(batch);
  }
};

}  // namespace lockstep::train::detail
