// The Trainer's CUDA graph step (TrainerOptions::cuda_graphs): see trainer_run.h and cuda_graph.h.
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
#include <ATen/ops/zeros.h>

#include <cmath>
#include <limits>
#include <stdexcept>

#include "lockstep/optim/graph_capturable.h"
#include "trainer_run.h"

namespace lockstep::train {
namespace {

constexpr int64_t kWarmupSteps = 3;

void release_gradients(torch::nn::Module& module) {
  for (auto& p : module.parameters()) p.mutable_grad() = at::Tensor();
}

// nccl, or auto before the group exists (it resolves to nccl on GPUs): "" when `backend` can be captured.
std::string backend_refusal(comm::Backend backend) {
  if (backend == comm::Backend::kAuto || backend == comm::Backend::kNccl) return "";
  return std::string("backend ") + comm::to_string(backend) +
         " moves CUDA tensors through the host (nccl only)";
}

}  // namespace

std::string Trainer::Run::graph_option_refusal() const {
  std::string why = StepGraph::unavailable(device_);
  if (!why.empty()) return why;
  if (options.strategy().kind() != StrategyKind::kDdp)
    return std::string("strategy ") + to_string(options.strategy().kind()) + " (ddp only)";
  why = backend_refusal(options.process_group() ? options.process_group()->backend() : options.backend());
  if (!why.empty()) return why;
  if (options.accumulate_grad_batches() > 1)
    return "accumulate_grad_batches " + std::to_string(options.accumulate_grad_batches()) + " (1 only)";
  if (options.gradient_clip_val() > 0) return "gradient_clip_val (the norm is read on the host)";
  if (precision_ != Precision::k32)
    return std::string("precision ") + to_string(precision_) + " (32 only: autocast caches casts)";
  if (options.on_nan() == OnNan::kSkip) return "on_nan skip (each loss read on the host)";
  return "";
}

std::string Trainer::Run::graph_refusal() const {
  std::string why = graph_option_refusal();
  if (!why.empty()) return why;
  why = backend_refusal(group->backend());  // resolved now: never auto
  if (!why.empty()) return why;
  const auto* capturable = dynamic_cast<const optim::GraphCapturable*>(optimizer.get());
  if (capturable == nullptr)
    return "the optimizer cannot be captured (optim::FusedAdam and FusedAdamW can: adam, adamw)";
  why = capturable->capture_refusal();
  if (!why.empty()) return "the optimizer: " + why;
  if (!train_loader_->lists_tensors()) return "the batch type has no data::BatchTraits<B>::tensors";
  return "";
}

void Trainer::Run::setup_graph() {
  if (!options.cuda_graphs()) return;
  const std::string why = graph_refusal();  // the same on every rank: options, backend and model agree
  if (!why.empty()) {
    print_line("cuda graphs: off, every step runs eagerly: " + why);
    return;
  }
  graph_on_ = true;  // graph_ exists: the option-level refusals found nothing either
  graph_warmup_left_ = kWarmupSteps;
  step_timer_ = StepTimer(0, nullptr, nullptr);  // a replayed step has no phases to time
  print_line("cuda graphs: on (the step is captured after " + std::to_string(kWarmupSteps) +
             " eager steps; the step breakdown is off)");
}

std::optional<double> Trainer::Run::graph_step(const data::detail::AnyBatch& batch, int64_t b) {
  if (!graph_on_) return std::nullopt;
  const bool capture_now = !graph_->captured();
  if (capture_now && graph_warmup_left_ > 0) {
    --graph_warmup_left_;
    return std::nullopt;
  }
  // The static input has the loader's batch size: an epoch's shorter last batch is not captured.
  if (capture_now && train_loader_->samples(batch.get()) != batch_size_) return std::nullopt;
  if (!capture_now && !train_loader_->copy_into(static_batch_, batch)) {
    release_gradients(*module);  // a replay left them set: the eager backward would add to them
    return std::nullopt;
  }
  module->batch_size_ = train_loader_->samples(batch.get());
  module->step_ = position.step;
  apply_lr();
  auto& capturable = dynamic_cast<optim::GraphCapturable&>(*optimizer);
  capturable.before_replay();
  if (capture_now) {
    capture_step(batch, b);
    graph_->replay();  // capturing ran nothing
  } else {
    graph_->replay();
    capturable.after_replay();  // the capture's host code counted the captured step itself
  }
  accumulate_graph_logs();
  ++result_.graph_replays;
  ++position.step;
  module->step_ = position.step;
  if (position.step % step_record_interval() == 0) {  // the step records' loss; every rank alike
    wait_for_replays();
    graph_last_loss_ = static_loss_.item<double>();
    if (!std::isfinite(graph_last_loss_)) flush_graph_logs();  // throws, naming the steps
  }
  return graph_last_loss_;
}

void Trainer::Run::capture_step(const data::detail::AnyBatch& batch, int64_t b) {
  {
    at::NoGradGuard no_grad;
    train_loader_->own_memory(batch);  // batches are copied into it: not into a dataset's rows
  }
  static_batch_ = batch;
  graph_loss_sum_ = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device_));
  release_gradients(*module);
  std::vector<detail::CapturedLog> logs;
  module->captured_logs_ = &logs;
  try {
    graph_->capture([&] {
      ddp->before_forward();
      const at::Tensor loss = module->erased_training_step(static_batch_.get(), b);
      if (!loss.defined() || loss.numel() != 1)
        throw std::invalid_argument("training_step must return the batch's loss as a scalar tensor");
      loss.backward();
      optimizer->step();
      static_loss_ = loss.detach();
      graph_loss_sum_.add_(static_loss_);
    });
  } catch (const std::exception& e) {
    module->captured_logs_ = nullptr;
    throw std::runtime_error(
        "cuda_graphs: the training step (epoch " + std::to_string(epoch) + ", batch " + std::to_string(b) +
        ") cannot be captured in a CUDA graph: " + e.what() +
        ". A training_step that reads a value on the host (.item(), printing a tensor, an if on a "
        "tensor's value) cannot be captured: remove that, or train without cuda_graphs");
  }
  module->captured_logs_ = nullptr;
  graph_logs_.clear();
  for (auto& log : logs) {
    graph_logs_.push_back(
        {std::move(log), at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device_)), 0.0, 0.0});
  }
}

void Trainer::Run::accumulate_graph_logs() {
  for (GraphLog& g : graph_logs_) {
    if (g.log.value.defined()) {
      g.sum.add_(g.log.value, g.log.weight);
    } else {
      g.host_sum += g.log.number * g.log.weight;
    }
    g.weight += g.log.weight;
  }
  ++graph_loss_batches_;
}

void Trainer::Run::wait_for_replays() const {
  if (!graph_on_) return;
  const auto timeout = group->options().collective_timeout();
  if (graph_->wait_for(timeout)) return;
  throw std::runtime_error(
      "lockstep: rank " + std::to_string(group->rank()) + ": the CUDA graph's steps up to step " +
      std::to_string(position.step) + " (epoch " + std::to_string(epoch) + ") have not finished within the " +
      "collective timeout (" + std::to_string(timeout.count() / 1000.0) +
      " s; collective_timeout, LOCKSTEP_TIMEOUT): a replayed step's all-reduce waits for every rank, and "
      "another rank has stopped or hangs. NCCL cannot name it for a replayed collective: run without "
      "cuda_graphs to have the missing rank named");
}

void Trainer::Run::flush_graph_logs() {
  if (!graph_on_ || graph_loss_batches_ == 0) return;
  wait_for_replays();
  const double loss_sum = graph_loss_sum_.item<double>();
  const int64_t batches = graph_loss_batches_;
  graph_loss_sum_.zero_();
  graph_loss_batches_ = 0;
  if (!std::isfinite(loss_sum)) {
    throw std::runtime_error(
        "non-finite training loss in the " + std::to_string(batches) + " step(s) up to step " +
        std::to_string(position.step) + " (epoch " + std::to_string(epoch) + ") on rank " +
        std::to_string(group->rank()) +
        ", run in a CUDA graph (cuda_graphs reads the loss at the step records and epoch ends only): lower "
        "the learning rate, check the data, or train without cuda_graphs to stop at the first such step");
  }
  for (GraphLog& g : graph_logs_) {
    if (g.weight == 0.0) continue;
    const double sum = g.log.value.defined() ? g.sum.item<double>() : g.host_sum;
    module->logged_.add(g.log.name, sum / g.weight, g.weight, g.log.sync_dist, g.log.prog_bar);
    if (g.log.value.defined()) g.sum.zero_();
    g.host_sum = 0.0;
    g.weight = 0.0;
  }
}

}  // namespace lockstep::train
