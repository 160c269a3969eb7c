// Epoch metrics across ranks: see epoch_reduce.h.
#include "epoch_reduce.h"

#include <ATen/ATen.h>

#include <sstream>
#include <stdexcept>

namespace lockstep::train::detail {

namespace {

// The sync_dist names, one per line; the same on every rank or an error naming both.
void check_same_sync_names(comm::ProcessGroup& group, const LoggedMetrics& logged, int64_t epoch) {
  std::string names;
  for (const auto& [name, entry] : logged.entries()) {
    if (entry.sync_dist) names += name + "\n";
  }
  const std::vector<std::string> all = group.all_gather_strings(names);
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    throw std::runtime_error("epoch " + std::to_string(epoch) + ": rank 0 logged the sync_dist values {" +
                             all[0] + "} but rank " + std::to_string(r) + " logged {" + all[r] +
                             "}: log the same names with sync_dist on every rank");
  }
}

}  // namespace

ReducedEpoch reduce_epoch(comm::ProcessGroup& group, const LoggedMetrics& logged, const RankEpoch& mine,
                          int64_t epoch) {
  check_same_sync_names(group, logged, epoch);
  std::vector<double> sums{static_cast<double>(mine.train_samples), static_cast<double>(mine.val_samples)};
  for (const auto& [name, entry] : logged.entries()) {
    if (!entry.sync_dist) continue;
    sums.push_back(entry.weighted_sum);
    sums.push_back(entry.weight);
  }
  at::Tensor reduced = at::tensor(sums, at::kDouble);
  group.all_reduce(reduced).wait();
  at::Tensor times = at::tensor(
      {mine.train_s, mine.val_s, mine.peak_rss_mb, mine.model_state_mb, mine.peak_cuda_mb}, at::kDouble);
  group.all_reduce(times, comm::ReduceOp::kMax).wait();
  const auto s = reduced.accessor<double, 1>();
  const auto t = times.accessor<double, 1>();

  ReducedEpoch out;
  out.train_samples = static_cast<int64_t>(s[0]);
  out.val_samples = static_cast<int64_t>(s[1]);
  out.train_s = t[0];
  out.val_s = t[1];
  out.peak_rss_mb = t[2];
  out.model_state_mb = t[3];
  out.peak_cuda_mb = t[4];
  std::map<std::string, double> means;
  int64_t k = 2;  // entries() and the sums above walk the names in the same order
  for (const auto& [name, entry] : logged.entries()) {
    if (entry.sync_dist) {
      means[name] = s[k + 1] > 0 ? s[k] / s[k + 1] : 0.0;
      k += 2;
    } else {
      means[name] = entry.mean();
    }
  }
  std::vector<MetricValue> table;
  for (const std::string& name : logged.order())
    table.push_back({name, means[name], logged.entries().at(name).prog_bar});
  out.metrics = broadcast_table(group, table);
  return out;
}

std::vector<MetricValue> broadcast_table(comm::ProcessGroup& group, const std::vector<MetricValue>& table) {
  std::string names;
  for (const auto& m : table) names += m.name + "\n";
  names = group.broadcast_string(names);
  std::vector<std::string> received;
  std::istringstream in(names);
  for (std::string line; std::getline(in, line);) received.push_back(line);
  // [value, prog_bar] per name, rank 0's size on every rank.
  at::Tensor values = at::zeros({static_cast<int64_t>(received.size()), 2}, at::kDouble);
  if (group.rank() == 0) {
    for (size_t i = 0; i < table.size(); ++i) {
      values[static_cast<int64_t>(i)][0] = table[i].value;
      values[static_cast<int64_t>(i)][1] = table[i].prog_bar ? 1.0 : 0.0;
    }
  }
  if (values.numel() > 0) group.broadcast(values).wait();
  const auto v = values.accessor<double, 2>();
  std::vector<MetricValue> out;
  for (size_t i = 0; i < received.size(); ++i) {
    out.push_back({received[i], v[static_cast<int64_t>(i)][0], v[static_cast<int64_t>(i)][1] != 0.0});
  }
  return out;
}

bool any_rank(comm::ProcessGroup& group, bool mine) {
  return max_over_ranks(group, mine ? 1 : 0) > 0;
}

int64_t max_over_ranks(comm::ProcessGroup& group, int64_t mine) {
  at::Tensor value = at::full({1}, static_cast<double>(mine), at::kDouble);  // exact below 2^53
  group.all_reduce(value, comm::ReduceOp::kMax).wait();
  return static_cast<int64_t>(value.item<double>());
}

std::vector<PhaseTimes> gather_phase_times(comm::ProcessGroup& group, const PhaseTimes& mine) {
  std::vector<double> values(mine.seconds.begin(), mine.seconds.end());
  values.push_back(static_cast<double>(mine.batches));
  const at::Tensor all = group.all_gather_stacked(at::tensor(values, at::kDouble)).contiguous();
  const double* data = all.data_ptr<double>();
  std::vector<PhaseTimes> out(static_cast<size_t>(group.size()));
  const size_t row = values.size();
  for (size_t r = 0; r < out.size(); ++r) {
    for (size_t p = 0; p < kStepPhases; ++p) out[r].seconds[p] = data[r * row + p];
    out[r].batches = static_cast<int64_t>(data[r * row + kStepPhases]);
  }
  return out;
}

}  // namespace lockstep::train::detail
