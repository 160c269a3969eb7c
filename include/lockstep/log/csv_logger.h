#pragma once

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "lockstep/log/logger.h"

namespace lockstep::log {

/*
 * metrics.csv, as Lightning 2.x's CSVLogger writes it (lightning/fabric/loggers/csv_logs.py,
 * _ExperimentWriter): a header of every key seen so far, sorted by name, "step" among them; then one row
 * per log call, with an empty cell for each key that call did not log. Python's csv module quotes a cell
 * only when it holds a comma, a quote or a line break; so does this writer.
 *
 * When a call brings a key the header lacks, the header widens and the whole file is rewritten under it
 * (the earlier rows get empty cells for the new key): Lightning re-reads its file to do that, this writer
 * keeps the rows' text in memory (a few MB for a long run). The rewrite goes to .metrics.csv.tmp.<pid>, then
 * renames over metrics.csv, so a reader sees the old or the new file, never half of one. Otherwise a row
 * is appended. Lightning flushes every 100 steps; this writer after every row, so a running job can be
 * read.
 *
 * Numbers are written as the shortest text that reads back as the same double ("0.1", "3", "1e-05",
 * "nan", "inf"); Lightning's are Python's str(), which adds ".0" to whole floats.
 */

/// Lightning's CSVLogger: `dir`/metrics.csv (above) and `dir`/hparams.yaml (log_hyperparams,
/// hparams_yaml.h). Not thread-safe.
///
/// Example:
///   CsvLogger csv(next_version_dir("."));
///   csv.log_metrics({{"train_loss_step", 0.25}, {"epoch", 0}}, /*step=*/50);
///   // metrics.csv: "epoch,step,train_loss_step\n0,50,0.25\n"
class CsvLogger : public Logger {
 public:
  /// Creates `dir` (with parents); an existing metrics.csv there is replaced at the first log_metrics
  /// (as Lightning does). Throws std::runtime_error naming the path when `dir` cannot be created.
  explicit CsvLogger(std::string dir);

  void log_hyperparams(const Hparams& hparams) override;
  void log_metrics(const Metrics& metrics, std::int64_t step) override;
  void flush() override;
  const std::string& dir() const override { return dir_; }
  /// `dir`/metrics.csv.
  const std::string& metrics_file() const { return path_; }

 private:
  using Row = std::map<std::string, std::string>;
  /// Adds the row's new keys to keys_ (sorted); true when there were any.
  bool widen_header(const Row& row);
  void rewrite_file();
  void append_row(const Row& row);
  std::string row_text(const Row& row) const;

  std::string dir_;
  std::string path_;
  std::vector<std::string> keys_;  // the header, sorted
  std::vector<Row> rows_;          // every row so far, for rewrites
  std::ofstream out_;              // metrics.csv, open for appending once written
};

}  // namespace lockstep::log
