#pragma once

#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>

#include "report_csv.h"
#include "report_hparams.h"
#include "report_metrics.h"

namespace lockstep::cli {

/// A run dir that cannot be reported: the message names the path, what was looked for, and the fix.
class ReportError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The files of a run that the report reads (docs/report.md). Each is absent when the run has none.
struct RunFiles {
  std::filesystem::path dir;  ///< the version dir (or RUN_DIR itself when it holds the files)
  std::optional<std::filesystem::path> metrics;  ///< metrics.csv, else metrics.jsonl
  std::optional<std::filesystem::path> scaling;  ///< scaling.csv (`lockstep bench scaling --run-dir`)
  std::optional<std::filesystem::path> peer;     ///< peer.csv (`lockstep bench peer --run-dir`)
  std::optional<std::filesystem::path> hparams;  ///< hparams.yaml
};

/// Finds a run's files. `run_dir` is either a version dir (it holds metrics.csv or metrics.jsonl) or a
/// root dir: then the newest (largest N) `lightning_logs/version_N` under it is used (or `version_N`
/// directly under it, for a lightning_logs dir), and a scaling.csv, peer.csv or hparams.yaml directly in
/// `run_dir` counts when the version dir has none. A bench's --run-dir (scaling.csv or peer.csv, no
/// version_N) is its own version dir. Throws ReportError when
/// `run_dir` does not exist or is not a directory, and when no metrics file is found (naming every place
/// looked at).
RunFiles find_run_files(const std::filesystem::path& run_dir);

/// What the report shows of a run, read from its files.
struct RunData {
  std::string name;            ///< the run dir as given, for the title
  std::string metrics_source;  ///< the metrics file read ("" when none)
  MetricLog metrics;
  std::optional<CsvTable> scaling;
  std::optional<CsvTable> peer;
  Hparams hparams;
};

/// Reads every file of `files`. Throws ReportError naming the file for one that cannot be read or parsed.
RunData load_run(const RunFiles& files, const std::string& name);

}  // namespace lockstep::cli
