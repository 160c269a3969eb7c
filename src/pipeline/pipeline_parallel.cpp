// Pipeline parallelism of a Staged model: see include/lockstep/pipeline/pipeline_parallel.h.
#include "lockstep/pipeline/pipeline_parallel.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <stdexcept>
#include <string>
#include <unordered_set>

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/autograd.h>
#include <torch/utils.h>

#include "lockstep/models/classifier.h"
#include "lockstep/optim/clip_coefficient.h"
#include "lockstep/pipeline/partition.h"

namespace lockstep::pipeline {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

PipelineParallel::PipelineParallel(std::shared_ptr<torch::nn::Module> module, models::Staged& staged,
                                   comm::ProcessGroup& group, PipelineOptions options)
    : module_(std::move(module)),
      staged_(&staged),
      group_(&group),
      options_(std::move(options)),
      stage_(group.rank()),
      stages_(group.size()),
      calls_(staged.forward_stages()),
      modules_(staged.stage_modules()),
      links_(group, "pp") {
  if (options_.micro_batches < 1) {
    throw std::invalid_argument("PipelineParallel: micro_batches must be >= 1, got " +
                                std::to_string(options_.micro_batches));
  }
  for (size_t index : calls_) {
    if (index >= modules_.size()) {
      throw std::invalid_argument("PipelineParallel: Staged::forward_stages names stage " +
                                  std::to_string(index) + " but the model has " +
                                  std::to_string(modules_.size()) + " stage modules");
    }
  }
  if (options_.cut.empty()) {
    std::vector<int64_t> cost;
    for (size_t index : calls_) cost.push_back(models::count_parameters(*modules_[index]));
    bounds_ = balanced_cut(cost, stages_);
  } else {
    bounds_ = user_cut(options_.cut, calls_.size(), stages_);
  }
  users_.resize(modules_.size());
  for (int s = 0; s < stages_; ++s) {
    for (size_t k = bounds_[s]; k < bounds_[s + 1]; ++k) {
      auto& users = users_[calls_[k]];
      if (users.empty() || users.back() != s) users.push_back(s);
    }
  }
  torch::NoGradGuard no_grad;
  for (auto& p : module_->parameters()) {
    device_ = p.device();
    group.broadcast(p, 0).wait();
  }
  for (auto& b : module_->buffers()) group.broadcast(b, 0).wait();
  release_others();
}

PipelineParallel::~PipelineParallel() {
  try {
    restore_shapes(/*poison=*/true);
  } catch (...) {  // out of memory: the parameters stay empty
  }
  if (failed_) return;  // the links may hold a failed step's transfers: leave them without waiting
  try {
    shutdown();
  } catch (...) {  // a destructor may run while an exception unwinds: the links' error is already known
  }
}

bool PipelineParallel::holds(size_t index) const {
  const auto& users = users_.at(index);
  return std::find(users.begin(), users.end(), stage_) != users.end();
}

std::vector<at::Tensor> PipelineParallel::parameters() const {
  std::vector<at::Tensor> out;
  for (size_t m = 0; m < modules_.size(); ++m) {
    if (!holds(m)) continue;
    for (const auto& p : modules_[m]->parameters())
      if (p.requires_grad()) out.push_back(p);
  }
  return out;
}

std::vector<at::Tensor> PipelineParallel::buffers() const {
  std::vector<at::Tensor> out;
  for (size_t m = 0; m < modules_.size(); ++m) {
    if (!holds(m)) continue;
    for (const auto& b : modules_[m]->buffers()) out.push_back(b);
  }
  return out;
}

at::Tensor PipelineParallel::run_stage(size_t index, const std::function<at::Tensor(at::Tensor)>& stage,
                                       at::Tensor x) {
  const size_t k = call_++;
  if (k >= calls_.size() || calls_[k] != index) {
    throw std::logic_error("PipelineParallel: the forward ran stage " + std::to_string(index) + " as call " +
                           std::to_string(k) + ", but Staged::forward_stages() says " +
                           (k < calls_.size()
                                ? "stage " + std::to_string(calls_[k])
                                : "there are only " + std::to_string(calls_.size()) + " calls") +
                           ": make forward_stages() list forward's run_stage calls in order");
  }
  if (k < bounds_[stage_] || k >= bounds_[stage_ + 1]) return x;  // another stage's call
  if (k == bounds_[stage_] && stage_ > 0) x = received_;
  produced_ = stage(std::move(x));
  return produced_;
}

void PipelineParallel::forward_micro_batch(int i, const at::Tensor& input, const at::Tensor& target,
                                           const Forward& forward, const Loss& loss, int64_t batch) {
  InFlight& mb = in_flight_[static_cast<size_t>(i)];
  received_ = at::Tensor();
  if (stage_ > 0) {
    const auto start = Clock::now();
    received_ = links_.receive_previous(device_);
    waited_seconds_ += seconds_since(start);
    if (at::isFloatingType(received_.scalar_type())) received_.requires_grad_(true);
    mb.input = received_;
  }
  call_ = 0;
  produced_ = at::Tensor();
  const at::Tensor out = forward(input);
  if (call_ != calls_.size()) {
    throw std::logic_error("PipelineParallel: the forward made " + std::to_string(call_) +
                           " stage calls, but Staged::forward_stages() lists " +
                           std::to_string(calls_.size()));
  }
  if (!out.is_same(produced_)) {
    throw std::logic_error(
        "PipelineParallel: the forward computes outside its run_stage calls after stage call " +
        std::to_string(bounds_[stage_ + 1] - 1) +
        ": a pipelined model must do all its work inside its stages");
  }
  received_ = at::Tensor();
  produced_ = at::Tensor();
  if (stage_ + 1 < stages_) {
    links_.send_next(out);
    mb.output = out;
  } else {
    const double weight = static_cast<double>(input.size(0)) / static_cast<double>(batch);
    mb.output = loss(out, target) * weight;
    const at::Tensor value = mb.output.detach().to(at::kDouble);
    loss_sum_ = loss_sum_.defined() ? loss_sum_ + value : value;
  }
  held_ += 1;
  peak_held_ = std::max(peak_held_, held_);
}

void PipelineParallel::backward_micro_batch(int i) {
  InFlight& mb = in_flight_[static_cast<size_t>(i)];
  links_.release_received();  // what the neighbours have taken (1F1B's activations among them)
  if (stage_ + 1 < stages_) {
    const auto start = Clock::now();
    const at::Tensor grad = links_.receive_next(device_);
    waited_seconds_ += seconds_since(start);
    if (mb.output.requires_grad()) torch::autograd::backward({mb.output}, {grad});
  } else if (mb.output.requires_grad()) {
    mb.output.backward();
  }
  if (stage_ > 0) {
    const at::Tensor grad = mb.input.grad();
    links_.send_previous(grad.defined() ? grad : at::zeros_like(mb.input));
  }
  mb = InFlight{};
  held_ -= 1;
}

double PipelineParallel::forward_backward(const at::Tensor& input, const at::Tensor& target,
                                          const Forward& forward, const Loss& loss) {
  const int64_t batch = input.size(0);
  if (batch < 1 || target.size(0) != batch) {
    throw std::invalid_argument("PipelineParallel: a batch of " + std::to_string(batch) + " inputs and " +
                                std::to_string(target.size(0)) +
                                " targets: give at least one sample, and as many targets as inputs");
  }
  // A batch smaller than micro_batches (an epoch's short last one) runs as one micro-batch per sample.
  const int M = static_cast<int>(std::min<int64_t>(options_.micro_batches, batch));
  if (failed_) {
    throw std::logic_error("PipelineParallel: an earlier forward_backward failed on stage " +
                           std::to_string(stage_) +
                           ": its links may still hold that step's transfers; build a new PipelineParallel "
                           "(on every stage) to go on");
  }
  const std::vector<at::Tensor> inputs = input.tensor_split(M);
  const std::vector<at::Tensor> targets = target.tensor_split(M);
  const auto start = Clock::now();
  waited_seconds_ = 0.0;
  in_flight_.assign(static_cast<size_t>(M), InFlight{});
  loss_sum_ = at::Tensor();
  held_ = 0;
  peak_held_ = 0;
  const RunnerScope runner(*staged_, this);
  try {
    const std::vector<at::Tensor> earlier = stash_shared_gradients();
    for (const Action& action : stage_actions(options_.schedule, stages_, M, stage_)) {
      const int i = action.micro_batch;
      if (action.pass == Action::Pass::kForward) {
        forward_micro_batch(i, inputs[static_cast<size_t>(i)], targets[static_cast<size_t>(i)], forward, loss,
                            batch);
      } else {
        backward_micro_batch(i);
      }
    }
    links_.wait_sends();
    reduce_shared_gradients(earlier);
    at::Tensor total = loss_sum_.defined() ? loss_sum_.cpu().reshape({1}) : at::zeros({1}, at::kDouble);
    group_->broadcast(total, stages_ - 1).wait();
    step_seconds_ = seconds_since(start);
    return total.item<double>();
  } catch (...) {
    failed_ = true;
    throw;
  }
}

std::vector<at::Tensor> PipelineParallel::stash_shared_gradients() {
  // A shared module's gradient is summed over its stages after each step: what earlier calls accumulated
  // (gradient accumulation) is set aside first, so that it is not summed again.
  std::vector<at::Tensor> earlier;
  for (size_t m = 0; m < modules_.size(); ++m) {
    if (users_[m].size() < 2 || !holds(m)) continue;
    for (auto& p : modules_[m]->parameters()) {
      earlier.push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
      if (p.grad().defined()) p.mutable_grad().zero_();
    }
  }
  return earlier;
}

void PipelineParallel::reduce_shared_gradients(const std::vector<at::Tensor>& earlier) {
  std::vector<at::Tensor> grads;
  for (size_t m = 0; m < modules_.size(); ++m) {
    if (users_[m].size() < 2) continue;
    for (auto& p : modules_[m]->parameters()) {
      // Every stage takes part (a collective of the group); the stages that do not hold it add zeros (of
      // its whole shape: their copy of it is freed).
      if (!holds(m) || !p.grad().defined()) p.mutable_grad() = at::zeros(whole_sizes(p), p.options());
      grads.push_back(p.grad());
    }
  }
  if (grads.empty()) return;
  group_->all_reduce(grads, comm::ReduceOp::kSum).wait();
  size_t k = 0;
  torch::NoGradGuard no_grad;
  for (size_t m = 0; m < modules_.size(); ++m) {
    if (users_[m].size() < 2) continue;
    for (auto& p : modules_[m]->parameters()) {
      if (!holds(m)) {
        p.mutable_grad() = at::Tensor();  // not this stage's: keep no gradient for it
      } else if (earlier[k++].defined()) {
        p.mutable_grad().add_(earlier[k - 1]);
      }
    }
  }
}

std::vector<at::Tensor> PipelineParallel::held_parameters() const {
  std::vector<at::Tensor> out;
  for (size_t m = 0; m < modules_.size(); ++m)
    if (holds(m) || users_[m].empty())
      for (const auto& p : modules_[m]->parameters()) out.push_back(p);
  return out;
}

void PipelineParallel::release_others() {
  if (released()) return;
  std::unordered_set<const void*> held;
  for (const at::Tensor& p : held_parameters()) held.insert(p.unsafeGetTensorImpl());
  torch::NoGradGuard no_grad;
  for (size_t m = 0; m < modules_.size(); ++m) {
    if (holds(m) || users_[m].empty()) continue;  // a module no call uses stays on every stage
    for (at::Tensor& p : modules_[m]->parameters()) {
      // A tensor this stage holds through another module stays; one freed already is not freed twice.
      if (!held.insert(p.unsafeGetTensorImpl()).second) continue;
      released_.emplace_back(p, p.sizes().vec());
      p.set_data(at::empty({0}, p.options()));
    }
  }
}

std::vector<int64_t> PipelineParallel::whole_sizes(const at::Tensor& p) const {
  for (const auto& [freed, sizes] : released_)
    if (freed.unsafeGetTensorImpl() == p.unsafeGetTensorImpl()) return sizes;
  return p.sizes().vec();
}

void PipelineParallel::restore_shapes(bool poison) {
  torch::NoGradGuard no_grad;
  for (auto& [p, sizes] : released_) {
    p.set_data(at::empty(sizes, p.options()));
    if (poison && at::isFloatingType(p.scalar_type())) p.fill_(std::numeric_limits<double>::quiet_NaN());
  }
  released_.clear();
}

void PipelineParallel::gather_whole() {
  restore_shapes();
  torch::NoGradGuard no_grad;
  for (size_t m = 0; m < modules_.size(); ++m) {
    const int root = users_[m].empty() ? 0 : users_[m].front();
    for (auto& p : modules_[m]->parameters()) group_->broadcast(p, root).wait();
    for (auto& b : modules_[m]->buffers()) group_->broadcast(b, root).wait();
  }
}

double PipelineParallel::clip_grad_norm(double max_norm) {
  // Each module's squares are added by the first stage that holds it, so a shared one counts once.
  at::Tensor squares = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(device_));
  for (size_t m = 0; m < modules_.size(); ++m) {
    if (users_[m].empty() || users_[m].front() != stage_) continue;
    for (const auto& p : modules_[m]->parameters()) {
      if (p.grad().defined()) squares += p.grad().to(at::kDouble).pow(2).sum();
    }
  }
  group_->all_reduce(squares, comm::ReduceOp::kSum).wait();
  const double norm = std::sqrt(squares.item<double>());
  const double coefficient = optim::clip_coefficient(max_norm, norm);
  if (!(coefficient >= 1.0)) {
    torch::NoGradGuard no_grad;
    for (auto& p : parameters()) {
      if (p.grad().defined()) p.mutable_grad().mul_(coefficient);
    }
  }
  return norm;
}

void PipelineParallel::shutdown() {
  links_.shutdown();
}

}  // namespace lockstep::pipeline
