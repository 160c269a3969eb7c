// Finding and reading a run dir's files (report_run.h).
#include "report_run.h"

#include <fstream>
#include <regex>
#include <sstream>

namespace lockstep::cli {
namespace {

namespace fs = std::filesystem;

std::optional<fs::path> file_in(const fs::path& dir, const char* name) {
  std::error_code ec;
  if (fs::is_regular_file(dir / name, ec)) return dir / name;
  return std::nullopt;
}

bool holds_metrics(const fs::path& dir) {
  return file_in(dir, "metrics.csv") || file_in(dir, "metrics.jsonl");
}

// The version_N directly under `dir` with the largest N; empty when none.
fs::path newest_version(const fs::path& dir) {
  static const std::regex pattern("version_([0-9]{1,9})");
  fs::path best;
  long best_n = -1;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::smatch match;
    const std::string name = it->path().filename().string();
    if (it->is_directory(ec) && std::regex_match(name, match, pattern) && std::stol(match[1]) > best_n) {
      best_n = std::stol(match[1]);
      best = it->path();
    }
  }
  return best;
}

// The largest run file read (metrics.csv and .jsonl of a very long run stay far below).
constexpr std::uintmax_t kMaxRunFileBytes = std::uintmax_t{1} << 30;

std::string read_text(const fs::path& path) {
  std::error_code ec;
  const std::uintmax_t size = fs::file_size(path, ec);
  if (!ec && size > kMaxRunFileBytes) {
    throw ReportError(path.string() + " has " + std::to_string(size) +
                      " bytes, over the limit of 1 GiB for a run's file: not a file lockstep wrote");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ReportError("cannot read " + path.string() + " (check its permissions)");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

RunFiles find_run_files(const fs::path& run_dir) {
  std::error_code ec;
  if (!fs::exists(run_dir, ec)) {
    throw ReportError("RUN_DIR '" + run_dir.string() +
                      "' does not exist (expected a run's directory: ROOT or ROOT/lightning_logs/version_N "
                      "of `lockstep fit`, or the --run-dir of `lockstep bench`)");
  }
  if (!fs::is_directory(run_dir, ec)) {
    throw ReportError("RUN_DIR '" + run_dir.string() +
                      "' is not a directory (give the directory that holds "
                      "metrics.csv, not the file)");
  }
  RunFiles files;
  files.dir = run_dir;
  if (!holds_metrics(run_dir)) {
    fs::path version = newest_version(run_dir / "lightning_logs");
    if (version.empty()) version = newest_version(run_dir);
    if (!version.empty()) files.dir = version;
  }
  files.metrics = file_in(files.dir, "metrics.csv");
  if (!files.metrics) files.metrics = file_in(files.dir, "metrics.jsonl");
  for (const fs::path& dir : {files.dir, run_dir}) {
    if (!files.scaling) files.scaling = file_in(dir, "scaling.csv");
    if (!files.peer) files.peer = file_in(dir, "peer.csv");
    if (!files.hparams) files.hparams = file_in(dir, "hparams.yaml");
  }
  if (!files.metrics && !files.scaling && !files.peer) {
    const std::string where =
        files.dir == run_dir ? run_dir.string() : run_dir.string() + " and " + files.dir.string();
    throw ReportError("no metrics found in " + where +
                      ": looked for metrics.csv, metrics.jsonl, scaling.csv and peer.csv, and for "
                      "lightning_logs/version_N under " +
                      run_dir.string() +
                      " (log with the csv or jsonl logger; a TensorBoard events file alone is not read)");
  }
  return files;
}

RunData load_run(const RunFiles& files, const std::string& name) {
  RunData run;
  run.name = name;
  try {
    if (files.metrics) {
      run.metrics_source = files.metrics->string();
      const std::string text = read_text(*files.metrics);
      run.metrics = files.metrics->extension() == ".csv"
                        ? metrics_from_csv(parse_csv(text, run.metrics_source))
                        : parse_metrics_jsonl(text, run.metrics_source);
    }
    if (files.scaling) run.scaling = parse_csv(read_text(*files.scaling), files.scaling->string());
    if (files.peer) run.peer = parse_csv(read_text(*files.peer), files.peer->string());
    if (files.hparams) run.hparams = parse_hparams_yaml(read_text(*files.hparams), files.hparams->string());
  } catch (const ReportError&) {
    throw;
  } catch (const std::runtime_error& e) {
    throw ReportError(e.what());
  }
  if (files.metrics && run.metrics.rows.empty() && !run.scaling && !run.peer) {
    throw ReportError("no metrics found: " + run.metrics_source +
                      " has no rows yet (a run that has not logged; wait for its first log call)");
  }
  return run;
}

}  // namespace lockstep::cli
