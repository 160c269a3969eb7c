#include "lockstep/train/epoch_metrics.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace lockstep::train {

std::string EpochMetrics::to_json() const {
  nlohmann::ordered_json object = {{"epoch", epoch}, {"step", step}};
  if (logged.empty()) {
    object["train_loss"] = train_loss;
    object["val_loss"] = val_loss;
    object["val_acc"] = val_acc;
  }
  for (const auto& [name, value] : logged) {
    if (std::isfinite(value)) {
      object[name] = value;
    } else {
      object[name] = nullptr;  // JSON has no NaN or Infinity
    }
  }
  object["epoch_s"] = epoch_s;
  object["val_s"] = val_s;
  object["samples_per_s"] = samples_per_s;
  object["val_samples"] = val_samples;
  object["train_samples"] = train_samples;
  object["lr"] = lr;
  object["world_size"] = world_size;
  object["peak_rss_mb"] = peak_rss_mb;
  object["model_state_mb"] = model_state_mb;
  if (peak_cuda_mb) object["peak_cuda_mb"] = *peak_cuda_mb;
  if (breakdown) object["breakdown"] = nlohmann::ordered_json::parse(breakdown->to_json());
  return object.dump();
}

std::vector<std::pair<std::string, double>> EpochMetrics::scalars() const {
  std::vector<std::pair<std::string, double>> out;
  if (logged.empty()) {
    out = {{"train_loss_epoch", train_loss}, {"val_loss", val_loss}, {"val_acc", val_acc}};
  } else {
    for (const auto& [name, value] : logged)
      out.emplace_back(name == "train_loss" ? "train_loss_epoch" : name, value);
  }
  out.emplace_back("epoch", static_cast<double>(epoch));
  out.emplace_back("time/epoch_s", epoch_s);
  out.emplace_back("time/val_s", val_s);
  out.emplace_back("time/samples_per_s", samples_per_s);
  out.emplace_back("memory/peak_rss_mb", peak_rss_mb);
  out.emplace_back("memory/model_state_mb", model_state_mb);
  if (peak_cuda_mb) out.emplace_back("memory/peak_cuda_mb", *peak_cuda_mb);
  if (breakdown) {
    for (auto& scalar : breakdown->scalars()) out.push_back(std::move(scalar));
  }
  return out;
}

std::vector<std::pair<std::string, double>> StepMetrics::scalars() const {
  return {{"train_loss_step", train_loss}, {"lr", lr}, {"epoch", static_cast<double>(epoch)}};
}

std::string StepMetrics::to_json() const {
  const nlohmann::ordered_json object = {
      {"step", step}, {"epoch", epoch}, {"batch", batch}, {"train_loss", train_loss}, {"lr", lr}};
  return object.dump();
}

MetricsWriter::MetricsWriter(const std::string& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "ae");
  if (file_ == nullptr) {
    throw std::runtime_error("cannot open metrics file '" + path +
                             "' for appending: " + std::strerror(errno) +
                             " (check that its directory exists, or change metrics_file)");
  }
}

MetricsWriter::~MetricsWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void MetricsWriter::write(const EpochMetrics& metrics) {
  write_line(metrics.to_json());
}

void MetricsWriter::write(const StepMetrics& metrics) {
  write_line(metrics.to_json());
}

void MetricsWriter::write_line(const std::string& json) {
  const std::string line = json + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    throw std::runtime_error("cannot write to metrics file '" + path_ + "': " + std::strerror(errno));
  }
}

}  // namespace lockstep::train
