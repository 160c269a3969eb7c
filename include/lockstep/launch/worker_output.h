#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace lockstep::launch {

/// Which of a worker's streams something applies to (torchrun's Std): bit 1 stdout, bit 2 stderr.
enum StdStream : int { kNoStream = 0, kStdout = 1, kStderr = 2, kBothStreams = 3 };

/// torchrun's --redirects / --tee value: one StdStream for every local rank ("3"), or one per local rank
/// ("0:1,1:2": local rank 0's stdout, local rank 1's stderr; ranks not named: none).
class StdStreams {
 public:
  StdStreams(int all = kNoStream) : all_(all) {}  // NOLINT(google-explicit-constructor)
  /// Throws LaunchError naming `option` and the value when it is not of either form (values 0..3).
  static StdStreams parse(const std::string& text, const std::string& option);
  /// The streams of `local_rank` (a StdStream mask).
  int of(int local_rank) const;

 private:
  int all_ = kNoStream;
  std::map<int, int> per_rank_;
  bool per_rank_given_ = false;
};

/// How workers' output is shown on the console and kept in files (torchrun's logging flags).
///
/// Console: every line of a worker, prefixed "[rank N] " (or line_prefix_template), unless the stream is
/// redirected (and not tee'd) or the local rank is left out by local_ranks_filter. Files (under the
/// launch's log directory, attempt_<K>/<local rank>/stdout.log and stderr.log): the streams named by
/// redirects or tee. With a log_dir and neither redirects nor tee given, lockstep keeps both streams of
/// every rank (tee 3): torchrun would keep none, which makes a log directory of empty folders.
struct WorkerOutput {
  /// -r / --redirects: streams written to the files only.
  std::optional<StdStreams> redirects;
  /// -t / --tee: streams written to the files and shown.
  std::optional<StdStreams> tee;
  /// --local-ranks-filter: only these local ranks are shown on the console (files keep everything).
  std::optional<std::set<int>> local_ranks_filter;
  /// --log-line-prefix-template: the console prefix, with ${rank}, ${local_rank}, ${role_name} and
  /// ${hostname} filled in (torchrun's macros). Unset: "[rank ${rank}] ".
  std::optional<std::string> line_prefix_template;
  /// --duplicate-stdout-filters / --duplicate-stderr-filters: lines that contain any of these are also
  /// written (prefixed) to attempt_<K>/filtered_stdout.log / filtered_stderr.log.
  std::vector<std::string> duplicate_stdout_filters;
  std::vector<std::string> duplicate_stderr_filters;

  /// Whether anything here needs files (and so a log directory).
  bool needs_files() const;
};

/// A line prefix: `line_template` with torchrun's macros ${rank}, ${local_rank}, ${role_name} and
/// ${hostname} filled in (others left as written, as Python's Template.safe_substitute does).
std::string render_line_prefix(const std::string& line_template, int rank, int local_rank,
                               const std::string& role, const std::string& hostname);

/// torchrun's --local-ranks-filter value "0,1,2". Throws LaunchError naming local_ranks_filter otherwise.
std::set<int> parse_local_ranks_filter(const std::string& text);

/// torchrun's comma-separated filter list: "a,b" -> {"a", "b"}; ",," stands for a comma inside a filter.
std::vector<std::string> parse_filter_list(const std::string& text);

}  // namespace lockstep::launch
