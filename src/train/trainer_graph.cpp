// The Trainer's CUDA graph step (TrainerOptions::cuda_graphs): see trainer_graph.h and cuda_graph.h.
//
// After kWarmupSteps eager steps (which create the optimizer's state and let cuBLAS and NCCL set
// themselves up), the next full batch becomes the static input and one whole step is captured: DDP's
// before_forward, training_step, backward (the reducer's copies into its buckets and their all-reduce
// with it), the optimizer's step, and the sum of the losses. Gradients are released before capture, so
// the captured backward writes .grad afresh instead of adding to it, and every replay computes a whole
// step. Each later batch of the same shapes is copied into the static input and the graph replayed; one
// of other shapes runs eagerly, with the gradients released first (a replay leaves them set).
//
// The host reads the device only every step_record_interval() steps (the loss of the step records, on
// every rank alike) and at each epoch's end, each time waiting at most the collective timeout: a replayed
// all-reduce is invisible to NCCL's watchdog and to the progress records, so this wait is what finds a
// peer that stopped.
#include "trainer_graph.h"

#include <ATen/ops/zeros.h>
#include <torch/optim/optimizer.h>

#include <cmath>
#include <stdexcept>

#include "lockstep/optim/graph_capturable.h"
#include "train_module_access.h"
#include "trainer_run.h"

namespace lockstep::train {
namespace {

void release_gradients(torch::nn::Module& module) {
  for (auto& p : module.parameters()) p.mutable_grad() = at::Tensor();
}

// nccl, or auto before the group exists (it resolves to nccl on GPUs): "" when `backend` can be captured.
std::string backend_refusal(comm::Backend backend) {
  if (backend == comm::Backend::kAuto || backend == comm::Backend::kNccl) return "";
  return std::string("backend ") + comm::to_string(backend) +
         " moves CUDA tensors through the host (nccl only)";
}

// What the options and the device decide (before set-up: only then does the capture stream become
// current); "" when they allow a capture.
std::string option_refusal(const TrainerOptions& options, Precision precision, const c10::Device& device) {
  std::string why = StepGraph::unavailable(device);
  if (!why.empty()) return why;
  if (options.strategy().kind() != StrategyKind::kDdp)
    return std::string("strategy ") + to_string(options.strategy().kind()) + " (ddp only)";
  why = backend_refusal(options.process_group() ? options.process_group()->backend() : options.backend());
  if (!why.empty()) return why;
  if (options.keep_global_batch()) return "keep_global_batch (its accumulation changes with the world)";
  if (options.accumulate_grad_batches() > 1)
    return "accumulate_grad_batches " + std::to_string(options.accumulate_grad_batches()) + " (1 only)";
  if (options.gradient_clip_val() > 0) return "gradient_clip_val (the norm is read on the host)";
  if (precision != Precision::k32)
    return std::string("precision ") + to_string(precision) + " (32 only: autocast caches casts)";
  if (options.on_nan() == OnNan::kSkip) return "on_nan skip (each loss read on the host)";
  return "";
}

at::Tensor device_zero(const c10::Device& device) {
  return at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device));
}

}  // namespace

void TrainerGraph::prepare(const TrainerOptions& options, Precision precision, const c10::Device& device) {
  if (!options.cuda_graphs()) return;
  device_ = device;
  option_refusal_ = option_refusal(options, precision, device);
  if (option_refusal_.empty()) graph_ = std::make_unique<StepGraph>(device);
}

std::string TrainerGraph::turn_on(const Parts& parts) {
  if (!option_refusal_.empty()) return option_refusal_;
  std::string why = backend_refusal(parts.group->backend());  // resolved now: never auto
  if (!why.empty()) return why;
  const auto* capturable = dynamic_cast<const optim::GraphCapturable*>(parts.optimizer);
  if (capturable == nullptr)
    return "the optimizer cannot be captured (optim::FusedAdam and FusedAdamW can: adam, adamw)";
  why = capturable->capture_refusal();
  if (!why.empty()) return "the optimizer: " + why;
  if (!parts.loader->lists_tensors()) return "the batch type has no data::BatchTraits<B>::tensors";
  TORCH_INTERNAL_ASSERT(graph_, "TrainerGraph::turn_on without prepare() on a device that can capture");
  parts_ = parts;
  on_ = true;
  warmup_left_ = kWarmupSteps;
  return "";
}

bool TrainerGraph::takes(const data::detail::AnyBatch& batch) {
  if (!on_) return false;
  const bool capture_now = !graph_->captured();
  if (capture_now && warmup_left_ > 0) {
    --warmup_left_;
    return false;
  }
  // The static input has the loader's batch size: an epoch's shorter last batch is not captured.
  data::detail::AnyShardLoader& loader = *parts_.loader;
  if (capture_now && loader.samples(batch.get()) != loader.options().batch_size()) return false;
  if (!capture_now && !loader.copy_into(static_batch_, batch)) {
    release_gradients(*parts_.module);  // a replay left them set: the eager backward would add to them
    return false;
  }
  return true;
}

void TrainerGraph::run(const data::detail::AnyBatch& batch, int64_t b, const Step& step) {
  auto& capturable = dynamic_cast<optim::GraphCapturable&>(*parts_.optimizer);
  capturable.before_replay();
  if (!graph_->captured()) {
    capture(batch, b, step);
    graph_->replay();  // capturing ran nothing
  } else {
    graph_->replay();
    capturable.after_replay();  // the capture's host code counted the captured step itself
  }
  accumulate_logs();
}

void TrainerGraph::capture(const data::detail::AnyBatch& batch, int64_t b, const Step& step) {
  {
    at::NoGradGuard no_grad;
    parts_.loader->own_memory(batch);  // batches are copied into it: not into a dataset's rows
  }
  static_batch_ = batch;
  loss_sum_ = device_zero(device_);
  release_gradients(*parts_.module);
  std::vector<detail::CapturedLog> logs;
  detail::StepState& state = *parts_.state;
  state.captured_logs = &logs;
  try {
    graph_->capture([&] {
      static_loss_ = step(static_batch_.get()).detach();
      loss_sum_.add_(static_loss_);
    });
  } catch (const std::exception& e) {
    state.captured_logs = nullptr;
    throw std::runtime_error(
        "cuda_graphs: the training step (epoch " + std::to_string(state.epoch) + ", batch " +
        std::to_string(b) + ") cannot be captured in a CUDA graph: " + e.what() +
        ". A training_step that reads a value on the host (.item(), printing a tensor, an if on a "
        "tensor's value) cannot be captured: remove that, or train without cuda_graphs");
  }
  state.captured_logs = nullptr;
  logs_.clear();
  for (auto& log : logs) logs_.push_back({std::move(log), device_zero(device_), 0.0, 0.0});
}

void TrainerGraph::accumulate_logs() {
  for (Log& g : logs_) {
    if (g.log.value.defined()) {
      g.sum.add_(g.log.value, g.log.weight);
    } else {
      g.host_sum += g.log.number * g.log.weight;
    }
    g.weight += g.log.weight;
  }
  ++loss_batches_;
}

double TrainerGraph::loss(bool read) {
  if (!read) return last_loss_;
  wait_for_replays();
  last_loss_ = static_loss_.item<double>();
  if (!std::isfinite(last_loss_)) flush_logs();  // throws, naming the steps
  return last_loss_;
}

void TrainerGraph::wait_for_replays() const {
  if (!on_ || !graph_) return;  // no graph: off, or released at the fit's end
  const auto timeout = parts_.group->options().collective_timeout();
  if (graph_->wait_for(timeout)) return;
  throw std::runtime_error(
      "lockstep: rank " + std::to_string(parts_.group->rank()) + ": the CUDA graph's steps up to step " +
      std::to_string(parts_.position->step) + " (epoch " + std::to_string(parts_.state->epoch) +
      ") have not finished within the collective timeout (" + std::to_string(timeout.count() / 1000.0) +
      " s; collective_timeout, LOCKSTEP_TIMEOUT): a replayed step's all-reduce waits for every rank, and "
      "another rank has stopped or hangs. NCCL cannot name it for a replayed collective: run without "
      "cuda_graphs to have the missing rank named");
}

void TrainerGraph::flush_logs() {
  if (!on_ || loss_batches_ == 0) return;
  wait_for_replays();
  const double loss_sum = loss_sum_.item<double>();
  const int64_t batches = loss_batches_;
  loss_sum_.zero_();
  loss_batches_ = 0;
  if (!std::isfinite(loss_sum)) {
    throw std::runtime_error(
        "non-finite training loss in the " + std::to_string(batches) + " step(s) up to step " +
        std::to_string(parts_.position->step) + " (epoch " + std::to_string(parts_.state->epoch) +
        ") on rank " + std::to_string(parts_.group->rank()) +
        ", run in a CUDA graph (cuda_graphs reads the loss at the step records and epoch ends only): lower "
        "the learning rate, check the data, or train without cuda_graphs to stop at the first such step");
  }
  LoggedMetrics& logged = detail::TrainModuleAccess::logged(*parts_.module);
  for (Log& g : logs_) {
    if (g.weight == 0.0) continue;
    const double sum = g.log.value.defined() ? g.sum.item<double>() : g.host_sum;
    logged.add(g.log.name, sum / g.weight, g.weight, g.log.sync_dist, g.log.prog_bar);
    if (g.log.value.defined()) g.sum.zero_();
    g.host_sum = 0.0;
    g.weight = 0.0;
  }
}

// ---- the Run's side: where the graph's step is a step of the run ----

void Trainer::Run::setup_graph() {
  if (!options.cuda_graphs()) return;
  // The same on every rank: options, backend and model agree.
  const std::string why = graph_.turn_on(
      {group, optimizer.get(), train_loader_.get(), module.get(), &position, step_state.get()});
  if (!why.empty()) {
    print_line("cuda graphs: off, every step runs eagerly: " + why);
    return;
  }
  step_timer_ = StepTimer(0, nullptr, nullptr);  // a replayed step has no phases to time
  print_line("cuda graphs: on (the step is captured after " + std::to_string(TrainerGraph::kWarmupSteps) +
             " eager steps; the step breakdown is off)");
}

std::optional<double> Trainer::Run::graph_step(const data::detail::AnyBatch& batch, int64_t b) {
  if (!graph_.takes(batch)) return std::nullopt;
  step_state->batch_size = train_loader_->samples(batch.get());
  step_state->step = position.step;
  apply_lr();
  graph_.run(batch, b, [&](const void* static_batch) {
    ddp->before_forward();
    const at::Tensor loss = detail::TrainModuleAccess::training_step(*module, static_batch, b);
    if (!loss.defined() || loss.numel() != 1)
      throw std::invalid_argument("training_step must return the batch's loss as a scalar tensor");
    loss.backward();
    optimizer->step();
    return loss;
  });
  ++result_.graph_replays;
  ++position.step;
  step_state->step = position.step;
  return graph_.loss(/*read=*/position.step % step_record_interval() == 0);  // every rank alike
}

void Trainer::Run::flush_graph_logs() {
  graph_.flush_logs();
}

}  // namespace lockstep::train
