// TrainModule::log and the table it fills: see include/lockstep/train/train_module.h.
#include "lockstep/train/train_module.h"

#include "lockstep/data/device_dataset.h"

#include <stdexcept>

#include <nlohmann/json.hpp>

namespace lockstep::train {

at::Tensor TrainModuleBase::pipeline_forward(const at::Tensor& /*input*/) {
  throw std::logic_error(
      "pipeline parallelism runs the model's forward and the loss apart: override pipeline_forward (the "
      "model's forward, through staged_model()'s stages) and pipeline_loss in " +
      checkpoint_name());
}

at::Tensor TrainModuleBase::pipeline_loss(const at::Tensor& /*output*/, const at::Tensor& /*target*/) {
  throw std::logic_error(
      "pipeline parallelism runs the model's forward and the loss apart: override pipeline_loss (a "
      "micro-batch's mean loss) in " +
      checkpoint_name());
}

void LoggedMetrics::add(const std::string& name, double value, double weight, bool sync_dist, bool prog_bar) {
  if (name.empty()) throw std::invalid_argument("log(): the metric name is empty");
  if (!(weight > 0)) {
    throw std::invalid_argument("log('" + name + "'): batch_size " + std::to_string(weight) +
                                " is not a positive weight (pass LogOptions().batch_size(n) with n >= 1)");
  }
  auto [it, inserted] = entries_.try_emplace(name);
  Entry& entry = it->second;
  if (inserted) {
    order_.push_back(name);
    entry.sync_dist = sync_dist;
  } else if (entry.sync_dist != sync_dist) {
    // A value reduced on some calls and not on others has no single meaning (and the ranks' reductions
    // would not line up).
    throw std::invalid_argument(
        "log('" + name + "'): logged with sync_dist=" + (entry.sync_dist ? "true" : "false") +
        " before and sync_dist=" + (sync_dist ? "true" : "false") + " now: log each name with one sync_dist");
  }
  entry.prog_bar = entry.prog_bar || prog_bar;
  entry.weighted_sum += value * weight;
  entry.weight += weight;
  entry.last = value;
}

std::string LoggedMetrics::to_json() const {
  nlohmann::ordered_json entries = nlohmann::ordered_json::object();
  for (const std::string& name : order_) {
    const Entry& e = entries_.at(name);
    entries[name] = {e.weighted_sum, e.weight, e.last, e.sync_dist, e.prog_bar};
  }
  return nlohmann::ordered_json{{"samples", samples}, {"entries", entries}}.dump();
}

LoggedMetrics LoggedMetrics::from_json(const std::string& text) {
  LoggedMetrics metrics;
  if (text.empty()) return metrics;
  const auto parsed = nlohmann::ordered_json::parse(text);
  metrics.samples = parsed.at("samples").get<int64_t>();
  for (const auto& [name, e] : parsed.at("entries").items()) {
    metrics.order_.push_back(name);
    Entry& entry = metrics.entries_[name];
    entry.weighted_sum = e.at(0).get<double>();
    entry.weight = e.at(1).get<double>();
    entry.last = e.at(2).get<double>();
    entry.sync_dist = e.at(3).get<bool>();
    entry.prog_bar = e.at(4).get<bool>();
  }
  return metrics;
}

namespace {

double log_weight(const LogOptions& options, int64_t batch_size) {
  const int64_t weight = options.batch_size() > 0 ? options.batch_size() : batch_size;
  return static_cast<double>(weight > 0 ? weight : 1);
}

}  // namespace

void TrainModuleBase::log(const std::string& name, double value, const LogOptions& options) {
  const double weight = log_weight(options, state_->batch_size);
  if (state_->captured_logs) {
    state_->captured_logs->push_back(
        {name, at::Tensor(), value, weight, options.sync_dist(), options.prog_bar()});
    return;
  }
  logged_.add(name, value, weight, options.sync_dist(), options.prog_bar());
}

void TrainModuleBase::log(const std::string& name, const at::Tensor& value, const LogOptions& options) {
  if (!value.defined() || value.numel() != 1) {
    throw std::invalid_argument(
        "log('" + name + "'): expected a scalar tensor, got " +
        (value.defined() ? std::to_string(value.numel()) + " elements" : "an undefined tensor") +
        " (log a mean, or .item() of one element)");
  }
  if (state_->captured_logs) {  // a CUDA graph is being captured: no reading on the host
    state_->captured_logs->push_back({name, value.detach(), 0.0, log_weight(options, state_->batch_size),
                                      options.sync_dist(), options.prog_bar()});
    return;
  }
  log(name, value.detach().item<double>(), options);
}

data::DataSource<data::Batch> DataModule::source(std::shared_ptr<const data::TensorDataset> images,
                                                 data::LoaderOptions options) {
  if (!data_on_device()) return data::DataSource<data::Batch>(std::move(images), std::move(options));
  if (options.augment()) {
    throw std::invalid_argument(
        "the DataModule keeps its data on the device (data_on_device), where it cannot be augmented: turn "
        "augmentation off, or keep the data on the host");
  }
  const data::TransformOptions normalise =
      data::TransformOptions(options.transform()).random_crop_padding(0).horizontal_flip(false);
  return data::DataSource<data::Batch>(
      std::make_shared<const data::DeviceImageDataset>(std::move(images), normalise, device()),
      options.num_workers(0));  // index_select on the device: nothing for a thread to prepare
}

data::DataSource<data::Batch> DataModule::train_data() {
  std::shared_ptr<const data::TensorDataset> train = train_dataset();
  if (!train || train->size() == 0) {
    throw std::invalid_argument("the DataModule's train_dataset() is empty: nothing to train on");
  }
  return source(train, train_loader_options());
}

std::optional<data::DataSource<data::Batch>> DataModule::val_data() {
  std::shared_ptr<const data::TensorDataset> val = val_dataset();
  if (!val || val->size() == 0) return std::nullopt;
  return source(val, val_loader_options()).shuffle(false);
}

}  // namespace lockstep::train
