// The step breakdown: see include/lockstep/train/step_breakdown.h.
#include "lockstep/train/step_breakdown.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace lockstep::train {
namespace {

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const size_t half = values.size() / 2;
  return values.size() % 2 == 1 ? values[half] : 0.5 * (values[half - 1] + values[half]);
}

std::string fixed(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

}  // namespace

const char* to_string(StepPhase phase) {
  switch (phase) {
    case StepPhase::kData:
      return "data";
    case StepPhase::kForward:
      return "forward";
    case StepPhase::kBackward:
      return "backward";
    case StepPhase::kAllreduce:
      return "allreduce";
    case StepPhase::kOptimizer:
      return "optimizer";
  }
  return "?";
}

EpochBreakdown make_breakdown(const std::vector<PhaseTimes>& ranks) {
  EpochBreakdown out;
  for (const PhaseTimes& rank : ranks) {
    std::array<double, kStepPhases> ms{};
    const double per_batch = rank.batches > 0 ? 1000.0 / static_cast<double>(rank.batches) : 0.0;
    double step = 0.0;
    for (size_t p = 0; p < kStepPhases; ++p) {
      ms[p] = rank.seconds[p] * per_batch;
      step += ms[p];
    }
    out.rank_ms.push_back(ms);
    out.step_ms.push_back(step);
    out.busy_ms.push_back(step - ms[static_cast<size_t>(StepPhase::kAllreduce)]);
    out.batches = std::max(out.batches, rank.batches);
  }
  if (out.busy_ms.size() < 2) return out;
  out.slowest_rank =
      static_cast<int>(std::max_element(out.busy_ms.begin(), out.busy_ms.end()) - out.busy_ms.begin());
  std::vector<double> others = out.busy_ms;
  others.erase(others.begin() + out.slowest_rank);
  const double typical = median(others);
  out.slowest_excess_pct = typical > 0 ? 100.0 * (out.busy_ms[out.slowest_rank] - typical) / typical : 0.0;
  return out;
}

std::string EpochBreakdown::straggler_line(int64_t epoch) const {
  const auto& ms = rank_ms.at(static_cast<size_t>(slowest_rank));
  std::ostringstream line;
  line << "epoch " << epoch << ": rank " << slowest_rank
       << " is a straggler: " << fixed(busy_ms[slowest_rank], 1) << " ms busy a step, "
       << fixed(slowest_excess_pct, 0) << "% over the other ranks' median (data " << fixed(ms[0], 1)
       << ", forward " << fixed(ms[1], 1) << ", backward " << fixed(ms[2], 1) << ", optimizer "
       << fixed(ms[4], 1) << " ms)";
  return line.str();
}

std::vector<std::pair<std::string, double>> EpochBreakdown::scalars() const {
  std::vector<std::pair<std::string, double>> out;
  for (size_t r = 0; r < rank_ms.size(); ++r) {
    const std::string prefix = "breakdown/rank_" + std::to_string(r) + "/";
    for (size_t p = 0; p < kStepPhases; ++p)
      out.emplace_back(prefix + to_string(static_cast<StepPhase>(p)) + "_ms", rank_ms[r][p]);
    out.emplace_back(prefix + "step_ms", step_ms[r]);
  }
  out.emplace_back("breakdown/slowest_rank", slowest_rank);
  out.emplace_back("breakdown/slowest_excess_pct", slowest_excess_pct);
  return out;
}

std::string EpochBreakdown::to_json() const {
  std::ostringstream json;
  json.precision(17);
  json << "{\"batches\":" << batches << ",\"slowest_rank\":" << slowest_rank
       << ",\"slowest_excess_pct\":" << slowest_excess_pct << ",\"ranks\":[";
  for (size_t r = 0; r < rank_ms.size(); ++r) {
    json << (r ? "," : "") << "{";
    for (size_t p = 0; p < kStepPhases; ++p)
      json << "\"" << to_string(static_cast<StepPhase>(p)) << "_ms\":" << rank_ms[r][p] << ",";
    json << "\"step_ms\":" << step_ms[r] << "}";
  }
  json << "]}";
  return json.str();
}

StepTimer::StepTimer(int64_t every_n_batches, Synchronize synchronize, const void* context)
    : every_(every_n_batches), synchronize_(synchronize), context_(context) {}

void StepTimer::start_batch(int64_t batch) {
  sampling_ = every_ > 0 && batch % every_ == 0;
  if (!sampling_) return;
  if (synchronize_ != nullptr) synchronize_(context_);
  mark_ = Clock::now() + detail::step_clock_lag();
  ++times_.batches;
}

void StepTimer::end(StepPhase phase) {
  if (!sampling_) return;
  if (synchronize_ != nullptr) synchronize_(context_);
  const Clock::time_point now = Clock::now() + detail::step_clock_lag();
  times_.seconds[static_cast<size_t>(phase)] += std::chrono::duration<double>(now - mark_).count();
  mark_ = now;
}

void StepTimer::move(StepPhase from, StepPhase to, double seconds) {
  if (!sampling_) return;
  times_.seconds[static_cast<size_t>(from)] -= seconds;
  times_.seconds[static_cast<size_t>(to)] += seconds;
}

PhaseTimes StepTimer::take() {
  PhaseTimes out = times_;
  times_ = PhaseTimes();
  return out;
}

std::chrono::nanoseconds& detail::step_clock_lag() {
  thread_local std::chrono::nanoseconds lag{0};
  return lag;
}

}  // namespace lockstep::train
