#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "lockstep/comm/process_group.h"
#include "lockstep/ddp/ddp_options.h"
#include "lockstep/ddp/reducer.h"

namespace lockstep::ddp {

/// The model-independent part of DistributedDataParallel (parameter checks, broadcasts, the reducer).
class DdpCore {
 public:
  /// Checks that every rank has the same parameters (when asked), broadcasts parameters and buffers
  /// from rank 0, and builds the reducer. Collective: every rank must construct it.
  DdpCore(std::vector<std::pair<std::string, at::Tensor>> named_parameters,
          std::vector<std::pair<std::string, at::Tensor>> named_buffers, comm::ProcessGroup& group,
          DdpOptions options);
  ~DdpCore();

  /// Before each forward: re-broadcasts buffers from rank 0 (broadcast_buffers).
  void before_forward();

  Reducer& reducer() { return *reducer_; }
  comm::ProcessGroup& group() { return group_; }
  const DdpOptions& options() const { return options_; }

 private:
  void broadcast_coalesced(std::vector<at::Tensor>& tensors);

  comm::ProcessGroup& group_;
  DdpOptions options_;
  std::vector<at::Tensor> buffers_;
  std::unique_ptr<Reducer> reducer_;
};

/// RAII: gradient synchronisation off for its scope (PyTorch's `with ddp.no_sync():`). Backward passes
/// inside accumulate locally; the first backward after it reduces the accumulated sum.
class NoSyncGuard {
 public:
  explicit NoSyncGuard(Reducer& reducer) : reducer_(&reducer), previous_(reducer.sync()) { reducer.set_sync(false); }
  ~NoSyncGuard() {
    if (reducer_) reducer_->set_sync(previous_);
  }
  NoSyncGuard(NoSyncGuard&& other) noexcept : reducer_(other.reducer_), previous_(other.previous_) {
    other.reducer_ = nullptr;
  }
  NoSyncGuard(const NoSyncGuard&) = delete;
  NoSyncGuard& operator=(const NoSyncGuard&) = delete;
  NoSyncGuard& operator=(NoSyncGuard&&) = delete;

 private:
  Reducer* reducer_;
  bool previous_;
};

/// DistributedDataParallel for a LibTorch module: the same training loop as on one process, with each
/// rank's gradients averaged over all ranks during backward (see reducer.h for how).
///
/// `ModuleType` is a module holder (`Net`, from TORCH_MODULE) or a std::shared_ptr to a module with a
/// `forward`. Collective: construct it on every rank, with the same model.
///
/// Example:
///   auto pg = lockstep::comm::init_process_group(ProcessGroupOptions::from_environment(env));
///   Net net;
///   lockstep::ddp::DistributedDataParallel<Net> ddp(net, pg);
///   torch::optim::Adam opt(net->parameters(), 1e-3);
///   for (auto& [x, y] : batches) {
///     opt.zero_grad();
///     auto loss = torch::nll_loss(ddp.forward(x), y);
///     loss.backward();   // gradients are averaged across ranks when this returns
///     opt.step();
///   }
template <typename ModuleType>
class DistributedDataParallel {
 public:
  DistributedDataParallel(ModuleType module, comm::ProcessGroup& group, DdpOptions options = DdpOptions())
      : module_(std::move(module)),
        core_(named(module_->named_parameters(/*recurse=*/true)), named(module_->named_buffers(/*recurse=*/true)),
              group, std::move(options)) {}

  /// Runs the module's forward after the per-step preparation (buffer broadcast).
  template <typename... Args>
  decltype(auto) forward(Args&&... args) {
    core_.before_forward();
    return module_->forward(std::forward<Args>(args)...);
  }
  template <typename... Args>
  decltype(auto) operator()(Args&&... args) {
    return forward(std::forward<Args>(args)...);
  }

  /// Gradient synchronisation off until the returned guard is destroyed.
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(core_.reducer()); }

  ModuleType& module() { return module_; }
  Reducer& reducer() { return core_.reducer(); }

 private:
  template <typename Dict>
  static std::vector<std::pair<std::string, at::Tensor>> named(const Dict& dict) {
    std::vector<std::pair<std::string, at::Tensor>> out;
    for (const auto& item : dict) out.emplace_back(item.key(), item.value());
    return out;
  }

  ModuleType module_;
  DdpCore core_;
};

}  // namespace lockstep::ddp
