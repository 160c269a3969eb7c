#pragma once

#include <filesystem>
#include <string>

#include "report_csv.h"
#include "report_hparams.h"

namespace lockstep::cli {

/// `lockstep bench scaling|peer --run-dir DIR`: the benchmark's results as a run dir that `lockstep report
/// DIR` shows (the layout: docs/report.md): DIR/hparams.yaml with the benchmark's settings, written when
/// the run dir is opened (before anything is measured), and its table as DIR/<name>.csv.
class BenchRunDir {
 public:
  /// Creates `dir` (and its parents) and writes dir/hparams.yaml. Throws std::runtime_error naming `dir`
  /// and the reason when either fails.
  BenchRunDir(std::filesystem::path dir, const Hparams& settings);

  /// Rewrites dir/`name` with `table`, atomically: a bench calls it after each measured row, so a reader
  /// (or a bench that fails later) keeps the rows so far. Throws std::runtime_error when it cannot.
  void write_table(const std::string& name, const CsvTable& table) const;

 private:
  std::filesystem::path dir_;
};

}  // namespace lockstep::cli
