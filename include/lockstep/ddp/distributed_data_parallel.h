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

  /// Before each forward: in join mode, the per-iteration join count; then re-broadcasts buffers from
  /// rank 0 (broadcast_buffers).
  void before_forward();

  /// Join mode on (see DistributedDataParallel::join).
  void begin_join();
  /// This rank has run out of inputs: shadow the others' iterations until every rank has joined, then
  /// give every rank the parameters of the rank that trained longest. Collective; blocking.
  void finish_join();
  bool joining() const { return joining_; }

  /// What synchronises the gradients (the Reducer unless DdpOptions::gradient_sync says otherwise).
  GradientSync& gradient_sync() { return *sync_; }
  /// The Reducer; std::logic_error when gradient_sync() is something else.
  Reducer& reducer();
  comm::ProcessGroup& group() { return group_; }
  const DdpOptions& options() const { return options_; }

 private:
  /// Tensors of one dtype travelling as one flat tensor (kept between calls for the buffers): at most
  /// kFlatGroupBytes each, so the copy is never a second model; a larger tensor travels alone, as it is.
  static constexpr int64_t kFlatGroupBytes = int64_t{16} << 20;
  struct FlatGroup {
    at::Tensor flat;
    std::vector<at::Tensor> tensors;  // detached aliases of the originals
  };
  static std::vector<FlatGroup> flat_groups(const std::vector<at::Tensor>& tensors);
  /// One broadcast per group from `root`: pack on the root, unpack elsewhere.
  void broadcast_flat(std::vector<FlatGroup>& groups, int root);
  /// Re-broadcasts the buffers from rank 0 when broadcast_buffers is on.
  void sync_buffers();

  comm::ProcessGroup& group_;
  DdpOptions options_;
  std::vector<at::Tensor> parameters_;
  std::unique_ptr<GradientSync> sync_;
  bool joining_ = false;
  int64_t join_iterations_ = 0;  // forwards this rank ran in join mode
  at::Tensor join_flags_;        // [active, sync], reused every iteration
  // The buffers' flat groups, built once: no allocation per forward.
  std::vector<FlatGroup> buffer_groups_;
};

/// Uneven inputs (PyTorch's `with model.join():`). Between `ddp.join()` and `JoinGuard::finish()`,
/// every forward first all-reduces how many ranks are still training; a rank that runs out of batches
/// calls finish(), which matches the others' collectives with zero gradients until all have finished,
/// so no rank hangs. Gradients of an iteration are divided by the full world size (PyTorch's default),
/// joined ranks do not step, and at the end all ranks get the parameters of the rank that trained the
/// most iterations. Inside the scope, run exactly one forward and one backward per iteration.
///
/// Example:
///   auto join = ddp.join();
///   for (auto& batch : my_uneven_batches) { opt.zero_grad(); loss(ddp.forward(batch)).backward();
///   opt.step(); } join.finish();
class JoinGuard {
 public:
  explicit JoinGuard(DdpCore& core) : core_(&core) { core.begin_join(); }
  JoinGuard(JoinGuard&& other) noexcept : core_(other.core_) { other.core_ = nullptr; }
  JoinGuard(const JoinGuard&) = delete;
  JoinGuard& operator=(const JoinGuard&) = delete;
  JoinGuard& operator=(JoinGuard&&) = delete;
  /// Collective: this rank is out of inputs. Must be called on every rank.
  void finish() {
    if (core_ != nullptr) {
      DdpCore* core = core_;
      core_ = nullptr;
      core->finish_join();
    }
  }
  /// finish() must have been called: a destructor cannot run collectives safely while unwinding.
  ~JoinGuard() = default;

 private:
  DdpCore* core_;
};

/// RAII: gradient synchronisation off for its scope (PyTorch's `with ddp.no_sync():`). Backward passes
/// inside accumulate locally; the first backward after it reduces the accumulated sum.
class NoSyncGuard {
 public:
  explicit NoSyncGuard(GradientSync& sync) : sync_(&sync), previous_(sync.sync()) { sync.set_sync(false); }
  ~NoSyncGuard() {
    if (sync_) sync_->set_sync(previous_);
  }
  NoSyncGuard(NoSyncGuard&& other) noexcept : sync_(other.sync_), previous_(other.previous_) {
    other.sync_ = nullptr;
  }
  NoSyncGuard(const NoSyncGuard&) = delete;
  NoSyncGuard& operator=(const NoSyncGuard&) = delete;
  NoSyncGuard& operator=(NoSyncGuard&&) = delete;

 private:
  GradientSync* sync_;
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
        core_(named(module_->named_parameters(/*recurse=*/true)),
              named(module_->named_buffers(/*recurse=*/true)), group, std::move(options)) {}

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

  /// The per-step preparation of forward() without the forward: for callers that run the module's own
  /// methods instead (the Trainer calls TrainModule::training_step, as Lightning's DDP wrapper does).
  void before_forward() { core_.before_forward(); }

  /// Join mode for uneven inputs until the guard's finish() (see JoinGuard).
  [[nodiscard]] JoinGuard join() { return JoinGuard(core_); }

  /// Gradient synchronisation off until the returned guard is destroyed.
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(core_.gradient_sync()); }

  ModuleType& module() { return module_; }
  GradientSync& gradient_sync() { return core_.gradient_sync(); }
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
